//! Leaked API keys, revoked on report: GitHub's secret-scanning partner program and an
//! admin's or operator's pasted list.
//!
//! This folder owns:
//! - `report`: a report as it arrives: GitHub's signature over the exact body (ECDSA P-256,
//!   SHA-256) checked before anything else, then the body's shape; a pasted list's checks;
//! - `keys`: the `[secret_scanning]` settings and GitHub's public keys document, read from a
//!   file or fetched, and cached;
//! - `revoke`: the use case: every valid aigw key of a report revoked in one transaction with
//!   the report's record (a signed body is accepted once) and its audit events, each through
//!   the revocation path all use cases share, so the change feed refuses the keys on every
//!   node before the answer; then each key's owner is e-mailed (`key_leaked`, see
//!   [`crate::email`]), and the keys are returned ([`LeakedKey`]).
//!
//! What is not an aigw key (prefix, length, alphabet or CRC32 checksum wrong) is answered a
//! false positive without any database read. The security policy (docs/safeguards.md, "Leaked
//! keys") says how aigw is registered with GitHub.

mod keys;
mod report;
mod revoke;

pub use keys::{
    parse_keys_document, GithubKeys, KeysError, SecretScanningConfig, GITHUB_KEYS_URL,
    MAX_KEYS_DOCUMENT_BYTES, MIN_RELOAD_INTERVAL,
};
pub use report::{
    parse_github_report, pasted_list, token_hash, verify_github_report, ReportError, ReportedToken,
    VerifiedReport, KEY_ID_HEADER, MAX_LABEL_CHARS, MAX_REPORT_TOKENS, MAX_TOKEN_BYTES,
    MAX_URL_CHARS, SIGNATURE_HEADER,
};
pub use revoke::{Finding, Label, LeakError, LeakOutcome, LeakedKey, TokenVerdict};

use crate::account_email::AccountEmail;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::metrics::Metrics;
use crate::Clock;

/// Leaked keys: revocation of keys reported by GitHub's secret scanning or pasted by an
/// administrator or the operator, and the owners told by e-mail. Built from the
/// [`ServiceContext`] and the account e-mail flows ([`AccountEmail`], which send the notice).
#[derive(Debug, Clone)]
pub struct LeakReports {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) metrics: Metrics,
    pub(crate) email: AccountEmail,
}

impl LeakReports {
    /// The leak use cases on `ctx`, telling owners through `email`.
    pub fn new(ctx: &ServiceContext, email: AccountEmail) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            metrics: ctx.metrics.clone(),
            email,
        }
    }
}
