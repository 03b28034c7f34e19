//! `/admin/…`: platform administration for users of role `admin` — every account (search,
//! disable, re-enable, role), every API key (search by prefix or owner, revoke) and the audit
//! trail (invitations to register: [`crate::console::admin_invitations`]). The same use cases as `/api/v1/admin/…`, behind the same
//! proof: `Administration::authorize_admin` (role read from the account, and the second factor
//! when `auth.require_mfa_for_admins` asks for it); anyone else gets the API's 403 as a page.

use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::view::{key_status, money, when, CsrfField, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::{ApiKeyId, AuditAction, Role, UserId};
use aigw_service::admin::Admin;
use aigw_service::audit::AuditEventView;
use aigw_service::{ApiKeyView, PageRequest, ServiceError, UserUpdate, UserView};
use minijinja::{context, Value};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeSet, HashMap};

/// Rows per page of every administration list.
const PAGE_SIZE: &str = "50";

/// The administration pages' sub-navigation, `current` marked.
pub(super) fn subnav(current: &str) -> Value {
    let items: Vec<Value> = [
        ("/admin/users", "Users"),
        ("/admin/keys", "API keys"),
        ("/admin/invitations", "Invitations"),
        ("/admin/audit", "Audit"),
    ]
    .into_iter()
    .map(|(href, text)| context! { href, text, current => href == current })
    .collect();
    context! { label => "Administration", items }
}

/// The proof that the viewer administers, or the page of the API's refusal (403
/// `this operation requires admin`, or the second factor `auth.require_mfa_for_admins` asks
/// for).
pub(super) async fn admin_of(
    state: &AppState,
    viewer: &Viewer,
) -> Result<Admin, Box<HttpResponse>> {
    state
        .admin
        .authorize_admin(&viewer.principal)
        .await
        .map_err(|e| Box::new(viewer.failure(&Shown::from(e))))
}

/// `path` with the non-empty `pairs` as its query string (URL-encoded).
pub(super) fn with_query(path: &str, pairs: &[(&str, &str)]) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    let mut any = false;
    for (name, value) in pairs.iter().filter(|(_, v)| !v.is_empty()) {
        query.append_pair(name, value);
        any = true;
    }
    if any {
        format!("{path}?{}", query.finish())
    } else {
        path.to_owned()
    }
}

/// One page of a list: its rows' cursor.
pub(super) fn page_request(cursor: Option<&String>) -> PageRequest {
    PageRequest { limit: Some(PAGE_SIZE.to_owned()), cursor: cursor.cloned() }
}

/// The id of the account a filter names: an id as given, or the account with an e-mail
/// address (anything with an `@`), looked up as `GET /admin/users?email=` does.
///
/// # Errors
/// The use case's refusal, or 404 (`user not found`) when no account has that address.
async fn account_id(state: &AppState, admin: &Admin, raw: &str) -> Result<String, ServiceError> {
    if !raw.contains('@') {
        return Ok(raw.to_owned());
    }
    let wanted = aigw_domain::normalize_email(raw);
    let first = PageRequest { limit: Some("2".to_owned()), cursor: None };
    let found = state.admin.admin_list_users(admin, Some(wanted.clone()), &first).await?;
    found
        .items
        .into_iter()
        .find(|u| u.email == wanted)
        .map(|u| u.id.into_string())
        .ok_or(ServiceError::NotFound { resource: "user", id: wanted.chars().take(64).collect() })
}

// ----- Users -------------------------------------------------------------------------------

/// `?q=…&cursor=…` of the users page: `q` is the start of an e-mail address.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct UsersQuery {
    #[serde(default)]
    q: String,
    cursor: Option<String>,
}

/// A user as the users table shows it; `own` marks the viewer's row.
fn user_row(user: &UserView, own: bool) -> Value {
    context! {
        id => user.id,
        email => user.email,
        name => user.name,
        role => user.role.as_str(),
        disabled => user.disabled,
        created => when(&user.created_at),
        verified => user.email_verified_at.as_ref().map(when),
        budget => user.budget_micros.map(|m| format!("{}", m as f64 / 1_000_000.0)),
        own,
    }
}

