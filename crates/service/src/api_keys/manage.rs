//! API keys: create, list, change (PATCH), rotate, revoke, delete, and authenticate (creating
//! one needs an access token; PATCH and rotation: docs/budgets.md).

use crate::api_keys::policy::{ApiKeyPatch, KeyPolicyRequest};
use crate::api_keys::ApiKeys;
use crate::audit::Event;
use crate::auth::{Authorized, Principal};
use crate::credential_cache;
use crate::error::ServiceError;
use crate::idempotency::Recording;
use crate::metrics::name as metric;
use crate::paging::{page_of, Page, PageRequest, Paging};
use crate::views::{ApiKeyView, CreatedApiKey};
use aigw_domain::access::op;
use aigw_domain::{
    time, ApiKeySecret, BudgetPeriod, CredentialChangeKind, FieldError, Permission, PermissionSet,
    UserName,
};
use aigw_domain::{ApiKeyId, AuditAction, TeamId, UserId};
use aigw_persistence::models::ApiKeyRow;
use aigw_persistence::{api_keys, teams, transaction, DbConnection};
use chrono::Duration;
use chrono::{DateTime, Utc};
use rand::rngs::OsRng;

/// Longest key id echoed back in a 404, in characters.
const MAX_ECHOED_ID: usize = 64;

/// A request to create an API key, as parsed from JSON (still unvalidated).
#[derive(Debug, Clone, Default)]
pub struct NewApiKey {
    /// Label (required, 1 to 100 characters).
    pub name: String,
    /// Permission names (required, non-empty, each one of the five).
    pub permissions: Vec<String>,
    /// Optional expiry, an RFC 3339 timestamp in the future.
    pub expires_at: Option<String>,
    /// Models, budget, rate limits and metadata.
    pub policy: KeyPolicyRequest,
    /// The team to scope the key to (the caller must be a member): its calls then count
    /// against the key, the member and the team.
    pub team_id: Option<String>,
}

/// Longest grace period of a rotation, in seconds (7 days).
pub const MAX_ROTATION_GRACE_SECS: i64 = 604_800;
/// Grace period of a rotation when none is asked for, in seconds (24 hours).
pub const DEFAULT_ROTATION_GRACE_SECS: i64 = 86_400;

/// Whose key a new key is and what it is scoped to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KeyScope {
    /// The caller's own key, scoped to a team they are a member of when given.
    Own(Option<TeamId>),
    /// A team key of the team.
    Team(TeamId),
    /// A key of member `member` scoped to team `team`, made by one of the team's owners or
    /// admins (or a platform admin, `platform_admin`).
    ForMember {
        /// The team.
        team: TeamId,
        /// The member whose key it is.
        member: UserId,
        /// Whether the caller is a platform admin.
        platform_admin: bool,
    },
}

impl KeyScope {
    /// The key's owner, when the caller is `caller`.
    fn owner<'a>(&'a self, caller: &'a UserId) -> &'a UserId {
        match self {
            KeyScope::ForMember { member, .. } => member,
            KeyScope::Own(_) | KeyScope::Team(_) => caller,
        }
    }

    /// The team the key is scoped to.
    fn team(&self) -> Option<&TeamId> {
        match self {
            KeyScope::Own(team) => team.as_ref(),
            KeyScope::Team(team) | KeyScope::ForMember { team, .. } => Some(team),
        }
    }

    /// Inserts `row` (made by `caller`) once [`Self::check`] allows it, in the caller's
    /// transaction, with a write first so that SQLite takes its write lock up front (see
    /// `aigw_persistence::transaction`): the team's lock, else the key itself (a refusal
    /// rolls it back).
    fn store(
        &self,
        conn: &mut DbConnection,
        row: &ApiKeyRow,
        caller: &UserId,
    ) -> Result<(), ServiceError> {
        if matches!(self, KeyScope::Own(None)) {
            api_keys::insert(conn, row)?;
            self.check(conn, row, caller)
        } else {
            self.check(conn, row, caller)?;
            Ok(api_keys::insert(conn, row)?)
        }
    }

