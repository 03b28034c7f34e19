//! Administration and the audit trail: what an administrator does with every user and API key
//! ([`manage`]) and with invitations to register ([`invitations`]); [`Admin`], in [`caller`],
//! is the proof that a caller may. The audit trail is written by every use case through
//! `crate::audit`.

pub mod caller;
pub mod invitations;
pub mod listing;
pub mod manage;

pub use caller::Admin;
pub use invitations::{CreatedInvitation, InvitationFilter, InvitationView};
pub use manage::UserUpdate;

use crate::accounts::Accounts;
use crate::api_keys::ApiKeys;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::mfa::Mfa;
use crate::Clock;

/// Administration: users, invitations, every API key, the audit trail. Built from the
/// [`ServiceContext`], the account use cases that make users ([`Accounts`]), the key
/// revocation every revocation shares ([`ApiKeys`]) and the second factor administrators may
/// be required to use ([`Mfa`]).
#[derive(Debug, Clone)]
pub struct Administration {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) accounts: Accounts,
    pub(crate) keys: ApiKeys,
    pub(crate) mfa: Mfa,
}

impl Administration {
    /// The administrative use cases on `ctx`.
    pub fn new(ctx: &ServiceContext, accounts: Accounts, keys: ApiKeys, mfa: Mfa) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            accounts,
            keys,
            mfa,
        }
    }
}
