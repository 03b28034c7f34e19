//! The ground every capability service stands on: the database, the password hashing threads,
//! the access-token issuer, the account settings, the sealer, the credential cache with its
//! change feed, the metrics and the clock ([`ServiceContext`]).
//!
//! This module imports no capability: `accounts`, `api_keys`, `teams` and the others are built
//! from a [`ServiceContext`] and each keeps a handle to only the parts it uses (every part is
//! shared behind an `Arc`).

use crate::config::AuthConfig;
use crate::credential_cache::{BackgroundTasks, CredentialCache, CredentialCacheConfig};
use crate::db::Db;
use crate::error::ServiceError;
use crate::password::PasswordHasher;
use crate::seal::Sealer;
use crate::tokens::TokenIssuer;
use aigw_domain::PasswordPolicy;
use std::sync::Arc;

/// What the capability services share (cheap to clone: every part is a handle).
#[derive(Debug, Clone)]
pub struct ServiceContext {
    pub(crate) db: Db,
    pub(crate) passwords: PasswordHasher,
    pub(crate) tokens: Arc<TokenIssuer>,
    pub(crate) config: Arc<AuthConfig>,
    pub(crate) password_policy: PasswordPolicy,
    pub(crate) sealer: Sealer,
    pub(crate) cache: CredentialCache,
    pub(crate) metrics: crate::metrics::Metrics,
    /// The time the account and credential rules read (see [`crate::Clock`]).
    pub(crate) clock: crate::Clock,
    /// The platform's spend rules every key's authentication applies.
    pub(crate) spend: Arc<crate::levels::PlatformSpend>,
}

impl ServiceContext {
    /// Builds the context. Its credential cache does nothing until
    /// [`ServiceContext::start_background`] (until then every lookup reads the database).
    ///
    /// # Errors
    /// [`ServiceError::Internal`] when the argon2 parameters are invalid.
    pub fn new(
        db: Db,
        tokens: TokenIssuer,
        config: AuthConfig,
        cache_config: CredentialCacheConfig,
    ) -> Result<Self, ServiceError> {
        let passwords = PasswordHasher::new(&config.argon2)?;
        let password_policy = PasswordPolicy {
            min_chars: config.password_min_chars.max(1),
            max_chars: config.password_max_chars.clamp(
                config.password_min_chars.max(1),
                aigw_domain::user::PASSWORD_HARD_MAX_CHARS,
            ),
            blocklist: config.password_blocklist,
        };
        let sealer = Sealer::new(tokens.key_materials());
        // Every access token of a session revoked longer ago than this has expired.
        let horizon_secs = tokens.ttl_secs().saturating_add(config.leeway_secs).saturating_add(60);
        let horizon = i64::try_from(horizon_secs)
            .ok()
            .and_then(chrono::Duration::try_seconds)
            .unwrap_or(chrono::Duration::MAX);
        let cache = CredentialCache::new(
            db.clone(),
            cache_config,
            horizon,
            config.refresh_reuse_grace_secs,
        );
        Ok(Self {
            db,
            passwords,
            tokens: Arc::new(tokens),
            config: Arc::new(config),
            password_policy,
            sealer,
            cache,
            metrics: crate::metrics::Metrics::default(),
            clock: crate::Clock::system(),
            spend: Arc::default(),
        })
    }

    /// Applies the platform's spend rules (`[gateway]` `user_budget_usd`,
    /// `user_budget_period`, `require_team_scope`) to every key (default: none).
    pub fn with_platform_spend(mut self, spend: crate::levels::PlatformSpend) -> Self {
        self.spend = Arc::new(spend);
        self
    }

    /// Counts refresh-token rotations, e-mails, keys and the rest into `metrics`
    /// (docs/operations.md).
    pub fn with_metrics(mut self, metrics: crate::metrics::Metrics) -> Self {
        self.metrics = metrics;
        self
    }

    /// Reads the time from `clock` (tests move an adjustable one instead of sleeping).
    pub fn with_clock(mut self, clock: crate::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The argon2 work running or waiting now, and the threads that run it (capacity gauges).
    pub fn password_queue(&self) -> (usize, usize) {
        self.passwords.load()
    }

    /// Starts the credential cache's supervised background work (change-feed tailer,
    /// `last_used_at` writer, pruning); see [`crate::credential_cache`]. Keep the handle: the
    /// work stops when it is dropped or shut down.
    pub fn start_background(&self) -> BackgroundTasks {
        self.cache.start()
    }

    /// The credential cache (for its health in readiness probes).
    pub fn credential_cache(&self) -> &CredentialCache {
        &self.cache
    }

    /// The database handle.
    pub fn db(&self) -> &Db {
        &self.db
    }

    /// The access-token issuer (for the JWK Set).
    pub fn tokens(&self) -> &TokenIssuer {
        &self.tokens
    }

    /// The platform's spend rules (users' budgets, the team-scope rule).
    pub fn platform_spend(&self) -> &crate::levels::PlatformSpend {
        &self.spend
    }

    /// The time the account and credential rules read.
    pub fn clock(&self) -> &crate::Clock {
        &self.clock
    }
}