    /// Checks, in the transaction that inserts `row` (by `caller`), that it may be created:
    /// the team's rules for who makes which key, and for a key with `ai_gateway` and no team,
    /// that no team of its owner's requires scoped keys.
    fn check(
        &self,
        conn: &mut DbConnection,
        row: &ApiKeyRow,
        caller: &UserId,
    ) -> Result<(), ServiceError> {
        match self {
            KeyScope::Own(None) => {
                if row.permissions.allows(Permission::AiGateway) {
                    if let Some(team) = teams::requiring_scoped_keys(conn, &row.user_id)? {
                        return Err(FieldError::new(
                            "team_id",
                            format!("is required: team {team} requires its members' gateway keys to be scoped to it"),
                        )
                        .into());
                    }
                }
                Ok(())
            }
            KeyScope::Own(Some(team)) => {
                crate::team_access::check_key_creation(conn, team, &row.user_id, false)
            }
            KeyScope::Team(team) => {
                crate::team_access::check_key_creation(conn, team, caller, true)
            }
            KeyScope::ForMember { team, member, platform_admin } => {
                crate::team_access::check_key_for_member(
                    conn,
                    team,
                    caller,
                    member,
                    *platform_admin,
                )
            }
        }
    }
}

/// Who a key belongs to (owned form of [`api_keys::KeyOwner`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Owner {
    /// A user's own key.
    User(UserId),
    /// A team key, by team id.
    Team(TeamId),
}

impl Owner {
    fn get(&self) -> api_keys::KeyOwner<'_> {
        match self {
            Owner::User(id) => api_keys::KeyOwner::User(id),
            Owner::Team(id) => api_keys::KeyOwner::Team(id),
        }
    }
}

fn not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "api_key", id: id.chars().take(MAX_ECHOED_ID).collect() }
}

