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
use crate::config::AuthConfig;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::levels::PlatformSpend;
use crate::metrics::Metrics;
use crate::mfa::Mfa;
use crate::password::PasswordHasher;
use crate::seal::Sealer;
use crate::tokens::TokenIssuer;
use crate::Clock;
use aigw_domain::PasswordPolicy;
use std::sync::Arc;

/// Accounts and sessions: registration, login (with the second factor when it is on),
/// refresh-token rotation, logout, and the owner's own account. Built from the
/// [`ServiceContext`], the second factor's checks ([`Mfa`]) and the account e-mail flows
/// ([`AccountEmail`], for the address verification a registration starts).
#[derive(Debug, Clone)]
pub struct Accounts {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) config: Arc<AuthConfig>,
    pub(crate) tokens: Arc<TokenIssuer>,
    pub(crate) passwords: PasswordHasher,
    pub(crate) password_policy: PasswordPolicy,
    pub(crate) sealer: Sealer,
    pub(crate) metrics: Metrics,
    pub(crate) spend: Arc<PlatformSpend>,
    pub(crate) mfa: Mfa,
    pub(crate) email: AccountEmail,
}

/// The accounts single sign-on admits (docs/sso.md): which account a verified identity signs
/// in to, its memberships from the provider's groups, and its session, issued as after a
/// login by [`Accounts`].
#[derive(Debug, Clone)]
pub struct SsoAccounts {
    pub(crate) accounts: Accounts,
}

impl SsoAccounts {
    /// Single sign-on's admissions, issuing sessions through `accounts`.
    pub fn new(accounts: Accounts) -> Self {
        Self { accounts }
    }
}

impl Accounts {
    /// The accounts service on `ctx`, checking second factors with `mfa` and sending account
    /// e-mail through `email`.
    pub fn new(ctx: &ServiceContext, mfa: Mfa, email: AccountEmail) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            config: ctx.config.clone(),
            tokens: ctx.tokens.clone(),
            passwords: ctx.passwords.clone(),
            password_policy: ctx.password_policy,
            sealer: ctx.sealer.clone(),
            metrics: ctx.metrics.clone(),
            spend: ctx.spend.clone(),
            mfa,
            email,
        }
    }
}
