//! The account and credential service: construction, and authentication of presented
//! credentials into a [`Principal`]. The use cases live in `accounts`, `sessions` and
//! `api_keys`, each an `impl AuthService` block.

use crate::config::AuthConfig;
use crate::credential_cache::{BackgroundTasks, CredentialCache, CredentialCacheConfig};
use crate::db::Db;
use crate::error::ServiceError;
use crate::limits::levels::{LimitLevel, TeamScope};
use crate::password::PasswordHasher;
use crate::seal::Sealer;
use crate::tokens::TokenIssuer;
use aigw_domain::access::{authorize, CallerCredential, Operation, RouteOperation};
use aigw_domain::{
    ApiKeyId, PasswordPolicy, PermissionSet, PresentedCredential, Role, SessionId, UserId,
};
use aigw_persistence::models::ApiKeyPolicy;
use std::sync::Arc;

/// Who a request authenticated as.
#[derive(Debug, Clone)]
pub enum Principal {
    /// A user holding an access token of session `session_id`.
    User {
        /// The user's id.
        user_id: UserId,
        /// The session the access token belongs to (`sid`).
        session_id: SessionId,
        /// The role claim.
        role: Role,
        /// Whether the session was made with a second factor (`amr` has `otp`).
        second_factor: bool,
    },
    /// An API key.
    ApiKey {
        /// The key's id.
        key_id: ApiKeyId,
        /// The key's owner.
        user_id: UserId,
        /// The key's permissions.
        permissions: PermissionSet,
        /// The key's models, budget and rate limits, shared with the credential
        /// cache entry.
        policy: Arc<ApiKeyPolicy>,
        /// The team the key is scoped to, with the team's and the member's limits.
        team: Option<Arc<TeamScope>>,
    },
}

impl Principal {
    /// The user behind the credential.
    pub fn user_id(&self) -> &UserId {
        match self {
            Principal::User { user_id, .. } | Principal::ApiKey { user_id, .. } => user_id,
        }
    }

    /// Checks the who-may-call-what table for `operation` (only through [`Authorized::check`],
    /// whose proof the use cases take: the table's 403 is never raised by a use case).
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] with `required` and `current`.
    pub(crate) fn authorize(&self, operation: Operation) -> Result<(), ServiceError> {
        let caller = match self {
            Principal::User { .. } => CallerCredential::AccessToken,
            Principal::ApiKey { permissions, .. } => CallerCredential::ApiKey(permissions),
        };
        authorize(caller, operation)
            .map_err(|d| ServiceError::Forbidden { required: d.required, current: d.current })
    }

    /// The caller's key policy (`None` for an access token).
    pub fn key_policy(&self) -> Option<&ApiKeyPolicy> {
        match self {
            Principal::User { .. } => None,
            Principal::ApiKey { policy, .. } => Some(policy),
        }
    }

    /// The levels a call by this caller counts against: its key, and for a team-scoped key
    /// the member and the team (none for an access token).
    pub(crate) fn limit_levels(&self) -> impl Iterator<Item = LimitLevel<'_>> {
        let key = match self {
            Principal::User { .. } => None,
            Principal::ApiKey { key_id, policy, team, .. } => Some((key_id, policy, team)),
        };
        key.into_iter()
            .flat_map(|(key_id, policy, team)| LimitLevel::of_key(key_id, policy, team.as_ref()))
    }

    /// The team the caller's key is scoped to.
    pub fn team(&self) -> Option<&TeamScope> {
        match self {
            Principal::User { .. } => None,
            Principal::ApiKey { team, .. } => team.as_deref(),
        }
    }

    /// Whether the caller may call `model`: always for an access token; for a key, when its
    /// `allowed_models` and its team's (if any) both allow it (the intersection).
    pub fn allows_model(&self, model: &str) -> bool {
        self.authorize_model(model).is_ok()
    }

    /// Checks [`Principal::allows_model`].
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] with `required: model:<name>` and `current`: the allowed
    /// patterns of the level that refused (the key's, else its team's), comma-separated.
    pub fn authorize_model(&self, model: &str) -> Result<(), ServiceError> {
        let key = self.key_policy().and_then(|p| p.allowed_models.as_ref());
        let team = self.team().and_then(|t| t.policy.allowed_models.as_ref());
        for allowed in key.into_iter().chain(team) {
            if !allowed.allows(model) {
                return Err(ServiceError::Forbidden {
                    required: format!("model:{}", model.chars().take(128).collect::<String>()),
                    current: allowed.joined(),
                });
            }
        }
        Ok(())
    }
}

