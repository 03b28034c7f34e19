//! Administration: every user and every API key, for callers with role `admin`
//! (an access token, or an API key with `admin` whose owner is an admin).
//!
//! The role is read from the account (the user cache, invalidated by the change feed), never
//! from the access token's `role` claim, so a demotion holds on every node within the feed's
//! bound although older tokens still carry `admin`.

use crate::accounts::Accounts;
use crate::admin::caller::Admin;
use crate::admin::Administration;
use crate::audit::Event;
use crate::auth::Principal;
use crate::credential_cache;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest, Paging};
use crate::views::{ApiKeyView, UserView};
use aigw_domain::access::{authorize_as, CallerCredential, Operation};
use aigw_domain::key_policy::usd_to_micros;
use aigw_domain::AuditAction;
use aigw_domain::{ApiKeyId, UserId};
use aigw_domain::{CredentialChangeKind, FieldError, Role};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::models::UserRow;
use aigw_persistence::{api_keys, sessions, transaction, users, DbConnection};
use chrono::{DateTime, Utc};

/// Longest id echoed back in a 404, in characters.
const MAX_ECHOED_ID: usize = 64;

/// `PATCH /admin/users/{id}`: the fields to change (absent: unchanged).
#[derive(Debug, Clone, Copy, Default)]
pub struct UserUpdate {
    /// The new role.
    pub role: Option<Role>,
    /// Disable (`true`) or re-enable (`false`) the account.
    pub disabled: Option<bool>,
    /// The user's own budget across all their keys, USD per `gateway.user_budget_period`
    /// (`Some(None)`: clear it, so that `gateway.user_budget_usd` applies).
    pub budget_usd: Option<Option<f64>>,
}

/// Most users [`Administration::admin_users_by_id`] reads at once (the largest page).
pub const MAX_USERS_BY_ID: usize = 200;

/// A key-prefix filter: 1 to [`KEY_PREFIX_LEN`](aigw_domain::api_key::KEY_PREFIX_LEN)
/// characters of the keys' alphabet (ASCII letters, digits, `_`).
fn check_key_prefix(prefix: &str) -> Result<(), FieldError> {
    let len = prefix.chars().count();
    let alphabet = prefix.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if (1..=aigw_domain::api_key::KEY_PREFIX_LEN).contains(&len) && alphabet {
        Ok(())
    } else {
        Err(FieldError::new(
            "key_prefix",
            format!(
                "must be the start of an API key: 1 to {} letters, digits or _",
                aigw_domain::api_key::KEY_PREFIX_LEN
            ),
        ))
    }
}

fn user_not_found(id: &str) -> ServiceError {
    ServiceError::NotFound { resource: "user", id: id.chars().take(MAX_ECHOED_ID).collect() }
}

