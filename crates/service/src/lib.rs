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
pub mod alerts;
pub mod api_keys;
pub mod audit;
pub mod auth;
pub mod clock;
pub mod config;
pub mod context;
pub mod credential_cache;
pub mod db;
pub mod dialect;
pub mod email;
pub mod error;
pub mod gateway;
pub mod governance;
pub mod idempotency;
pub mod leaks;
pub mod levels;
pub mod metrics;
pub mod mfa;
pub mod paging;
pub mod password;
pub mod prices;
pub mod rate_limit;
#[cfg(test)]
mod redaction_tests;
pub mod redis_link;
mod redis_sentinel;
pub mod seal;
pub mod services;
pub mod spend_signal;
pub mod sso;
pub mod sso_config;
pub mod team_access;
pub mod teams;
pub mod tokens;
pub mod usage;
pub mod views;

pub use account_email::AccountEmail;
pub use accounts::sessions::{ClientInfo, LogoutScope};
pub use accounts::Accounts;
pub use admin::Administration;
pub use admin::UserUpdate;
pub use api_keys::ApiKeys;
pub use api_keys::{ApiKeyPatch, KeyPolicyRequest, NewApiKey};
pub use auth::{Authenticator, Authorized, Principal};
pub use clock::Clock;
pub use config::{
    AuthConfig, BreakerConfig, GatewayConfig, KeyAlgorithm, ProviderConfig, ProviderKind,
    RegistrationMode, SigningKeyConfig, TeamCreation,
};
pub use context::ServiceContext;
pub use credential_cache::{BackgroundTasks, CredentialCache, CredentialCacheConfig, FeedHealth};
pub use db::Db;
pub use error::ServiceError;
pub use gateway::{Gateway, GatewayReply, StoredCall, StoredRequest};
pub use leaks::LeakReports;
pub use metrics::Metrics;
pub use mfa::Mfa;
pub use mfa::{LoginOutcome, MfaChallenge, SecondFactor};
pub use paging::{Page, PageRequest};
pub use rate_limit::{Decision, LimitKey, Policy, RateLimitConfig, RateLimiter};
pub use services::Services;
pub use teams::Teams;
pub use tokens::{SigningKey, TokenIssuer};
pub use usage::config::{PriceConfig, TokenizerConfig, TokenizerName, UsageConfig};
pub use usage::UsageService;
pub use views::{ApiKeyView, CreatedApiKey, TokenSet, UserView};