/// The users page for `query`, with `error` (a refused action) above it.
async fn users_page(
    state: &AppState,
    viewer: &Viewer,
    admin: &Admin,
    query: &UsersQuery,
    error: Option<Shown>,
) -> HttpResponse {
    let q = query.q.trim();
    let prefix = Some(q.to_owned()).filter(|q| !q.is_empty());
    let listed =
        state.admin.admin_list_users(admin, prefix, &page_request(query.cursor.as_ref())).await;
    let (users, next, error) = match listed {
        Ok(page) => {
            let rows: Vec<Value> =
                page.items.iter().map(|u| user_row(u, u.id == viewer.user.id)).collect();
            let next = page
                .next_cursor
                .map(|c| with_query("/admin/users", &[("q", q), ("cursor", c.as_str())]));
            (rows, next, error)
        }
        Err(e) => (Vec::new(), None, error.or_else(|| Some(Shown::from(e)))),
    };
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    viewer.page(
        status,
        "admin_users.html",
        context! {
            title => "Users", section => "admin", subnav => subnav("/admin/users"),
            q, users, next, error, first_page => query.cursor.is_none(),
            first_href => with_query("/admin/users", &[("q", q)]),
            registration => viewer.keys().registration,
            budget_period => state.context.platform_spend().user_budget_period.as_str(),
            platform_budget => state.context.platform_spend().user_budget_micros.map(money),
        },
    )
}

/// `GET /admin/users`: every account, newest first, 50 a page; `q` keeps those whose e-mail
/// starts with it. Each row has the forms that disable or re-enable the account and change
/// its role. A bad cursor is a 400 page; a non-admin gets the API's 403.
pub(crate) async fn users(
    state: web::Data<AppState>,
    viewer: Viewer,
    query: web::Query<UsersQuery>,
) -> HttpResponse {
    match admin_of(&state, &viewer).await {
        Ok(admin) => users_page(&state, &viewer, &admin, &query, None).await,
        Err(refused) => *refused,
    }
}

/// The disable, enable and role forms of a user row (`q`: the search to return to).
#[derive(Debug, Deserialize)]
pub(crate) struct UserForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    q: String,
    #[serde(default)]
    role: String,
    /// The user's own budget in USD (`budget` forms; empty: the platform's applies).
    #[serde(default)]
    budget_usd: String,
}

impl CsrfField for UserForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// What a user form changes.
#[derive(Debug, Clone, Copy)]
enum UserChange {
    Disable,
    Enable,
    Role,
    Budget,
}

/// The update `change` makes with `form`'s fields.
///
/// # Errors
/// A 400 naming `role` or `budget_usd` when it cannot be read.
fn update_of(change: UserChange, form: &UserForm) -> Result<UserUpdate, Shown> {
    let none = UserUpdate { role: None, disabled: None, budget_usd: None };
    Ok(match change {
        UserChange::Disable => UserUpdate { disabled: Some(true), ..none },
        UserChange::Enable => UserUpdate { disabled: Some(false), ..none },
        UserChange::Role => match form.role.trim().parse::<Role>() {
            Ok(role) => UserUpdate { role: Some(role), ..none },
            Err(()) => {
                return Err(Shown {
                    status: StatusCode::BAD_REQUEST,
                    message: "invalid request: role must be user or admin".to_owned(),
                    hint: None,
                    field: Some("role".to_owned()),
                })
            }
        },
        UserChange::Budget => {
            let budget = crate::console::keys::optional::<f64>("budget_usd", &form.budget_usd)?;
            UserUpdate { budget_usd: Some(budget), ..none }
        }
    })
}

