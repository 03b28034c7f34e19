//! Who a request is: authentication of presented credentials into a [`Principal`]
//! ([`Authenticator`]), and the proof that a principal passed the who-may-call-what table
//! ([`Authorized`]), which every use case takes.

use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::credential_cache::{CachedKey, TeamStanding};
use crate::error::ServiceError;
use crate::levels::PlatformSpend;
use crate::levels::{LimitLevel, ScopeRequired, TeamScope, UserScope};
use crate::tokens::TokenIssuer;
use crate::Clock;
use aigw_domain::access::{authorize, CallerCredential, Operation, RouteOperation};
use aigw_domain::{
    ApiKeyId, ApiKeySecret, Permission, PermissionSet, PresentedCredential, Role, SessionId, UserId,
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
        /// The owner's budget across all their keys (`None`: a team key, or no user budget).
        user_budget: Option<Arc<UserScope>>,
        /// A team of the owner's whose members must call the gateway with keys scoped to it,
        /// or the platform's `gateway.require_team_scope`, that refuses this key's gateway
        /// calls (only for a key with no team).
        scope_required: Option<ScopeRequired>,
    },
}

impl Principal {
    /// The user behind the credential.
    pub fn user_id(&self) -> &UserId {
        match self {
            Principal::User { user_id, .. } | Principal::ApiKey { user_id, .. } => user_id,
        }
    }

    /// The id that acted, for the audit trail: the key's for an API key, else the user's.
    pub fn actor(&self) -> &str {
        match self {
            Principal::User { user_id, .. } => user_id,
            Principal::ApiKey { key_id, .. } => key_id,
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
            .map_err(|d| ServiceError::Forbidden { required: d.required, current: d.current })?;
        if operation == Operation::ChatCompletion {
            self.check_gateway_scope()?;
        }
        Ok(())
    }

    /// The caller's key policy (`None` for an access token).
    pub fn key_policy(&self) -> Option<&ApiKeyPolicy> {
        match self {
            Principal::User { .. } => None,
            Principal::ApiKey { policy, .. } => Some(policy),
        }
    }

    /// The levels a call by this caller counts against: its key, for a team-scoped key the
    /// member and the team, and the owner's budget (none for an access token).
    pub(crate) fn limit_levels(&self) -> impl Iterator<Item = LimitLevel<'_>> {
        let key = match self {
            Principal::User { .. } => None,
            Principal::ApiKey { key_id, policy, team, user_budget, .. } => {
                Some((key_id, policy, team, user_budget))
            }
        };
        key.into_iter().flat_map(|(key_id, policy, team, user)| {
            LimitLevel::of_key(key_id, policy, team.as_ref(), user.as_ref())
        })
    }

    /// Refuses a gateway call by a key that must be scoped to a team and is not.
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] with `required: team_scoped_key` and, in `current`, the
    /// team whose setting (or the platform setting) refuses it.
    fn check_gateway_scope(&self) -> Result<(), ServiceError> {
        let Principal::ApiKey { scope_required: Some(required), .. } = self else {
            return Ok(());
        };
        let current = match required {
            ScopeRequired::Platform => {
                "the platform requires every gateway key to be scoped to a team".to_owned()
            }
            ScopeRequired::Team(team_id) => {
                format!("team {team_id} requires its members' gateway keys to be scoped to it")
            }
        };
        Err(ServiceError::Forbidden { required: "team_scoped_key".to_owned(), current })
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

/// Authentication of presented credentials (access tokens and API keys) into a [`Principal`]:
/// what every authenticated request goes through first. Built from the [`ServiceContext`].
#[derive(Debug, Clone)]
pub struct Authenticator {
    clock: Clock,
    cache: CredentialCache,
    tokens: Arc<TokenIssuer>,
    spend: Arc<PlatformSpend>,
}

impl Authenticator {
    /// Authentication on `ctx`.
    pub fn new(ctx: &ServiceContext) -> Self {
        Self {
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            tokens: ctx.tokens.clone(),
            spend: ctx.spend.clone(),
        }
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
                self.cache.ensure_session_live(&claims.sid).await?;
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

    /// Looks up a well-formed key (checksum already verified), from the credential cache when
    /// it can be trusted, and refuses it when unknown, revoked or expired. Expiry is checked on
    /// every request; the use is noted for `last_used_at` off the request path.
    pub(crate) async fn authenticate_api_key(
        &self,
        key: ApiKeySecret,
    ) -> Result<Principal, ServiceError> {
        let entry = self.cache.api_key(key.digest().as_str()).await?;
        let Some(found) = entry.value.as_ref() else {
            return Err(ServiceError::invalid_credential("the API key is invalid"));
        };
        let now = self.clock.now();
        if found.revoked {
            return Err(ServiceError::revoked_credential("the API key has been revoked"));
        }
        if found.replaced_until.is_some_and(|end| end <= now) {
            return Err(ServiceError::invalid_credential(
                "the API key has been rotated; use the new key",
            ));
        }
        if found.expires_at.is_some_and(|e| e <= now) {
            return Err(ServiceError::expired_credential("the API key has expired"));
        }
        // The owner's account, from the user cache (a disable reaches every node through the
        // feed, as `user_changed`). A team key belongs to its team: the account of the user
        // who created it does not matter to it.
        let mut user_budget = None;
        if !found.team_owned {
            match self.cache.user(&found.user_id).await? {
                Some(owner) if owner.disabled => {
                    return Err(ServiceError::invalid_credential("the account is disabled"));
                }
                Some(owner) => {
                    user_budget =
                        self.spend.user_scope(&found.user_id, owner.budget_micros).map(Arc::new);
                }
                None => return Err(ServiceError::invalid_credential("the API key is invalid")),
            }
        }
        let scope_required = self.scope_required(found).await?;
        // The team's limits, and the owner's membership for a member's key (a removal reaches
        // every node through the feed, as `team_changed`).
        let team = match &found.team_id {
            None => None,
            Some(team_id) => {
                let member = (!found.team_owned).then_some(found.user_id.as_str());
                match self.cache.team_standing(team_id, member).await? {
                    TeamStanding::Active(scope) => Some(scope),
                    TeamStanding::NotMember => {
                        return Err(ServiceError::Forbidden {
                            required: "team_member".to_owned(),
                            current: "the key's owner is not a member of its team".to_owned(),
                        })
                    }
                    TeamStanding::Deleted => {
                        return Err(ServiceError::revoked_credential(
                            "the API key has been revoked",
                        ))
                    }
                }
            }
        };
        self.cache.note_key_use(found, now);
        Ok(Principal::ApiKey {
            key_id: found.key_id.as_str().into(),
            user_id: found.user_id.as_str().into(),
            permissions: found.permissions.clone(),
            policy: found.policy.clone(),
            team,
            user_budget,
            scope_required,
        })
    }

    /// What refuses the gateway calls of `key` when it has no team and may call the gateway:
    /// the platform's `gateway.require_team_scope`, else a team of its owner's with
    /// `require_scoped_keys` (from the credential cache).
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is needed and down.
    async fn scope_required(&self, key: &CachedKey) -> Result<Option<ScopeRequired>, ServiceError> {
        if key.team_id.is_some() || !key.permissions.allows(Permission::AiGateway) {
            return Ok(None);
        }
        if self.spend.require_team_scope {
            return Ok(Some(ScopeRequired::Platform));
        }
        let team = self.cache.team_requiring_scoped_keys(&key.user_id).await?;
        Ok(team.map(ScopeRequired::Team))
    }
}