impl Administration {
    /// Checks that `principal` may administer, with the role its account has now, and with
    /// the second factor when `auth.require_mfa_for_admins` asks for it.
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] (`required: admin`, `current: user`, or for a key without
    /// the `admin` permission its permissions); [`ServiceError::SecondFactorRequired`]; [`ServiceError::Unauthorized`] when the
    /// account no longer exists; [`ServiceError::Unavailable`] when the database is down.
    pub async fn authorize_admin(&self, principal: &Principal) -> Result<Admin, ServiceError> {
        let role = self
            .cache
            .user(principal.user_id())
            .await?
            .ok_or_else(|| ServiceError::revoked_credential("the account no longer exists"))?
            .role;
        let caller = match principal {
            Principal::User { .. } => CallerCredential::AccessToken,
            Principal::ApiKey { permissions, .. } => CallerCredential::ApiKey(permissions),
        };
        authorize_as(caller, role, Operation::Administer)
            .map_err(|d| ServiceError::Forbidden { required: d.required, current: d.current })?;
        self.mfa.require_admin_second_factor(principal).await?;
        Ok(Admin { user_id: principal.user_id().to_string(), actor: principal.actor().to_owned() })
    }

    /// Every user, newest first, whose e-mail starts with `email_prefix` (when given).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `limit` or `cursor`.
    pub async fn admin_list_users(
        &self,
        _admin: &Admin,
        email_prefix: Option<String>,
        page: &PageRequest,
    ) -> Result<Page<UserView>, ServiceError> {
        let Paging { limit, before } = page.parse()?;
        let prefix = email_prefix.map(|p| aigw_domain::normalize_email(&p));
        let rows = self
            .db
            .run(move |conn| {
                Ok(users::list(conn, prefix.as_deref(), before.as_deref(), limit + 1)?)
            })
            .await?;
        Ok(page_of(rows, limit, |r| &r.id, |r| UserView::from(r)))
    }

    /// One user.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`user`).
    pub async fn admin_get_user(
        &self,
        _admin: &Admin,
        id: &UserId,
    ) -> Result<UserView, ServiceError> {
        let wanted = id.to_owned();
        let row = self.db.run(move |conn| Ok(users::find_by_id(conn, &wanted)?)).await?;
        row.as_ref().map(UserView::from).ok_or_else(|| user_not_found(id))
    }

    /// Changes a user's role and whether the account is disabled. Disabling ends every session
    /// of the user and makes their API keys answer 401 (`the account is disabled`) on every
    /// node; re-enabling restores the keys, not the sessions. Answers once every live node has
    /// applied the change (bounded, as a revocation).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `role` or `disabled`
    /// when an admin would demote or disable themselves (so an installation keeps an admin),
    /// or on `body` when neither is given; [`ServiceError::NotFound`] (`user`).
    pub async fn admin_update_user(
        &self,
        admin: &Admin,
        id: &UserId,
        update: UserUpdate,
    ) -> Result<UserView, ServiceError> {
        if update.role.is_none() && update.disabled.is_none() && update.budget_usd.is_none() {
            return Err(FieldError::new("body", "must set role, disabled or budget_usd").into());
        }
        if let Some(Some(usd)) = update.budget_usd {
            usd_to_micros(usd).map_err(|e| FieldError::new("budget_usd", e.issue))?;
        }
        if admin.user_id() == id {
            if update.disabled == Some(true) {
                return Err(
                    FieldError::new("disabled", "an admin cannot disable themselves").into()
                );
            }
            if update.role.is_some_and(|r| r != Role::Admin) {
                return Err(FieldError::new("role", "an admin cannot demote themselves").into());
            }
        }
        let wanted = id.to_owned();
        let now = self.clock.now();
        let template =
            Event::new(AuditAction::RoleChanged, Some(id), Some(admin.actor()), now).target(id);
        let (row, changes) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| apply_user_update(conn, &wanted, update, &template, now))
            })
            .await?
            .ok_or_else(|| user_not_found(id))?;
        if !changes.is_empty() {
            self.cache.publish(changes).await;
            tracing::info!(
                user_id = %row.id,
                role = %row.role,
                disabled = row.disabled_at.is_some(),
                by = %admin.user_id(),
                "user changed by an admin"
            );
        }
        Ok(UserView::from(&row))
    }

    /// Every API key (of `user_id` when given; whose visible `key_prefix` starts with
    /// `key_prefix` when given), newest first. Never a secret.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `key_prefix` (not 1 to 12 letters, digits or `_`),
    /// `limit` or `cursor`.
    pub async fn admin_list_api_keys(
        &self,
        _admin: &Admin,
        user_id: Option<String>,
        key_prefix: Option<String>,
        page: &PageRequest,
    ) -> Result<Page<ApiKeyView>, ServiceError> {
        if let Some(prefix) = &key_prefix {
            check_key_prefix(prefix)?;
        }
        let Paging { limit, before } = page.parse()?;
        let rows = self
            .db
            .run(move |conn| {
                Ok(api_keys::list_all(
                    conn,
                    user_id.as_deref(),
                    key_prefix.as_deref(),
                    before.as_deref(),
                    limit + 1,
                )?)
            })
            .await?;
        Ok(page_of(rows, limit, |r| &r.id, |r| ApiKeyView::from(r)))
    }

    /// The users with ids `ids` that exist (at most [`MAX_USERS_BY_ID`] ids; more is refused),
    /// in no particular order: the owners of a page of keys.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `ids` when there are too many.
    pub async fn admin_users_by_id(
        &self,
        _admin: &Admin,
        ids: &[String],
    ) -> Result<Vec<UserView>, ServiceError> {
        if ids.len() > MAX_USERS_BY_ID {
            return Err(FieldError::new("ids", format!("at most {MAX_USERS_BY_ID}")).into());
        }
        let wanted = ids.to_vec();
        let rows = self.db.run(move |conn| Ok(users::find_by_ids(conn, &wanted)?)).await?;
        Ok(rows.iter().map(UserView::from).collect())
    }

    /// Revokes any user's key (idempotent: revoking again keeps the first time); refused on
    /// every node once this answers, as the owner's own revocation.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`api_key`).
    pub async fn admin_revoke_api_key(
        &self,
        admin: &Admin,
        id: &ApiKeyId,
    ) -> Result<ApiKeyView, ServiceError> {
        self.keys.revoke_api_key_of(id, None, admin.actor()).await
    }

    /// Every event (of account `user_id` when given), newest first.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `action`, `limit` or `cursor`;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn admin_audit_events(
        &self,
        _admin: &crate::admin::caller::Admin,
        user_id: Option<String>,
        action: Option<String>,
        page: &PageRequest,
    ) -> Result<Page<crate::audit::AuditEventView>, ServiceError> {
        crate::audit::list(&self.db, user_id, action, page).await
    }
}

