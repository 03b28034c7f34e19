//! API keys: creation, listing, rotation and revocation by their owner ([`manage`]), and the
//! policy a request sets on a key (budget, rpm/tpm, models, expiry: [`policy`]). Teams' keys are
//! `crate::teams`', leaked keys' revocation `crate::leaks`'.

pub mod manage;
pub mod policy;

pub use manage::NewApiKey;

use crate::account_email::AccountEmail;
use crate::context::ServiceContext;

/// API keys: create, list, change, rotate, revoke and delete, for their owner (and, through
/// `crate::teams`, a team's). Built from the [`ServiceContext`] and the account e-mail flows
/// ([`AccountEmail`]: a key needs a verified address where `auth.email_verification` asks).
#[derive(Debug, Clone)]
pub struct ApiKeys {
    pub(crate) ctx: ServiceContext,
    pub(crate) email: AccountEmail,
}

impl ApiKeys {
    /// The API key use cases on `ctx`, checking addresses with `email`.
    pub fn new(ctx: ServiceContext, email: AccountEmail) -> Self {
        Self { ctx, email }
    }
}
pub use policy::{ApiKeyPatch, KeyPolicyRequest};
