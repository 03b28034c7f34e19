//! The capability services wired together ([`Services`]): one place that knows which service
//! is built on which, so that the HTTP layer and the operator's commands take the one service
//! each handler calls without repeating the wiring.
//!
//! Built bottom to top: the [`ServiceContext`] (shared ground), then [`Mfa`] and
//! [`AccountEmail`], then [`Accounts`] and [`ApiKeys`], then [`Administration`], [`Teams`]
//! and [`LeakReports`]; [`Authenticator`] stands beside them on the context alone.

use crate::account_email::{AccountEmail, AccountMail};
use crate::accounts::Accounts;
use crate::admin::Administration;
use crate::api_keys::ApiKeys;
use crate::auth::Authenticator;
use crate::context::ServiceContext;
use crate::leaks::LeakReports;
use crate::mfa::Mfa;
use crate::teams::Teams;

/// Every capability service of the account and credential side, built on one context.
#[derive(Debug, Clone)]
pub struct Services {
    /// The shared ground (database, clock, credential cache, metrics, tokens).
    pub context: ServiceContext,
    /// Authentication of presented credentials.
    pub authenticator: Authenticator,
    /// Registration, login, sessions, the owner's own account.
    pub accounts: Accounts,
    /// E-mail verification, e-mail change, password reset.
    pub account_email: AccountEmail,
    /// The TOTP second factor.
    pub mfa: Mfa,
    /// API keys.
    pub api_keys: ApiKeys,
    /// Teams.
    pub teams: Teams,
    /// Administration and the audit trail.
    pub admin: Administration,
    /// Leaked keys.
    pub leaks: LeakReports,
}

impl Services {
    /// Every service on `context`, account messages sent through `mail` (`None`: logged as
    /// not sent).
    pub fn new(context: ServiceContext, mail: Option<AccountMail>) -> Self {
        let mut account_email = AccountEmail::new(&context);
        if let Some(mail) = mail {
            account_email = account_email.with_account_mail(mail);
        }
        let mfa = Mfa::new(&context);
        let accounts = Accounts::new(&context, mfa.clone(), account_email.clone());
        let api_keys = ApiKeys::new(&context, account_email.clone());
        let admin = Administration::new(&context, accounts.clone(), api_keys.clone(), mfa.clone());
        Self {
            authenticator: Authenticator::new(&context),
            teams: Teams::new(&context, api_keys.clone(), account_email.clone()),
            leaks: LeakReports::new(&context, account_email.clone()),
            accounts,
            account_email,
            mfa,
            api_keys,
            admin,
            context,
        }
    }
}
