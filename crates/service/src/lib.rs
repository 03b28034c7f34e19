#![warn(missing_docs)]
//! # aigw-service
//!
//! The use cases of aigw, independent of HTTP: registration, login, sessions and
//! refresh-token rotation, logout, API keys, authentication and authorization of presented
//! credentials, the routing of chat completions to upstream providers, and the usage ledger
//! that meters them.
//!
//! Blocking work never runs on the caller's async worker: database calls go through
//! [`db::Db::run`] (tokio's blocking pool, gated by the connection count) and argon2 through
//! [`password::PasswordHasher`] (its own small thread pool). Errors are [`ServiceError`]s,
//! one variant per kind of answer.

pub mod account_email;
pub mod accounts;
pub mod admin;
pub mod api_keys;
pub mod auth;
pub mod clock;
pub mod config;
pub mod credential_cache;
pub mod db;
pub mod email;
pub mod error;
pub mod gateway;
pub mod idempotency;
pub mod leaks;
pub mod limits;
pub mod metrics;
pub mod mfa;
pub mod paging;
pub mod password;
pub mod rate_limit;
pub mod redis_link;
pub mod seal;
pub mod teams;
pub mod tokens;
pub mod usage;
pub mod views;

pub use accounts::sessions::{ClientInfo, LogoutScope};
pub use admin::UserUpdate;
pub use api_keys::{ApiKeyPatch, KeyPolicyRequest, NewApiKey};
pub use auth::{AuthService, Authorized, Principal};
pub use clock::Clock;
pub use config::{
    AuthConfig, GatewayConfig, KeyAlgorithm, ProviderConfig, ProviderKind, RegistrationMode,
    SigningKeyConfig, TeamCreation,
};
pub use credential_cache::{BackgroundTasks, CredentialCache, CredentialCacheConfig, FeedHealth};
pub use db::Db;
pub use error::ServiceError;
pub use gateway::{ChatReply, Gateway};
pub use metrics::Metrics;
pub use mfa::{LoginOutcome, MfaChallenge, SecondFactor};
pub use paging::{Page, PageRequest};
pub use rate_limit::{Decision, LimitKey, Policy, RateLimitConfig, RateLimiter};
pub use tokens::{SigningKey, TokenIssuer};
pub use usage::config::{PriceConfig, TokenizerConfig, TokenizerName, UsageConfig};
pub use usage::UsageService;
pub use views::{ApiKeyView, CreatedApiKey, TokenSet, UserView};
