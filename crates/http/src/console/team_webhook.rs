//! The team page's webhook section (owners and admins): the URL budget alerts are POSTed to,
//! set (its signing secret shown once) or removed, and the latest deliveries with their status
//! (docs/alerts.md).

use super::render::Shown;
use super::session::Viewer;
use super::teams::{answer, Typed};
use super::view::{when, CsrfField, CsrfOnly, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::TeamId;
use aigw_service::alerts::{DeliveryView, WebhookView};
use aigw_service::{Authorized, PageRequest, ServiceError};
use minijinja::{context, Value};
use serde::Deserialize;

/// Deliveries shown on the team page.
const SHOWN: &str = "20";

/// Team `id`'s webhook, if it has one, and its latest deliveries (for its managers).
///
/// # Errors
/// As [`aigw_service::alerts::BudgetAlerts::team_webhook`] but for a team without a webhook.
pub(super) async fn read(
    state: &AppState,
    reader: &Authorized<op::ReadAccount>,
    id: &TeamId,
) -> Result<(Option<WebhookView>, Vec<DeliveryView>), ServiceError> {
    let webhook = match state.alerts.team_webhook(reader, id).await {
        Ok(webhook) => Some(webhook),
        Err(ServiceError::NotFound { resource: "webhook", .. }) => None,
        Err(e) => return Err(e),
    };
    let page = PageRequest { limit: Some(SHOWN.to_owned()), cursor: None };
    let deliveries = state.alerts.list_webhook_deliveries(reader, id, &page).await?.items;
    Ok((webhook, deliveries))
}

/// The webhook as the page shows it.
pub(super) fn webhook_row(webhook: &WebhookView) -> Value {
    context! { url => webhook.url, updated => when(&webhook.updated_at) }
}

/// A delivery as the page shows it.
pub(super) fn delivery_row(delivery: &DeliveryView) -> Value {
    let threshold = delivery.payload["data"]["threshold_percent"].as_u64();
    let scope = delivery.payload["data"]["scope"].as_str().map(str::to_owned);
    context! {
        id => delivery.id,
        created => when(&delivery.created_at),
        what => match (scope, threshold) {
            (Some(scope), Some(t)) => format!("{scope} budget at {t} %"),
            _ => delivery.event.clone(),
        },
        status => delivery.status,
        attempts => delivery.attempts,
        last => delivery.last_error.clone().or_else(|| delivery.last_status.map(|s| s.to_string())),
        next => delivery.next_attempt_at.as_ref().map(when),
    }
}

/// The webhook form.
#[derive(Debug, Deserialize)]
pub(crate) struct WebhookForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    url: String,
}

impl CsrfField for WebhookForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /teams/{id}/webhook`: sets the team's webhook and shows its signing secret once;
/// a refusal (a URL that is not `https://` to a public address) comes back on the team page.
pub(crate) async fn set(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<TeamId>,
    form: Form<WebhookForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let set = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.alerts.set_team_webhook(&caller, &id, &form.url).await,
        Err(e) => Err(e),
    };
    match set {
        Ok(created) => viewer.page(
            StatusCode::OK,
            "team_webhook_secret.html",
            context! {
                title => "The team's webhook",
                section => "teams",
                team_id => id.as_str(),
                url => created.webhook.url,
                secret => created.secret,
            },
        ),
        Err(e) => {
            let refused = Err(Typed::refused("webhook", Shown::from(e)));
            answer(&state, &viewer, &id, refused, "webhook").await
        }
    }
}

/// `POST /teams/{id}/webhook/delete`: removes the team's webhook.
pub(crate) async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<TeamId>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let removed = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.alerts.delete_team_webhook(&caller, &id).await,
        Err(e) => Err(e),
    };
    let done = match removed {
        Ok(()) => Ok("The webhook is removed: budget alerts go by e-mail only.".to_owned()),
        Err(e) => Err(Typed::refused("webhook", Shown::from(e))),
    };
    answer(&state, &viewer, &id, done, "webhook").await
}
