//! `/sessions` and `/account`: the viewer's sessions (ending one), and their account (name,
//! password, e-mail address and its verification; the second factor has its own page,
//! [`crate::console::mfa`]). The same use cases, rate limits and counted failures as
//! `/api/v1/auth/sessions`, `PATCH /api/v1/auth/me`, `POST /api/v1/auth/password`,
//! `POST /api/v1/auth/email/change` and `POST /api/v1/auth/email/verification`.

use crate::console::render::{see_other, Shown};
use crate::console::session::{forget_renewed, Viewer};
use crate::console::view::{when, CsrfField, CsrfOnly, Form};
use crate::routes::attempts::failures_counted;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::{Policy, ServiceError};
use minijinja::context;
use serde::Deserialize;

/// `GET /sessions`: the viewer's live sessions, newest first, this one marked, each with a
/// form that ends it.
///
/// Errors: a database outage is a 503 page.
pub(crate) async fn sessions(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    let listed = match viewer.authorized::<op::ReadAccount>() {
        Ok(caller) => state.accounts.list_sessions(&caller).await,
        Err(e) => Err(e),
    };
    match listed {
        Ok(sessions) => {
            let rows: Vec<_> = sessions
                .iter()
                .map(|s| {
                    context! {
                        id => s.id,
                        created => when(&s.created_at),
                        last_used => when(&s.last_used_at),
                        expires => when(&s.expires_at),
                        ip => s.ip,
                        user_agent => s.user_agent,
                        current => s.current || s.id == viewer.session_id(),
                    }
                })
                .collect();
            viewer.page(
                StatusCode::OK,
                "sessions.html",
                context! { title => "Sessions", section => "sessions", sessions => rows },
            )
        }
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// `POST /sessions/{id}/end`: ends one of the viewer's sessions (its tokens are refused on
/// every node at once). Ending the current one logs this browser out (to `/login`).
///
/// Errors: 404 page for an id that is not one of the viewer's live sessions.
pub(crate) async fn end_session(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<String>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let ended = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.accounts.end_session(&caller, &id).await,
        Err(e) => Err(e),
    };
    match ended {
        Ok(()) if id.as_str() == viewer.session_id() => {
            forget_renewed(&req);
            let mut response = see_other("/login");
            for cookie in viewer.keys().removal_cookies() {
                let _ = response.add_cookie(&cookie);
            }
            response
        }
        Ok(()) => viewer.keys().see_other_with_notice(
            "/sessions",
            "The session has ended: its browser or client must log in again.",
        ),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// The name form.
#[derive(Debug, Deserialize)]
pub(crate) struct NameForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    display_name: String,
}

impl CsrfField for NameForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The password form.
#[derive(Deserialize)]
pub(crate) struct PasswordForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    current_password: String,
    #[serde(default)]
    new_password: String,
}

// Passwords never reach a debug print.
impl std::fmt::Debug for PasswordForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PasswordForm(…)")
    }
}

impl CsrfField for PasswordForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The e-mail change form: the new address and the password.
#[derive(Deserialize)]
pub(crate) struct EmailForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
}

// Passwords never reach a debug print.
impl std::fmt::Debug for EmailForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmailForm(…)")
    }
}

impl CsrfField for EmailForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// What the account page's fields hold: the stored name and nothing typed, or what was typed
/// before an error.
#[derive(Debug, Default)]
struct Typed {
    display_name: Option<String>,
    new_email: String,
}

/// The account page, its fields holding `typed` (the stored name where nothing was typed).
async fn account_page(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    typed: Typed,
    error: Option<Shown>,
) -> HttpResponse {
    let mfa = match viewer.authorized::<op::ReadAccount>() {
        Ok(caller) => state.mfa.mfa_status(&caller).await,
        Err(e) => Err(e),
    };
    let mfa = match mfa {
        Ok(mfa) => mfa,
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let user = &viewer.user;
    let display_name = typed.display_name.unwrap_or_else(|| user.name.clone());
    let new_email = typed.new_email;
    let account = context! {
        email => user.email,
        name => user.name,
        role => user.role.as_str(),
        created => when(&user.created_at),
        verified => user.email_verified_at.as_ref().map(when),
    };
    let mfa = context! {
        enabled => mfa.enabled,
        since => mfa.enabled_at.as_ref().map(when),
        pending => mfa.pending,
        recovery_codes_left => mfa.recovery_codes_left,
    };
    viewer.page(
        status,
        "account.html",
        context! {
            title => "Account", section => "account", account, mfa, display_name, new_email,
            error,
            verification_on => viewer.keys().email_verification,
            min_password => viewer.keys().password_min_chars,
        },
    )
}

/// `GET /account`: the account (e-mail and whether it is verified, name, role, creation,
/// second factor) and the forms that change the name and the password.
///
/// Errors: a database outage is a 503 page.
pub(crate) async fn show(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    account_page(&state, &viewer, StatusCode::OK, Typed::default(), None).await
}

/// `POST /account/name`: changes the display name.
///
/// Errors: a refused name re-renders the page with the field marked (400).
pub(crate) async fn update_name(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<NameForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let updated = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.accounts.update_name(&caller, &form.display_name).await,
        Err(e) => Err(e),
    };
    match updated {
        Ok(_) => viewer.keys().see_other_with_notice("/account", "Your name is changed."),
        Err(e) => {
            let shown = Shown::from(e);
            let typed = Typed { display_name: Some(form.display_name), ..Typed::default() };
            account_page(&state, &viewer, shown.status, typed, Some(shown)).await
        }
    }
}