impl ApiKeys {
    /// Creates an API key for the caller. Only an access token may do this.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `name`, `permissions[i]` or `expires_at` (not RFC 3339,
    /// or not in the future); [`ServiceError::NotFound`] (`resource: team`) when `team_id` is
    /// not a team of the caller; [`ServiceError::EmailUnverified`] when
    /// `auth.email_verification = "required"` and the caller's address is not verified;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn create_api_key(
        &self,
        principal: &Authorized<op::CreateApiKey>,
        request: NewApiKey,
    ) -> Result<CreatedApiKey, ServiceError> {
        self.create_api_key_recorded(principal, request, None).await
    }

    /// [`ApiKeys::create_api_key`] for an idempotent request: the answer is recorded in
    /// the transaction that stores the key (see [`crate::idempotency`]).
    ///
    /// # Errors
    /// As [`ApiKeys::create_api_key`]; [`ServiceError::IdempotencyInFlight`] when the
    /// claim was lost meanwhile (nothing is stored then).
    pub async fn create_api_key_recorded(
        &self,
        principal: &Authorized<op::CreateApiKey>,
        request: NewApiKey,
        recording: Option<Recording<CreatedApiKey>>,
    ) -> Result<CreatedApiKey, ServiceError> {
        let scope = KeyScope::Own(request.team_id.as_deref().map(TeamId::from));
        self.create_key(principal.principal(), request, scope, recording).await
    }

    /// Creates a key by `principal` (an access token), as `scope` says (the caller's right to
    /// create it is checked in the same transaction).
    ///
    /// # Errors
    /// As [`ApiKeys::create_api_key`]; [`ServiceError::Invalid`] on `team_id` when the key
    /// has `ai_gateway`, no team, and `gateway.require_team_scope` or a team of its owner's
    /// requires scoped keys.
    pub(crate) async fn create_key(
        &self,
        principal: &Principal,
        request: NewApiKey,
        scope: KeyScope,
        recording: Option<Recording<CreatedApiKey>>,
    ) -> Result<CreatedApiKey, ServiceError> {
        self.email.ensure_email_verified(principal).await?;
        let name = UserName::parse(&request.name, "name")?;
        let permissions = PermissionSet::parse_request(&request.permissions)?;
        if scope.team().is_none()
            && permissions.allows(Permission::AiGateway)
            && self.spend.require_team_scope
        {
            return Err(FieldError::new(
                "team_id",
                "is required: every key with ai_gateway must be scoped to a team",
            )
            .into());
        }
        let now = self.clock.now();
        let expires_at = match request.expires_at.as_deref() {
            None => None,
            Some(raw) => Some(parse_future_timestamp(raw, now)?),
        };
        let policy = request.policy.parse()?;
        let secret = ApiKeySecret::generate(&mut OsRng);
        let caller = principal.user_id().clone();
        let row = ApiKeyRow {
            id: ApiKeyId::generate(),
            user_id: scope.owner(&caller).clone(),
            name: name.into_string(),
            key_prefix: secret.key_prefix().to_owned(),
            key_hash: secret.digest().into_string(),
            permissions,
            expires_at,
            created_at: now,
            revoked_at: None,
            last_used_at: None,
            policy,
            previous_key_hash: None,
            previous_key_expires_at: None,
            rotated_at: None,
            team_id: scope.team().cloned(),
            team_owned: matches!(scope, KeyScope::Team(_)),
            created_by: caller.clone(),
        };
        let created =
            CreatedApiKey { view: ApiKeyView::from(&row), key: secret.expose().to_owned() };
        let answer = created.clone();
        let key_hash = row.key_hash.clone();
        let details = serde_json::json!({
            "name": row.name,
            "permissions": row.permissions.names(),
            "expires_at": row.expires_at.map(time::format_timestamp),
            "team_id": row.team_id,
        });
        let action = if row.team_owned {
            AuditAction::TeamApiKeyCreated
        } else {
            AuditAction::ApiKeyCreated
        };
        let event = Event::new(action, Some(&row.user_id), Some(principal.actor()), now)
            .target(&row.id)
            .details(details);
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    scope.store(conn, &row, &caller)?;
                    event.insert(conn)?;
                    if let Some(recording) = &recording {
                        recording.record(conn, &answer)?;
                    }
                    Ok::<_, ServiceError>(())
                })
            })
            .await?;
        self.cache.key_created(&key_hash);
        self.metrics.count(metric::API_KEYS_CREATED_TOTAL, &[]);
        tracing::info!(event = "api_key_created", key_id = %created.view.id, user_id = %principal.user_id(), team_id = ?created.view.team_id, "API key created");
        Ok(created)
    }

    /// The caller's API keys, newest first.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn list_api_keys(
        &self,
        principal: &Authorized<op::ReadAccount>,
    ) -> Result<Vec<ApiKeyView>, ServiceError> {
        let user_id = principal.user_id().to_owned();
        let rows = self.db.run(move |conn| Ok(api_keys::list_for_user(conn, &user_id)?)).await?;
        // With a use this node noted but has not written yet (see `credential_cache`).
        Ok(rows.iter().map(|row| self.view_of(row)).collect())
    }

    /// One page of the caller's API keys (not team keys), newest first: what the console
    /// lists, a page costing the same whatever the number of keys.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `limit` or `cursor`; [`ServiceError::Unavailable`] when
    /// the database is down.
    pub async fn list_api_keys_page(
        &self,
        principal: &Authorized<op::ReadAccount>,
        page: &PageRequest,
    ) -> Result<Page<ApiKeyView>, ServiceError> {
        let Paging { limit, before } = page.parse()?;
        let user_id = principal.user_id().to_owned();
        let rows = self
            .db
            .run(move |conn| {
                Ok(api_keys::page_for(
                    conn,
                    api_keys::KeyOwner::User(&user_id),
                    before.as_deref(),
                    limit + 1,
                )?)
            })
            .await?;
        Ok(page_of(rows, limit, |r| &r.id, |r| self.view_of(r)))
    }

    /// One of the caller's keys (not a team key).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] when the caller has no key `id`;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn api_key(
        &self,
        principal: &Authorized<op::ReadAccount>,
        id: &ApiKeyId,
    ) -> Result<ApiKeyView, ServiceError> {
        let (key_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let row = self
            .db
            .run(move |conn| {
                Ok(api_keys::find_for(conn, &key_id, api_keys::KeyOwner::User(&user_id))?)
            })
            .await?;
        row.map(|r| self.view_of(&r)).ok_or_else(|| not_found(id))
    }

    /// Revokes one of the caller's keys (idempotent: revoking again keeps the first time).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] when the caller has no key `id` (another user's key included);
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn revoke_api_key(
        &self,
        principal: &Authorized<op::ChangeApiKey>,
        id: &ApiKeyId,
    ) -> Result<ApiKeyView, ServiceError> {
        let owner = Owner::User(principal.user_id().to_owned());
        self.revoke_api_key_of(id, Some(owner), principal.actor()).await
    }

    /// Revokes key `id` of `owner` (of anyone when `None`: an admin's revocation) and waits
    /// until every live node has applied it.
    pub(crate) async fn revoke_api_key_of(
        &self,
        id: &ApiKeyId,
        owner: Option<Owner>,
        actor: &str,
    ) -> Result<ApiKeyView, ServiceError> {
        let key_id = id.to_owned();
        let now = self.clock.now();
        let event = Event::new(AuditAction::ApiKeyRevoked, None, Some(actor), now).target(id);
        let (row, change) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    let by_admin = owner.is_none();
                    let Some(row) = revoke_in_transaction(
                        conn,
                        &key_id,
                        owner.as_ref(),
                        &event,
                        by_admin,
                        None,
                        now,
                    )?
                    else {
                        return Ok(None);
                    };
                    let kind = CredentialChangeKind::ApiKeyRevoked;
                    let change = credential_cache::append(conn, kind, &row.id, now)?;
                    Ok::<_, ServiceError>(Some((row, change)))
                })
            })
            .await?
            .ok_or_else(|| not_found(id))?;
        self.cache.publish(vec![change]).await;
        self.metrics.count(metric::API_KEYS_REVOKED_TOTAL, &[("how", "revoke")]);
        tracing::info!(event = "api_key_revoked", key_id = %row.id, user_id = %row.user_id, "API key revoked");
        Ok(ApiKeyView::from(&row))
    }

    /// Changes one of the caller's keys (`PATCH`): the fields present in `patch` are set,
    /// those `null` cleared. The change reaches every node through the change feed before
    /// this returns (or within `max_feed_lag_ms` + 0.5 s).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming the first invalid field; [`ServiceError::NotFound`]
    /// when the caller has no key `id`; [`ServiceError::Unavailable`] when the database is
    /// down.
    pub async fn update_api_key(
        &self,
        principal: &Authorized<op::UpdateApiKey>,
        id: &ApiKeyId,
        patch: ApiKeyPatch,
    ) -> Result<ApiKeyView, ServiceError> {
        let owner = Owner::User(principal.user_id().to_owned());
        self.update_api_key_of(owner, principal.principal(), id, patch).await
    }

    /// [`ApiKeys::update_api_key`] of a key of `owner`, by `principal`.
    pub(crate) async fn update_api_key_of(
        &self,
        owner: Owner,
        principal: &Principal,
        id: &ApiKeyId,
        patch: ApiKeyPatch,
    ) -> Result<ApiKeyView, ServiceError> {
        let now = self.clock.now();
        let changes = patch.parse(|raw| parse_future_timestamp(raw, now))?;
        let key_id = id.to_owned();
        let event = Event::new(AuditAction::ApiKeyUpdated, None, Some(principal.actor()), now)
            .target(id)
            .details(serde_json::json!({"fields": changes.field_names()}));
        let (row, change) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    let Some(row) = api_keys::update(conn, &key_id, owner.get(), &changes)? else {
                        return Ok(None);
                    };
                    if !changes.is_empty() {
                        event.clone().user(&row.user_id).insert(conn)?;
                    }
                    if changes.budget_period.is_some() {
                        // A new period opens a new counter from the ledger; the counter named
                        // by the new period's first day (when one is open) counts the same
                        // days, running calls included, so it stays. A new limit alone keeps
                        // every counter: it never forgets what is in flight.
                        let period = row.policy.budget_period.unwrap_or(BudgetPeriod::Total);
                        let keep = crate::governance::budget::period_name(period, now);
                        aigw_persistence::budgets::forget_except(conn, &row.id, &keep)?;
                    }
                    let change = if changes.is_empty() {
                        None
                    } else {
                        let kind = CredentialChangeKind::ApiKeyChanged;
                        Some(credential_cache::append(conn, kind, &row.id, now)?)
                    };
                    Ok::<_, ServiceError>(Some((row, change)))
                })
            })
            .await?
            .ok_or_else(|| not_found(id))?;
        if let Some(change) = change {
            self.cache.publish(vec![change]).await;
            tracing::info!(key_id = %row.id, "API key changed");
        }
        Ok(self.view_of(&row))
    }

    /// Rotates the secret of one of the caller's keys: a new secret (and `key_prefix`) under
    /// the same id, limits and usage; the old secret keeps working for `grace_period_secs`
    /// (0 to [`MAX_ROTATION_GRACE_SECS`], default [`DEFAULT_ROTATION_GRACE_SECS`]) and then
    /// answers 401 "rotated". A secret replaced by an earlier rotation stops at once: a key
    /// has at most two live secrets.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `grace_period_secs` out of range, or on `id` when the key is revoked;
    /// [`ServiceError::NotFound`] when the caller has no key `id`;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn rotate_api_key(
        &self,
        principal: &Authorized<op::UpdateApiKey>,
        id: &ApiKeyId,
        grace_period_secs: Option<i64>,
    ) -> Result<CreatedApiKey, ServiceError> {
        let owner = Owner::User(principal.user_id().to_owned());
        self.rotate_api_key_of(owner, principal.principal(), id, grace_period_secs).await
    }

    /// [`ApiKeys::rotate_api_key`] of a key of `owner`, by `principal`.
    pub(crate) async fn rotate_api_key_of(
        &self,
        owner: Owner,
        principal: &Principal,
        id: &ApiKeyId,
        grace_period_secs: Option<i64>,
    ) -> Result<CreatedApiKey, ServiceError> {
        let grace = grace_period_secs.unwrap_or(DEFAULT_ROTATION_GRACE_SECS);
        if !(0..=MAX_ROTATION_GRACE_SECS).contains(&grace) {
            return Err(FieldError::new(
                "grace_period_secs",
                "must be an integer from 0 to 604800",
            )
            .into());
        }
        let now = self.clock.now();
        let secret = ApiKeySecret::generate(&mut OsRng);
        let (prefix, hash) = (secret.key_prefix().to_owned(), secret.digest().into_string());
        let key_id = id.to_owned();
        let new_hash = hash.clone();
        let event = Event::new(AuditAction::ApiKeyRotated, None, Some(principal.actor()), now)
            .target(id)
            .details(serde_json::json!({"grace_period_secs": grace, "key_prefix": prefix}));
        let outcome = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // The write comes first: on SQLite a read first would make the write a
                    // lock upgrade, refused at once (503) when another writer is active.
                    let grace_end = now + Duration::seconds(grace);
                    let rotated = api_keys::rotate(
                        conn,
                        &key_id,
                        owner.get(),
                        &prefix,
                        &hash,
                        grace_end,
                        now,
                    )?;
                    let Some(row) = api_keys::find_for(conn, &key_id, owner.get())? else {
                        return Ok(None);
                    };
                    if !rotated {
                        // The key exists, so it is revoked.
                        return Ok(Some(Err(())));
                    }
                    event.clone().user(&row.user_id).insert(conn)?;
                    let kind = CredentialChangeKind::ApiKeyChanged;
                    let change = credential_cache::append(conn, kind, &row.id, now)?;
                    Ok::<_, ServiceError>(Some(Ok((row, change))))
                })
            })
            .await?
            .ok_or_else(|| not_found(id))?;
        let (row, change) = outcome.map_err(|_| {
            ServiceError::from(FieldError::new(
                "id",
                "the API key is revoked and cannot be rotated",
            ))
        })?;
        self.cache.key_created(&new_hash);
        self.cache.publish(vec![change]).await;
        tracing::info!(key_id = %row.id, grace_secs = grace, "API key rotated");
        Ok(CreatedApiKey { view: self.view_of(&row), key: secret.expose().to_owned() })
    }

    /// The view of `row`, with a use this node noted but has not written yet.
    pub(crate) fn view_of(&self, row: &ApiKeyRow) -> ApiKeyView {
        let mut view = ApiKeyView::from(row);
        view.last_used_at = view.last_used_at.max(self.cache.pending_use(&row.id));
        view
    }

    /// Deletes one of the caller's keys.
    ///
    /// # Errors
    /// As [`ApiKeys::revoke_api_key`].
    pub async fn delete_api_key(
        &self,
        principal: &Authorized<op::ChangeApiKey>,
        id: &ApiKeyId,
    ) -> Result<(), ServiceError> {
        let owner = Owner::User(principal.user_id().to_owned());
        self.delete_api_key_of(owner, principal.principal(), id).await
    }

    /// [`ApiKeys::delete_api_key`] of a key of `owner`, by `principal`.
    pub(crate) async fn delete_api_key_of(
        &self,
        owner: Owner,
        principal: &Principal,
        id: &ApiKeyId,
    ) -> Result<(), ServiceError> {
        let key_id = id.to_owned();
        let user_id = principal.user_id().to_owned();
        let now = self.clock.now();
        let event =
            Event::new(AuditAction::ApiKeyDeleted, Some(&user_id), Some(principal.actor()), now)
                .target(id);
        let change = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !api_keys::delete(conn, &key_id, owner.get())? {
                        return Ok(None);
                    }
                    // The key's budget counters go with it (its rate windows expire alone).
                    aigw_persistence::budgets::forget(conn, &key_id)?;
                    event.insert(conn)?;
                    let kind = CredentialChangeKind::ApiKeyDeleted;
                    credential_cache::append(conn, kind, &key_id, now).map(Some)
                })
            })
            .await?
            .ok_or_else(|| not_found(id))?;
        self.cache.publish(vec![change]).await;
        self.metrics.count(metric::API_KEYS_REVOKED_TOTAL, &[("how", "delete")]);
        tracing::info!(event = "api_key_deleted", key_id = %id, user_id = %principal.user_id(), "API key deleted");
        Ok(())
    }
}