/// Proof that a caller passed the who-may-call-what table for operation `O` (a type of
/// [`aigw_domain::access::op`]): made only by [`Authorized::check`], taken by every use case
/// in place of a [`Principal`], so none can be called unchecked and none checks again. It
/// derefs to the [`Principal`].
#[derive(Debug, Clone)]
pub struct Authorized<O> {
    principal: Principal,
    operation: std::marker::PhantomData<fn() -> O>,
}

impl<O: RouteOperation> Authorized<O> {
    /// Checks the table for `O` (pure, no I/O).
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] with `required` and `current`.
    pub fn check(principal: Principal) -> Result<Self, ServiceError> {
        principal.authorize(O::OPERATION)?;
        Ok(Self { principal, operation: std::marker::PhantomData })
    }
}

impl<O> Authorized<O> {
    /// The checked caller.
    pub fn principal(&self) -> &Principal {
        &self.principal
    }
}

impl<O> std::ops::Deref for Authorized<O> {
    type Target = Principal;

    fn deref(&self) -> &Principal {
        &self.principal
    }
}

/// Registration, login, sessions, refresh-token rotation and API keys.
#[derive(Debug, Clone)]
pub struct AuthService {
    pub(crate) db: Db,
    pub(crate) passwords: PasswordHasher,
    pub(crate) tokens: Arc<TokenIssuer>,
    pub(crate) config: Arc<AuthConfig>,
    pub(crate) password_policy: PasswordPolicy,
    pub(crate) sealer: Sealer,
    pub(crate) cache: CredentialCache,
    pub(crate) metrics: crate::metrics::Metrics,
    /// The time the account use cases read (see [`crate::Clock`]).
    pub(crate) clock: crate::Clock,
    /// Where account messages go (see [`crate::account_email`]).
    pub(crate) mail: Option<crate::account_email::mail::AccountMail>,
}

impl AuthService {
    /// Builds the service. Its credential cache does nothing until
    /// [`AuthService::start_background`] (until then every lookup reads the database).
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
            mail: None,
        })
    }

    /// Counts refresh-token rotations, grace replays and detected reuses into `metrics`
    /// (`aigw_refresh_total{outcome}`, docs/operations.md).
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

    /// Authenticates the value of an `Authorization` header (`None` when absent).
    ///
    /// Access tokens are verified offline (signature, claims) and then their session is checked
    /// to be live; API keys are checked for format and checksum without I/O, then looked up by
    /// digest, and refused when unknown, revoked or expired.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] for a missing or invalid credential;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn authenticate(
        &self,
        authorization: Option<&str>,
    ) -> Result<Principal, ServiceError> {
        let credential = PresentedCredential::from_authorization(authorization).map_err(|e| {
            ServiceError::Unauthorized {
                hint: e.hint(),
                token_presented: e.token_presented(),
                refusal: crate::error::Refusal::Invalid,
            }
        })?;
        match credential {
            PresentedCredential::AccessToken(token) => {
                let claims = self.tokens.verify(&token, self.clock.now())?;
                self.ensure_session_live(&claims.sid).await?;
                // aigw signs only roles it knows: another is a token it did not issue.
                let role = claims.role.parse().map_err(|()| {
                    ServiceError::invalid_credential("the access token is invalid")
                })?;
                let amr = claims.amr.iter().flatten().map(String::as_str);
                let second_factor =
                    aigw_domain::mfa::SessionAmr::from_values(amr).has_second_factor();
                Ok(Principal::User {
                    user_id: claims.sub.into(),
                    session_id: claims.sid.into(),
                    role,
                    second_factor,
                })
            }
            PresentedCredential::ApiKey(key) => self.authenticate_api_key(key).await,
        }
    }
}
