//! Accounts: registration, login and the current user ([`registration`]), sessions and the
//! rotation of their refresh tokens ([`sessions`]), and what a user does with their own account
//! ([`self_service`]: password, sessions, audit trail). A login whose account has the second factor on
//! is completed with a code ([`mfa_login`]). Account e-mail lives in `crate::account_email`,
//! the second factor's enrollment and checks in `crate::mfa`; the credentials they are built on
//! (`crate::password`, `crate::tokens`) belong to the shared ground ([`ServiceContext`]).

pub mod budget;
pub mod mfa_login;
pub mod registration;
pub mod self_service;
pub mod sessions;
pub mod sso;
pub(crate) mod sso_groups;
mod sso_rule_teams;

use crate::account_email::AccountEmail;
use crate::context::ServiceContext;
use crate::mfa::Mfa;

/// Accounts and sessions: registration, login (with the second factor when it is on),
/// refresh-token rotation, logout, and the owner's own account. Built from the
/// [`ServiceContext`], the second factor's checks ([`Mfa`]) and the account e-mail flows
/// ([`AccountEmail`], for the address verification a registration starts).
#[derive(Debug, Clone)]
pub struct Accounts {
    pub(crate) ctx: ServiceContext,
    pub(crate) mfa: Mfa,
    pub(crate) email: AccountEmail,
}

impl Accounts {
    /// The accounts service on `ctx`, checking second factors with `mfa` and sending account
    /// e-mail through `email`.
    pub fn new(ctx: ServiceContext, mfa: Mfa, email: AccountEmail) -> Self {
        Self { ctx, mfa, email }
    }
}
