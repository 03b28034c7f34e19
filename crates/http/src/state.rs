//! What every handler shares: [`AppState`], built once by `crate::startup` and handed to
//! actix-web as app data. It names the services of `aigw_service` and the HTTP edge's own
//! parts (rate limits, metrics) and depends on nothing else of this crate, so extractors,
//! middleware and handlers reach it without going through the start-up code.

use crate::observe::Telemetry;
use crate::rate_limit::RequestRateLimits;
use aigw_service::{
    AccountEmail, Accounts, Administration, ApiKeys, Authenticator, Gateway, LeakReports, Mfa,
    ServiceContext, Teams, UsageService,
};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// What every handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    /// The shared ground of the account services (database, clock, credential cache).
    pub(crate) context: ServiceContext,
    /// Authentication of presented credentials.
    pub(crate) authenticator: Authenticator,
    /// Registration, login, sessions, the owner's own account.
    pub(crate) accounts: Accounts,
    /// E-mail verification, e-mail change, password reset.
    pub(crate) account_email: AccountEmail,
    /// The TOTP second factor.
    pub(crate) mfa: Mfa,
    /// API keys.
    pub(crate) api_keys: ApiKeys,
    /// Teams.
    pub(crate) teams: Teams,
    /// Administration and the audit trail.
    pub(crate) admin: Administration,
    /// Leaked keys.
    pub(crate) leaks: LeakReports,
    /// Single sign-on through OpenID Connect providers.
    pub(crate) sso: aigw_service::sso::Sso,
    /// Budget alerts and team webhooks.
    pub(crate) alerts: aigw_service::alerts::BudgetAlerts,
    /// Chat routing.
    pub(crate) gateway: Gateway,
    /// Rate limits and the client-address rule (`[rate_limit]`).
    pub(crate) limits: RequestRateLimits,
    /// `Idempotency-Key` records (see `crate::idempotency`).
    pub(crate) idempotency: aigw_service::idempotency::Idempotency,
    /// The usage ledger (`[usage]`).
    pub(crate) usage: UsageService,
    /// This server's metrics (`GET /metrics`, see `crate::observe`).
    pub(crate) telemetry: Telemetry,
    /// GitHub's secret-scanning keys, when `secret_scanning.enabled` (see
    /// `aigw_service::leaks`).
    pub(crate) secret_scanning: Option<aigw_service::leaks::GithubKeys>,
    /// Set once the node was asked to stop and waits out `server.drain_delay_secs`: `/readyz`
    /// answers 503 meanwhile, so that load balancers take it out before its listener closes.
    pub(crate) draining: Arc<AtomicBool>,
}