/// Applies `change` to user `id` (`PATCH /api/v1/admin/users/{id}`), then back to the users
/// page with a notice; a refusal (an admin disabling or demoting themselves, an unknown user
/// or role) re-renders the users page with the API's message.
async fn change_user(
    state: &AppState,
    req: &HttpRequest,
    viewer: &Viewer,
    id: &UserId,
    form: Form<UserForm>,
    change: UserChange,
) -> HttpResponse {
    let form = match form.checked(req, viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let admin = match admin_of(state, viewer).await {
        Ok(admin) => admin,
        Err(refused) => return *refused,
    };
    let changed = match update_of(change, &form) {
        Ok(update) => state.admin.admin_update_user(&admin, id, update).await.map_err(Shown::from),
        Err(shown) => Err(shown),
    };
    let back = UsersQuery { q: form.q.trim().to_owned(), cursor: None };
    match changed {
        Ok(user) => {
            let notice = match change {
                UserChange::Disable => format!(
                    "{} is disabled: their sessions have ended and their keys are refused.",
                    user.email
                ),
                UserChange::Enable => {
                    format!("{} is enabled again: their keys work; they sign in anew.", user.email)
                }
                UserChange::Role => format!("{} now has the role {}.", user.email, user.role),
                UserChange::Budget => match user.budget_micros {
                    Some(own) => format!("{}'s own budget is now {}.", user.email, money(own)),
                    None => format!("{} has the platform's user budget again.", user.email),
                },
            };
            let location = with_query("/admin/users", &[("q", back.q.as_str())]);
            viewer.keys().see_other_with_notice(&location, &notice)
        }
        Err(error) => users_page(state, viewer, &admin, &back, Some(error)).await,
    }
}

/// `POST /admin/users/{id}/disable`: ends every session of the account and makes its keys
/// answer 401 on every node before the answer. An admin cannot disable themselves (400).
pub(crate) async fn disable_user(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<UserId>,
    form: Form<UserForm>,
) -> HttpResponse {
    change_user(&state, &req, &viewer, &id, form, UserChange::Disable).await
}

/// `POST /admin/users/{id}/enable`: the account's keys work again; its sessions stay ended.
pub(crate) async fn enable_user(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<UserId>,
    form: Form<UserForm>,
) -> HttpResponse {
    change_user(&state, &req, &viewer, &id, form, UserChange::Enable).await
}

/// `POST /admin/users/{id}/budget` (`budget_usd`; empty: the platform's user budget applies):
/// the user's own budget across all their keys.
pub(crate) async fn set_budget(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<UserId>,
    form: Form<UserForm>,
) -> HttpResponse {
    change_user(&state, &req, &viewer, &id, form, UserChange::Budget).await
}

/// `POST /admin/users/{id}/role` (`role`: `user` or `admin`). An admin cannot demote
/// themselves (400).
pub(crate) async fn set_role(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<UserId>,
    form: Form<UserForm>,
) -> HttpResponse {
    change_user(&state, &req, &viewer, &id, form, UserChange::Role).await
}

// ----- API keys ----------------------------------------------------------------------------

/// `?prefix=…&owner=…&cursor=…` of the keys page: the start of a key (its visible
/// `key_prefix`, e.g. `aigw_AbC12`) and the owner's id or e-mail address.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct KeysQuery {
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    owner: String,
    cursor: Option<String>,
}

/// A key as the administration's table shows it, with its owner's e-mail when known.
fn admin_key_row(key: &ApiKeyView, owners: &HashMap<String, String>) -> Value {
    context! {
        id => key.id,
        owner_id => key.user_id,
        owner_email => owners.get(key.user_id.as_str()),
        name => key.name,
        prefix => key.key_prefix,
        status => key_status(key),
        created => when(&key.created_at),
        team_id => key.team_id,
        team_owned => key.team_owned,
    }
}

/// One page of keys for `query`, with the e-mail of each owner on it.
async fn find_keys(
    state: &AppState,
    admin: &Admin,
    query: &KeysQuery,
) -> Result<(Vec<Value>, Option<String>), ServiceError> {
    let (prefix, owner) = (query.prefix.trim(), query.owner.trim());
    let owner_id = match owner {
        "" => None,
        raw => Some(account_id(state, admin, raw).await?),
    };
    let key_prefix = Some(prefix.to_owned()).filter(|p| !p.is_empty());
    let page = page_request(query.cursor.as_ref());
    let keys = state.admin.admin_list_api_keys(admin, owner_id, key_prefix, &page).await?;
    let ids: Vec<String> = keys
        .items
        .iter()
        .map(|k| k.user_id.to_string())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let owners: HashMap<String, String> = state
        .admin
        .admin_users_by_id(admin, &ids)
        .await?
        .into_iter()
        .map(|u| (u.id.into_string(), u.email))
        .collect();
    let rows = keys.items.iter().map(|k| admin_key_row(k, &owners)).collect();
    let next = keys.next_cursor.map(|c| {
        with_query("/admin/keys", &[("prefix", prefix), ("owner", owner), ("cursor", c.as_str())])
    });
    Ok((rows, next))
}

/// The keys page for `query`, with `error` (a refused action or search) above it.
async fn keys_page(
    state: &AppState,
    viewer: &Viewer,
    admin: &Admin,
    query: &KeysQuery,
    error: Option<Shown>,
) -> HttpResponse {
    let (keys, next, error) = match find_keys(state, admin, query).await {
        Ok((keys, next)) => (keys, next, error),
        Err(e) => (Vec::new(), None, error.or_else(|| Some(Shown::from(e)))),
    };
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    viewer.page(
        status,
        "admin_keys.html",
        context! {
            title => "All API keys", section => "admin", subnav => subnav("/admin/keys"),
            prefix => query.prefix.trim(), owner => query.owner.trim(), keys, next, error,
            first_page => query.cursor.is_none(),
            first_href => with_query(
                "/admin/keys",
                &[("prefix", query.prefix.trim()), ("owner", query.owner.trim())],
            ),
        },
    )
}

