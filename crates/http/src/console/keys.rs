//! `/keys`: the viewer's API keys, paged; creating one (the secret shown once), rotating,
//! revoking and deleting. The same use cases as `/api/v1/auth/api-keys`.

use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::view::{key_row, money, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::ApiKeyId;
use aigw_service::{KeyPolicyRequest, NewApiKey, PageRequest, ServiceError};
use minijinja::context;
use serde::Deserialize;
use std::collections::HashMap;

/// `?cursor=…` of a paged list.
#[derive(Debug, Deserialize)]
pub(crate) struct CursorQuery {
    pub(crate) cursor: Option<String>,
}

/// Keys per page.
const PAGE_SIZE: &str = "50";

/// `GET /keys`: one page of the viewer's keys, newest first, with what each spent in its
/// budget period.
pub(crate) async fn list(
    state: web::Data<AppState>,
    viewer: Viewer,
    query: web::Query<CursorQuery>,
) -> HttpResponse {
    let page = PageRequest { limit: Some(PAGE_SIZE.to_owned()), cursor: query.cursor.clone() };
    let result = async {
        let caller = viewer.authorized::<op::ReadAccount>()?;
        let keys = state.api_keys.list_api_keys_page(&caller, &page).await?;
        let spend = state.usage.period_spend(caller.user_id(), &keys.items).await?;
        let all = PageRequest { limit: Some("200".to_owned()), cursor: None };
        let teams = state.teams.list_teams(&caller, &all).await?.items;
        let teams: HashMap<String, String> = teams.into_iter().map(|t| (t.id, t.name)).collect();
        Ok::<_, ServiceError>((keys, spend, teams))
    }
    .await;
    match result {
        Ok((keys, spend, teams)) => {
            let rows: Vec<_> = keys
                .items
                .iter()
                .map(|k| {
                    let team_name = k.team_id.as_deref().and_then(|t| teams.get(t));
                    let mut row = key_row(k, spend.get(k.id.as_str()));
                    if let Some(name) = team_name {
                        row = context! { team_name => name, ..row };
                    }
                    row
                })
                .collect();
            let next = keys.next_cursor.map(|c| format!("/keys?cursor={c}"));
            viewer.page(
                StatusCode::OK,
                "keys.html",
                context! { title => "API keys", section => "keys", keys => rows, next,
                first_page => query.cursor.is_none() },
            )
        }
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// The fields of the new-key form.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
pub(crate) struct NewKeyForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    permissions: Vec<String>,
    #[serde(default)]
    expires_at: String,
    #[serde(default)]
    max_budget_usd: String,
    #[serde(default)]
    budget_period: String,
    #[serde(default)]
    rpm_limit: String,
    #[serde(default)]
    tpm_limit: String,
    #[serde(default)]
    allowed_models: String,
    #[serde(default)]
    team_id: String,
}

/// Empty → `None`; else parsed as `T`, or a 400 naming `field`.
pub(crate) fn optional<T: std::str::FromStr>(field: &str, raw: &str) -> Result<Option<T>, Shown> {
    let raw = raw.trim();
    if raw.is_empty() {
        return Ok(None);
    }
    raw.parse().map(Some).map_err(|_| Shown {
        status: StatusCode::BAD_REQUEST,
        message: format!("{field} is not a number"),
        hint: None,
        field: Some(field.to_owned()),
    })
}

impl crate::console::view::CsrfField for NewKeyForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl NewKeyForm {
    /// What the form shows before anything is typed: `ai_gateway`, a monthly period.
    pub(crate) fn defaults() -> Self {
        Self {
            permissions: vec!["ai_gateway".to_owned()],
            budget_period: "monthly".to_owned(),
            ..Self::default()
        }
    }

    /// The use case's request: an expiry day means the end of that UTC day.
    pub(crate) fn request(&self) -> Result<NewApiKey, Shown> {
        let expires_at = match self.expires_at.trim() {
            "" => None,
            day => Some(format!("{day}T23:59:59Z")),
        };
        let allowed_models: Vec<String> = self
            .allowed_models
            .split([',', '\n', ' '])
            .map(str::trim)
            .filter(|m| !m.is_empty())
            .map(str::to_owned)
            .collect();
        let budget_period = Some(self.budget_period.trim().to_owned()).filter(|p| !p.is_empty());
        Ok(NewApiKey {
            name: self.name.clone(),
            permissions: self.permissions.clone(),
            expires_at,
            policy: KeyPolicyRequest {
                allowed_models: (!allowed_models.is_empty()).then_some(allowed_models),
                max_budget_usd: optional("max_budget_usd", &self.max_budget_usd)?,
                budget_period,
                rpm_limit: optional("rpm_limit", &self.rpm_limit)?,
                tpm_limit: optional("tpm_limit", &self.tpm_limit)?,
                metadata: None,
                budget_mode: None,
            },
            team_id: Some(self.team_id.trim().to_owned()).filter(|t| !t.is_empty()),
        })
    }
}

/// The new-key form, with `values` (the fields sent back after an error).
async fn new_key_page(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    values: &NewKeyForm,
    error: Option<Shown>,
) -> HttpResponse {
    let teams = match viewer.authorized::<op::ReadAccount>() {
        Ok(caller) => {
            let first = PageRequest { limit: Some("200".to_owned()), cursor: None };
            state.teams.list_teams(&caller, &first).await.map(|p| p.items).unwrap_or_default()
        }
        Err(_) => Vec::new(),
    };
    let teams: Vec<_> = teams.iter().map(|t| context! { id => t.id, name => t.name }).collect();
    viewer.page(
        status,
        "key_new.html",
        context! { title => "New API key", section => "keys", form => values, teams, error },
    )
}

/// `GET /keys/new`.
pub(crate) async fn new_form(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    new_key_page(&state, &viewer, StatusCode::OK, &NewKeyForm::defaults(), None).await
}

/// `POST /keys/new`: creates the key and shows its secret, once.
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<NewKeyForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let created = async {
        let request = form.request()?;
        let caller = viewer.authorized::<op::CreateApiKey>().map_err(Shown::from)?;
        state.api_keys.create_api_key(&caller, request).await.map_err(Shown::from)
    }
    .await;
    match created {
        Ok(created) => viewer.page(
            StatusCode::CREATED,
            "key_secret.html",
            context! { title => "API key created", section => "keys",
            key => key_row(&created.view, None), secret => created.key },
        ),
        Err(error) => new_key_page(&state, &viewer, error.status, &form, Some(error)).await,
    }
}

/// `GET /keys/{id}`: one key, with its limits and the forms that change it.
pub(crate) async fn show(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<ApiKeyId>,
) -> HttpResponse {
    let result = async {
        let caller = viewer.authorized::<op::ReadAccount>()?;
        let key = state.api_keys.api_key(&caller, &id).await?;
        let spend = state.usage.period_spend(caller.user_id(), std::slice::from_ref(&key)).await?;
        Ok::<_, ServiceError>((key, spend))
    }
    .await;
    match result {
        Ok((key, spend)) => {
            let row = key_row(&key, spend.get(key.id.as_str()));
            let models = key.policy.allowed_models.as_ref().map(|m| m.as_slice().join(", "));
            viewer.page(
                StatusCode::OK,
                "key_show.html",
                context! { title => format!("API key {}", key.name), section => "keys", key => row,
                models, budget => key.policy.max_budget_micros.map(money) },
            )
        }
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// The rotation form.
#[derive(Debug, Deserialize)]
pub(crate) struct RotateForm {
    csrf: String,
    grace_period_secs: Option<String>,
}

impl crate::console::view::CsrfField for RotateForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /keys/{id}/rotate`: a new secret under the same id, shown once; the old one works
/// for the grace period.
pub(crate) async fn rotate(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<ApiKeyId>,
    form: Form<RotateForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let rotated = async {
        let grace =
            optional::<i64>("grace_period_secs", form.grace_period_secs.as_deref().unwrap_or(""))?;
        let caller = viewer.authorized::<op::UpdateApiKey>().map_err(Shown::from)?;
        state.api_keys.rotate_api_key(&caller, &id, grace).await.map_err(Shown::from)
    }
    .await;
    match rotated {
        Ok(created) => viewer.page(
            StatusCode::OK,
            "key_secret.html",
            context! { title => "API key rotated", section => "keys", rotated => true,
            key => key_row(&created.view, None), secret => created.key },
        ),
        Err(error) => viewer.failure(&error),
    }
}

/// `POST /keys/{id}/revoke`.
pub(crate) async fn revoke(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<ApiKeyId>,
    form: Form<crate::console::view::CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let revoked = match viewer.authorized::<op::ChangeApiKey>() {
        Ok(caller) => state.api_keys.revoke_api_key(&caller, &id).await,
        Err(e) => Err(e),
    };
    match revoked {
        Ok(key) => viewer.keys().see_other_with_notice(
            &format!("/keys/{}", key.id),
            "The key is revoked: it no longer works.",
        ),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// `POST /keys/{id}/delete`.
pub(crate) async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<ApiKeyId>,
    form: Form<crate::console::view::CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let deleted = match viewer.authorized::<op::ChangeApiKey>() {
        Ok(caller) => state.api_keys.delete_api_key(&caller, &id).await,
        Err(e) => Err(e),
    };
    match deleted {
        Ok(()) => viewer.keys().see_other_with_notice("/keys", "The key is deleted."),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}
