//! What every handler shares: [`AppState`], built once by `crate::startup` and handed to
//! actix-web as app data. It names the services of `aigw_service` and the HTTP edge's own
//! parts (rate limits, metrics) and depends on nothing else of this crate, so extractors,
//! middleware and handlers reach it without going through the start-up code.

use crate::observe::Telemetry;
use crate::rate_limit::RequestLimits;
use aigw_service::{AuthService, Gateway, UsageService};

/// What every handler shares.
#[derive(Debug, Clone)]
pub(crate) struct AppState {
    /// Accounts, sessions, keys.
    pub(crate) auth: AuthService,
    /// Chat routing.
    pub(crate) gateway: Gateway,
    /// Rate limits and the client-address rule (`[rate_limit]`).
    pub(crate) limits: RequestLimits,
    /// `Idempotency-Key` records (see `crate::idempotency`).
    pub(crate) idempotency: aigw_service::idempotency::Idempotency,
    /// The usage ledger (`[usage]`).
    pub(crate) usage: UsageService,
    /// This server's metrics (`GET /metrics`, see `crate::observe`).
    pub(crate) telemetry: Telemetry,
    /// GitHub's secret-scanning keys, when `secret_scanning.enabled` (see
    /// `aigw_service::leaks`).
    pub(crate) secret_scanning: Option<aigw_service::leaks::GithubKeys>,
}