/// `GET /admin/keys`: every user's keys, newest first, 50 a page (never a secret);
/// `prefix` keeps those whose visible start begins with it (1 to 12 letters, digits or `_`;
/// anything else is a 400 page naming `key_prefix`), `owner` one account's (its id or e-mail
/// address; 404 when no account has the address). Each live key has a revoke form.
pub(crate) async fn keys(
    state: web::Data<AppState>,
    viewer: Viewer,
    query: web::Query<KeysQuery>,
) -> HttpResponse {
    match admin_of(&state, &viewer).await {
        Ok(admin) => keys_page(&state, &viewer, &admin, &query, None).await,
        Err(refused) => *refused,
    }
}

/// The revoke form of a key row (`prefix`, `owner`: the search to return to).
#[derive(Debug, Deserialize)]
pub(crate) struct RevokeKeyForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    prefix: String,
    #[serde(default)]
    owner: String,
}

impl CsrfField for RevokeKeyForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /admin/keys/{id}/revoke`: revokes any user's key, refused on every node before the
/// answer; back to the search with a notice. An unknown key re-renders the page with a 404.
pub(crate) async fn revoke_key(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<ApiKeyId>,
    form: Form<RevokeKeyForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let admin = match admin_of(&state, &viewer).await {
        Ok(admin) => admin,
        Err(refused) => return *refused,
    };
    let back = KeysQuery {
        prefix: form.prefix.trim().to_owned(),
        owner: form.owner.trim().to_owned(),
        cursor: None,
    };
    match state.admin.admin_revoke_api_key(&admin, &id).await {
        Ok(key) => {
            let location = with_query(
                "/admin/keys",
                &[("prefix", back.prefix.as_str()), ("owner", back.owner.as_str())],
            );
            let notice = format!(
                "The key {}… ({}) is revoked: it no longer works.",
                key.key_prefix, key.name
            );
            viewer.keys().see_other_with_notice(&location, &notice)
        }
        Err(e) => keys_page(&state, &viewer, &admin, &back, Some(Shown::from(e))).await,
    }
}

// ----- Audit -------------------------------------------------------------------------------

/// `?action=…&user=…&cursor=…` of the audit page (`GET /api/v1/admin/audit`'s `action` and
/// `user_id`; `user` also takes an e-mail address).
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct AuditQuery {
    #[serde(default)]
    action: String,
    #[serde(default)]
    user: String,
    cursor: Option<String>,
}

/// An event as the audit table shows it: the details as compact JSON (escaped by the
/// template like any text).
fn event_row(event: &AuditEventView) -> Value {
    let details = match &event.details {
        serde_json::Value::Object(map) if map.is_empty() => String::new(),
        serde_json::Value::Null => String::new(),
        details => details.to_string(),
    };
    context! {
        id => event.id,
        at => event.at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        action => event.action.as_str(),
        actor => event.actor,
        user_id => event.user_id,
        target => event.target,
        ip => event.ip,
        details,
    }
}

/// `GET /admin/audit`: every audit event, newest first, 50 a page; `action` keeps one action,
/// `user` the events concerning one account (its id or e-mail address). An unknown action is
/// a 400 page naming `action`; an address no account has, a 404 page.
pub(crate) async fn audit(
    state: web::Data<AppState>,
    viewer: Viewer,
    query: web::Query<AuditQuery>,
) -> HttpResponse {
    let admin = match admin_of(&state, &viewer).await {
        Ok(admin) => admin,
        Err(refused) => return *refused,
    };
    let (action, user) = (query.action.trim(), query.user.trim());
    let listed = async {
        let user_id = match user {
            "" => None,
            raw => Some(account_id(&state, &admin, raw).await?),
        };
        let action = Some(action.to_owned()).filter(|a| !a.is_empty());
        let page = page_request(query.cursor.as_ref());
        state.admin.admin_audit_events(&admin, user_id, action, &page).await
    }
    .await;
    let (events, next, error) = match listed {
        Ok(page) => {
            let rows: Vec<Value> = page.items.iter().map(event_row).collect();
            let next = page.next_cursor.map(|c| {
                with_query(
                    "/admin/audit",
                    &[("action", action), ("user", user), ("cursor", c.as_str())],
                )
            });
            (rows, next, None)
        }
        Err(e) => (Vec::new(), None, Some(Shown::from(e))),
    };
    let actions: Vec<&str> = AuditAction::ALL.iter().map(|a| a.as_str()).collect();
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    viewer.page(
        status,
        "admin_audit.html",
        context! {
            title => "Audit trail", section => "admin", subnav => subnav("/admin/audit"),
            action, user, actions, events, next, error, first_page => query.cursor.is_none(),
            first_href => with_query("/admin/audit", &[("action", action), ("user", user)]),
        },
    )
}
