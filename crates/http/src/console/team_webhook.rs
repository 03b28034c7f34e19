//! The forms of the team page's webhook section (owners and admins): set the URL budget
//! alerts are POSTed to (its signing secret shown once), or remove it (docs/alerts.md). The
//! section's contents are `super::team_webhook_view`'s.

use super::render::Shown;
use super::session::Viewer;
use super::teams::{answer, Typed};
use super::view::{CsrfField, CsrfOnly, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::TeamId;
use minijinja::context;
use serde::Deserialize;

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