/// Applies `update` to user `id` inside the caller's transaction: the role and the disabled
/// state, an audit event per change (made from `template`), every session ended when newly
/// disabled, and the feed rows (last statements). `None` when there is no such user; no
/// change rows when nothing changed.
///
/// # Errors
/// On database failure (the transaction then rolls back).
fn apply_user_update(
    conn: &mut DbConnection,
    id: &UserId,
    update: UserUpdate,
    template: &Event,
    now: DateTime<Utc>,
) -> Result<Option<(UserRow, Vec<ChangeRow>)>, ServiceError> {
    if !users::lock(conn, id)? {
        return Ok(None);
    }
    let Some(mut user) = users::find_by_id(conn, id)? else {
        return Ok(None);
    };
    let role = update.role.unwrap_or(user.role);
    let disabled_at = match update.disabled {
        None => user.disabled_at,
        Some(true) => user.disabled_at.or(Some(now)),
        Some(false) => None,
    };
    // Checked by the caller: a budget that does not convert is refused before this.
    let budget_micros = match update.budget_usd {
        None => user.budget_micros,
        Some(usd) => usd.and_then(|usd| usd_to_micros(usd).ok()),
    };
    let mut changes: Vec<ChangeRow> = Vec::new();
    if role == user.role && disabled_at == user.disabled_at && budget_micros == user.budget_micros {
        return Ok(Some((user, changes)));
    }
    if budget_micros != user.budget_micros {
        users::set_budget(conn, id, budget_micros, now)?;
        let usd = |m: Option<i64>| {
            m.map(|m| aigw_domain::usage::micros_to_usd(u64::try_from(m).unwrap_or(0)))
        };
        let details = serde_json::json!({
            "from_usd": usd(user.budget_micros), "to_usd": usd(budget_micros),
        });
        template.clone().action(AuditAction::UserBudgetChanged).details(details).insert(conn)?;
        user.budget_micros = budget_micros;
    }
    let newly_disabled = user.disabled_at.is_none() && disabled_at.is_some();
    users::update_access(conn, id, role, disabled_at, now)?;
    if role != user.role {
        let details = serde_json::json!({"from": user.role.as_str(), "to": role.as_str()});
        template.clone().details(details).insert(conn)?;
    }
    if disabled_at.is_some() != user.disabled_at.is_some() {
        let action =
            if newly_disabled { AuditAction::UserDisabled } else { AuditAction::UserEnabled };
        template.clone().action(action).insert(conn)?;
    }
    let ended = if newly_disabled {
        sessions::revoke_user_sessions(conn, id, None, "user_disabled", now)?
    } else {
        Vec::new()
    };
    // Last statements of the transaction (see `aigw_persistence::changes`).
    for session_id in &ended {
        let kind = CredentialChangeKind::SessionRevoked;
        changes.push(credential_cache::append(conn, kind, session_id, now)?);
    }
    let kind = CredentialChangeKind::UserChanged;
    changes.push(credential_cache::append(conn, kind, id, now)?);
    (user.role, user.disabled_at, user.updated_at) = (role, disabled_at, now);
    Ok(Some((user, changes)))
}