/// Revokes key `id` of `owner` (of anyone when `None`) inside the caller's transaction
/// (idempotent: revoking again keeps the first time) and records its `api_key_revoked` event,
/// made from `event` (its user and target set to the key's owner and id), with details `name`, `by_admin` and, when given, `reason` (e.g.
/// `leaked`). Returns the row, or `None` when there is no such key. The caller appends the
/// `api_key_revoked` change as one of the transaction's last statements and publishes it once
/// committed (see `credential_cache::append`): the one revocation path of every use case.
///
/// # Errors
/// On database failure (the caller's transaction then rolls back).
pub(crate) fn revoke_in_transaction(
    conn: &mut aigw_persistence::DbConnection,
    id: &ApiKeyId,
    owner: Option<&Owner>,
    event: &Event,
    by_admin: bool,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<ApiKeyRow>, ServiceError> {
    let Some(row) = api_keys::revoke(conn, id, owner.map(Owner::get), now)? else {
        return Ok(None);
    };
    let mut details = serde_json::json!({"name": row.name, "by_admin": by_admin});
    if let Some(reason) = reason {
        details["reason"] = serde_json::Value::from(reason);
    }
    event.clone().user(&row.user_id).target(&row.id).details(details).insert(conn)?;
    Ok(Some(row))
}

/// Parses `expires_at` as RFC 3339 and requires it to be after `now` and no later than the end
/// of year 9999 UTC ([`aigw_domain::time::LATEST_MICROS`]).
pub(crate) fn parse_future_timestamp(
    raw: &str,
    now: DateTime<Utc>,
) -> Result<DateTime<Utc>, FieldError> {
    let t = DateTime::parse_from_rfc3339(raw.trim())
        .map_err(|_| {
            FieldError::new(
                "expires_at",
                "must be an RFC 3339 timestamp with a time zone, e.g. 2027-01-01T00:00:00Z",
            )
        })?
        .with_timezone(&Utc);
    let t = aigw_domain::time::truncate_to_micros(t);
    if t <= now {
        return Err(FieldError::new("expires_at", "must be in the future"));
    }
    if !aigw_domain::time::within_latest(t) {
        return Err(FieldError::new("expires_at", "must be no later than 9999-12-31T23:59:59Z"));
    }
    Ok(t)
}