/// `POST /account/password`: changes the password with the current one. Every other session
/// ends; this one goes on with a fresh token set (its cookies are replaced).
///
/// Errors: a wrong current password re-renders the page (401, counted as a failed login
/// against the client address, as the API counts it); a new password the policy refuses,
/// 400; an address that failed too often, 429. Nothing changes then.
pub(crate) async fn change_password(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<PasswordForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let changed = async {
        state.limits.refuse_if_failing(&req).await.map_err(Shown::from)?;
        let caller = viewer.authorized::<op::ManageAccount>().map_err(Shown::from)?;
        let PasswordForm { current_password, new_password, .. } = form;
        match state.accounts.change_password(&caller, current_password, new_password).await {
            Err(e @ ServiceError::Unauthorized { .. }) => {
                state.limits.count_failure(&req).await;
                let mut shown = Shown::from(e);
                shown.field = Some("current_password".to_owned());
                Err(shown)
            }
            other => other.map_err(Shown::from),
        }
    }
    .await;
    match changed {
        Ok(tokens) => {
            forget_renewed(&req);
            let mut response = viewer.keys().see_other_with_notice(
                "/account",
                "Your password is changed. Your other sessions have ended.",
            );
            for cookie in viewer.keys().session_cookies(&tokens) {
                let _ = response.add_cookie(&cookie);
            }
            response
        }
        Err(shown) => {
            account_page(&state, &viewer, shown.status, Typed::default(), Some(shown)).await
        }
    }
}

/// `POST /account/verification`: sends a new verification link to the account's address
/// (earlier links stop working); rate-limited per account like the API (`email_send`).
///
/// Errors: an address verified already (400), too many messages (429): the page again with
/// the message.
pub(crate) async fn request_verification(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let sent = async {
        let caller = viewer.authorized::<op::ManageAccount>().map_err(Shown::from)?;
        state
            .limits
            .by_user(&req, Policy::EmailSend, caller.user_id())
            .await
            .map_err(Shown::from)?;
        state.account_email.request_verification(&caller).await.map_err(Shown::from)
    }
    .await;
    match sent {
        Ok(link) => viewer.keys().see_other_with_notice(
            "/account",
            &format!(
                "A new verification link is on its way to {}; it works until {}.",
                link.email,
                when(&link.expires_at)
            ),
        ),
        Err(shown) => {
            account_page(&state, &viewer, shown.status, Typed::default(), Some(shown)).await
        }
    }
}

/// `POST /account/email`: asks to move the account to a new address, with the password: a
/// link goes to the new address, and the address changes when it is opened (the old one is
/// told). Rate-limited per account like the API (`email_send`).
///
/// Errors: a wrong password re-renders the page (401, counted as a failed login against the
/// client address); an address that is malformed, the current one, in a domain that may not
/// register or registered already, 400 naming `email`; too many messages, 429. Nothing
/// changes then.
pub(crate) async fn change_email(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<EmailForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let EmailForm { email, password, .. } = form;
    let requested = async {
        state.limits.refuse_if_failing(&req).await.map_err(Shown::from)?;
        let caller = viewer.authorized::<op::ManageAccount>().map_err(Shown::from)?;
        state
            .limits
            .by_user(&req, Policy::EmailSend, caller.user_id())
            .await
            .map_err(Shown::from)?;
        let change = state.account_email.request_email_change(&caller, email.trim(), password);
        failures_counted(&state, &req, change).await.map_err(|e| {
            let mut shown = Shown::from(e);
            if shown.status == StatusCode::UNAUTHORIZED {
                shown.field = Some("email_password".to_owned());
            }
            shown
        })
    }
    .await;
    match requested {
        Ok(link) => viewer.keys().see_other_with_notice(
            "/account",
            &format!(
                "A link is on its way to {}: your address changes when you open it (it works until {}).",
                link.email,
                when(&link.expires_at)
            ),
        ),
        Err(shown) => {
            let typed = Typed { new_email: email, ..Typed::default() };
            account_page(&state, &viewer, shown.status, typed, Some(shown)).await
        }
    }
}
