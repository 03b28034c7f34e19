#![warn(missing_docs)]
//! # aigw-domain
//!
//! The pure core of aigw, the account and credential service of an AI gateway: the types and
//! rules that every other layer shares, and that other backend developers can embed without
//! pulling in a web framework, a database driver or an async runtime.
//!
//! What lives here:
//!
//! - [`user`]: validated e-mail addresses, display names, passwords and roles;
//! - [`permission`]: the five API key permissions of the contract and the rule that `admin`
//!   includes every other one;
//! - [`api_key`] and [`refresh_token`]: the opaque credential formats (prefix, random body,
//!   checksum) and their SHA-256 digests, the only form in which they are stored;
//! - [`account_token`]: the single-use tokens of e-mail verification, e-mail change and
//!   password reset links;
//! - [`credential`]: how an `Authorization` header is told apart into access token or API key;
//! - [`claims`]: the claims of a JWT access token (RFC 7519, RFC 8725);
//! - [`audit`]: the actions the audit trail records;
//! - [`mfa`]: the second factor's formats: TOTP codes, recovery codes, MFA challenge tokens
//!   and how a session was made (`amr`);
//! - [`change`]: the kinds of credential change that the change feed carries to every node;
//! - [`id`]: typed ids of users, API keys, teams and sessions;
//! - [`error`]: the stable, machine-readable error codes of the contract;
//! - [`validation`]: the `field` / `issue` pair that every `invalid_request` error names;
//! - [`time`]: how timestamps are rendered (RFC 3339, UTC, `Z`);
//! - [`redact`]: URLs without their passwords, for logs and messages;
//! - [`key_policy`]: what an API key may spend and call (models, budget, rates, metadata);
//! - [`team`]: team roles, the levels a call's limits are checked at, and their counters;
//! - [`usage`]: the usage ledger's record, outcomes, prices in integer micro-USD and UTC day
//!   ranges.
//!
//! Nothing in this crate performs I/O. Random secrets are generated from a caller-supplied
//! cryptographically secure RNG ([`rand_core::CryptoRng`]), so the caller decides where
//! randomness comes from (the service uses the operating system's RNG).

pub mod access;
pub mod account_token;
pub mod api_key;
pub mod audit;
pub mod change;
pub mod claims;
pub mod credential;
pub mod digest;
pub mod error;
pub mod id;
pub mod invitation;
pub mod key_policy;
pub mod ledger;
pub mod mfa;
pub mod permission;
pub mod redact;
pub mod refresh_token;
pub mod sso;
pub mod team;
pub mod time;
pub mod usage;
pub mod user;
pub mod validation;

mod base62_random;

pub use api_key::{ApiKeyError, ApiKeySecret};
pub use audit::{AuditAction, RecordedAction};
pub use change::CredentialChangeKind;
pub use claims::{AccessClaims, ACCESS_TOKEN_TYPE};
pub use credential::{CredentialError, PresentedCredential};
pub use digest::TokenDigest;
pub use error::ErrorCode;
pub use id::{
    AccountTokenId, ApiKeyId, InvitationId, MfaChallengeId, RecoveryCodeId, RefreshTokenId,
    SessionId, TeamId, TeamInvitationId, UserId,
};
pub use key_policy::{BudgetMode, BudgetPeriod, KeyMetadata, ModelPatterns};
pub use permission::{Permission, PermissionSet};
pub use refresh_token::RefreshTokenSecret;
pub use team::{CounterSubject, LimitScope, TeamRole};
pub use user::{domain_in, email_skeleton, normalize_email, Email, PasswordPolicy, Role, UserName};
pub use validation::FieldError;
