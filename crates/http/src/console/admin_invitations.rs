//! `/admin/invitations`: invitations to register, for platform admins. The form that invites
//! an address, the invitations with their state (the open ones, or every one), and per
//! invitation a re-send (a new token, shown once and e-mailed) and a revoke button. The same
//! use cases as `/api/v1/admin/invitations…`.

use crate::console::admin::{admin_of, page_request, subnav, with_query};
use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::view::{when, CsrfField, CsrfOnly, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::invitation::InvitationStatus;
use aigw_service::admin::invitations::DEFAULT_INVITATION_DAYS;
use aigw_service::admin::{Admin, CreatedInvitation, InvitationFilter, InvitationView};
use minijinja::{context, Value};
use serde::{Deserialize, Serialize};

/// The fields of the new-invitation form.
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct InvitationForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    email: String,
    /// A UTC day (`YYYY-MM-DD`): valid until its end; empty: the default.
    #[serde(default)]
    expires_at: String,
}

impl CsrfField for InvitationForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// An invitation as the table shows it, with the buttons its state allows.
fn invitation_row(invitation: &InvitationView) -> Value {
    let status = invitation.status;
    let open = matches!(status, InvitationStatus::Pending | InvitationStatus::Sent);
    context! {
        id => invitation.id,
        email => invitation.email,
        created_by => invitation.created_by,
        created => when(&invitation.created_at),
        expires => invitation.expires_at.as_ref().map(when),
        status => status.as_str(),
        sent => invitation.sent_at.as_ref().map(when),
        sends => invitation.sends,
        accepted => invitation.accepted_at.as_ref().map(when),
        resendable => open || status == InvitationStatus::Expired,
        revocable => open || status == InvitationStatus::Expired,
    }
}

/// `?state=…&cursor=…` of the list (`state`: `open`, the default, or `all`).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ListQuery {
    state: Option<String>,
    cursor: Option<String>,
}

impl ListQuery {
    /// The invitations asked for (`open` when `state` is absent).
    ///
    /// # Errors
    /// [`aigw_service::ServiceError::Invalid`] on `state` when it is neither `open` nor `all`.
    fn filter(&self) -> Result<InvitationFilter, aigw_service::ServiceError> {
        InvitationFilter::parse(self.state.as_deref().unwrap_or("open"))
    }
}

/// The invitations page: the new-invitation form (with `values` and `error` after a refusal)
/// and one page of the invitations `query` asks for.
async fn invitations_page(
    state: &AppState,
    viewer: &Viewer,
    admin: &Admin,
    query: &ListQuery,
    values: &InvitationForm,
    error: Option<Shown>,
) -> HttpResponse {
    // An unknown `state` is a 400 page naming it, over the open invitations.
    let (filter, error) = match query.filter() {
        Ok(filter) => (filter, error),
        Err(e) => (InvitationFilter::Open, error.or_else(|| Some(Shown::from(e)))),
    };
    let all = filter == InvitationFilter::All;
    let page = page_request(query.cursor.as_ref());
    let listed = state.admin.admin_list_invitations(admin, filter, &page).await;
    let (invitations, next, error) = match listed {
        Ok(page) => {
            let rows: Vec<Value> = page.items.iter().map(invitation_row).collect();
            let next = page.next_cursor.map(|c| {
                let state = if all { "all" } else { "open" };
                with_query("/admin/invitations", &[("state", state), ("cursor", &c)])
            });
            (rows, next, error)
        }
        Err(e) => (Vec::new(), None, error.or_else(|| Some(Shown::from(e)))),
    };
    let status = error.as_ref().map_or(StatusCode::OK, |e| e.status);
    viewer.page(
        status,
        "admin_invitations.html",
        context! {
            title => "Invitations", section => "admin", subnav => subnav("/admin/invitations"),
            form => values, invitations, next, error, first_page => query.cursor.is_none(),
            all, registration => viewer.keys().registration,
            default_days => DEFAULT_INVITATION_DAYS,
        },
    )
}

