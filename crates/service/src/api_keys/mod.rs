//! API keys: creation, listing, rotation and revocation by their owner ([`manage`]), and the
//! policy a request sets on a key (budget, rpm/tpm, models, expiry: [`policy`]). Teams' keys are
//! `crate::teams`', leaked keys' revocation `crate::leaks`'.

pub mod manage;
pub mod policy;

pub use manage::NewApiKey;

use crate::account_email::AccountEmail;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::levels::PlatformSpend;
use crate::metrics::Metrics;
use crate::Clock;
use std::sync::Arc;

/// API keys: create, list, change, rotate, revoke and delete, for their owner (and, through
/// `crate::teams`, a team's). Built from the [`ServiceContext`] and the account e-mail flows
/// ([`AccountEmail`]: a key needs a verified address where `auth.email_verification` asks).
#[derive(Debug, Clone)]
pub struct ApiKeys {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) metrics: Metrics,
    pub(crate) spend: Arc<PlatformSpend>,
    pub(crate) email: AccountEmail,
}

impl ApiKeys {
    /// The API key use cases on `ctx`, checking addresses with `email`.
    pub fn new(ctx: &ServiceContext, email: AccountEmail) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            metrics: ctx.metrics.clone(),
            spend: ctx.spend.clone(),
            email,
        }
    }
}
pub use policy::{ApiKeyPatch, KeyPolicyRequest};