/// What the operator commands (`aigw admin …`) do, on the configured database, with no
/// server and no caller: how the first admin is made.
impl Administration {
    /// Creates an account with `role` (no session).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` (malformed, or already registered), `name` or
    /// `password` (the password policy); [`ServiceError::Unavailable`] when the database is
    /// down.
    pub async fn create_user(
        &self,
        email: &str,
        password: String,
        name: Option<&str>,
        role: Role,
    ) -> Result<UserView, ServiceError> {
        let mut user = self.accounts.new_user_row(email, password, name, role).await?;
        // The operator vouches for the address of an account they create.
        user.email_verified_at = Some(user.created_at);
        let stored = user.clone();
        let event = Event::new(AuditAction::UserRegistered, Some(&user.id), None, user.created_at)
            .target(&user.id)
            .details(
                serde_json::json!({"email": user.email, "role": role.as_str(), "by": "operator"}),
            );
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    Accounts::insert_user(conn, &stored)?;
                    event.insert(conn)
                })
            })
            .await?;
        tracing::info!(user_id = %user.id, role = %user.role, "user created by the operator");
        Ok(UserView::from(&user))
    }

    /// Sets the role of the account with e-mail `email`; running nodes apply it through the
    /// change feed.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` when it is malformed;
    /// [`ServiceError::NotFound`] (`user`) when no account has it;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn set_role(&self, email: &str, role: Role) -> Result<UserView, ServiceError> {
        let now = self.clock.now();
        let template = Event::new(AuditAction::RoleChanged, None, None, now);
        let (user, changes) = self
            .on_account(email, move |conn, mut user| {
                if user.role == role {
                    return Ok((user, Vec::new()));
                }
                users::update_access(conn, &user.id, role, user.disabled_at, now)?;
                let details = serde_json::json!({
                    "from": user.role.as_str(), "to": role.as_str(), "by": "operator"
                });
                template.clone().user(&user.id).target(&user.id).details(details).insert(conn)?;
                let kind = CredentialChangeKind::UserChanged;
                let change = credential_cache::append(conn, kind, &user.id, now)?;
                (user.role, user.updated_at) = (role, now);
                Ok((user, vec![change]))
            })
            .await?;
        if !changes.is_empty() {
            self.cache.publish(changes).await;
            tracing::info!(user_id = %user.id, role = %role, "role set by the operator");
        }
        Ok(UserView::from(&user))
    }

    /// The operator vouches for the address of the account with `email`: it counts as
    /// verified (`email_verified`, by `operator`, in the audit trail), and the teams whose
    /// invitations name it take it in, as after a verification by e-mail. For a deployment
    /// without a mailer, where nobody can verify by e-mail. Published on the change feed.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` when it is malformed;
    /// [`ServiceError::NotFound`] (`user`) when no account has it;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn verify_email(&self, email: &str) -> Result<UserView, ServiceError> {
        let now = self.clock.now();
        let (user, changes) = self
            .on_account(email, move |conn, mut user| {
                if user.email_verified_at.is_none() {
                    users::mark_email_verified(conn, &user.id, now)?;
                    user.email_verified_at = Some(now);
                    Event::new(AuditAction::EmailVerified, Some(&user.id), None, now)
                        .target(&user.id)
                        .details(serde_json::json!({"email": user.email, "by": "operator"}))
                        .insert(conn)?;
                }
                let mut changes = crate::team_access::join_invited(conn, &user, now)?;
                let kind = CredentialChangeKind::UserChanged;
                changes.push(credential_cache::append(conn, kind, &user.id, now)?);
                Ok((user, changes))
            })
            .await?;
        self.cache.publish(changes).await;
        tracing::info!(user_id = %user.id, "address verified by the operator");
        Ok(UserView::from(&user))
    }

    /// Runs `change` on the account with address `email`, locked, in one transaction; it
    /// answers the account as changed and the changes to publish.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` when it is malformed; [`ServiceError::NotFound`]
    /// (`user`) when no account has it; what `change` fails with.
    async fn on_account<F>(
        &self,
        email: &str,
        change: F,
    ) -> Result<(UserRow, Vec<ChangeRow>), ServiceError>
    where
        F: Fn(&mut DbConnection, UserRow) -> Result<(UserRow, Vec<ChangeRow>), ServiceError>
            + Send
            + 'static,
    {
        let email = aigw_domain::Email::parse(email)?;
        let wanted = email.as_str().to_owned();
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !users::lock_by_email(conn, &wanted)? {
                        return Ok(None);
                    }
                    match users::find_by_email(conn, &wanted)? {
                        Some(user) => change(conn, user).map(Some),
                        None => Ok(None),
                    }
                })
            })
            .await?
            .ok_or_else(|| ServiceError::NotFound { resource: "user", id: email.to_string() })
    }
}