/// The page that shows an invitation's token once (after it was made or sent again).
fn secret_page(
    viewer: &Viewer,
    status: StatusCode,
    made: &CreatedInvitation,
    again: bool,
) -> HttpResponse {
    viewer.page(
        status,
        "admin_invitation_secret.html",
        context! {
            title => if again { "Invitation sent again" } else { "Invitation created" },
            section => "admin", subnav => subnav("/admin/invitations"),
            email => made.email, expires => when(&made.expires_at),
            secret => made.invitation, again,
            registration => viewer.keys().registration,
        },
    )
}

/// `GET /admin/invitations`: the form that invites an address to register, and the
/// invitations newest first, 50 a page, with their state: the open ones (unused, unrevoked,
/// unexpired), or with `?state=all` every one. Each open or expired one has a re-send and a
/// revoke form.
pub(crate) async fn invitations(
    state: web::Data<AppState>,
    viewer: Viewer,
    query: web::Query<ListQuery>,
) -> HttpResponse {
    match admin_of(&state, &viewer).await {
        Ok(admin) => {
            let values = InvitationForm::default();
            invitations_page(&state, &viewer, &admin, &query, &values, None).await
        }
        Err(refused) => *refused,
    }
}

/// `POST /admin/invitations`: creates a single-use invitation and shows its token, once
/// (201). A bad address or day re-renders the form with the API's message (400).
pub(crate) async fn create_invitation(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<InvitationForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let admin = match admin_of(&state, &viewer).await {
        Ok(admin) => admin,
        Err(refused) => return *refused,
    };
    let expires_at = match form.expires_at.trim() {
        "" => None,
        day => Some(format!("{day}T23:59:59Z")),
    };
    let created =
        state.admin.admin_create_invitation(&admin, form.email.trim(), expires_at.as_deref()).await;
    match created {
        Ok(created) => secret_page(&viewer, StatusCode::CREATED, &created, false),
        Err(e) => {
            let error = Shown::from(e);
            invitations_page(&state, &viewer, &admin, &ListQuery::default(), &form, Some(error))
                .await
        }
    }
}

/// The admin behind a form with no field but the CSRF token.
///
/// # Errors
/// The page of a refused form (another site, a wrong token) or of a caller who is not an
/// admin.
async fn checked_admin(
    state: &AppState,
    req: &HttpRequest,
    viewer: &Viewer,
    form: Form<CsrfOnly>,
) -> Result<Admin, Box<HttpResponse>> {
    form.checked(req, viewer)?;
    admin_of(state, viewer).await
}

/// `POST /admin/invitations/{id}/resend`: a new token for the invitation (the old link stops
/// working), valid for the default days from now and e-mailed when a mailer is configured;
/// the token is shown once. A used, revoked or unknown invitation is the list again with a
/// 404 message.
pub(crate) async fn resend_invitation(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<String>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    let admin = match checked_admin(&state, &req, &viewer, form).await {
        Ok(admin) => admin,
        Err(refused) => return *refused,
    };
    match state.admin.admin_resend_invitation(&admin, &id).await {
        Ok(renewed) => secret_page(&viewer, StatusCode::OK, &renewed, true),
        Err(e) => {
            let (values, query) = (InvitationForm::default(), ListQuery::default());
            invitations_page(&state, &viewer, &admin, &query, &values, Some(Shown::from(e))).await
        }
    }
}

/// `POST /admin/invitations/{id}/revoke`: the invitation can no longer be used; back to the
/// list with a notice. One that is used, revoked or unknown is the list again with a 404
/// message.
pub(crate) async fn revoke_invitation(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<String>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    let admin = match checked_admin(&state, &req, &viewer, form).await {
        Ok(admin) => admin,
        Err(refused) => return *refused,
    };
    match state.admin.admin_revoke_invitation(&admin, &id).await {
        Ok(()) => {
            viewer.keys().see_other_with_notice("/admin/invitations", "The invitation is revoked.")
        }
        Err(e) => {
            let (values, query) = (InvitationForm::default(), ListQuery::default());
            invitations_page(&state, &viewer, &admin, &query, &values, Some(Shown::from(e))).await
        }
    }
}
