//! Before and around a session: `/` (where a visitor starts), login (with the second factor),
//! registration, password reset and logout. The forms take the same rate limits and count the
//! same failures as the API's `/auth/login`, `/auth/register` and `/auth/password-reset`.

use crate::console::redirect::{LocalPath, DEFAULT_PAGE};
use crate::console::render::{page, see_other, Shown};
use crate::console::session::{ConsoleContext, Viewer};
use crate::console::view::{CsrfOnly, Form};
use crate::observe::metric;
use crate::routes::attempts::{client_info, count_login, failures_counted};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_service::{LoginOutcome, LogoutScope, Policy, SecondFactor, TokenSet};
use minijinja::value::merge_maps;
use minijinja::{context, Value};
use serde::Deserialize;

/// `GET /`: the keys page when signed in, else the login page.
pub(crate) async fn home(viewer: Option<Viewer>) -> HttpResponse {
    see_other(if viewer.is_some() { DEFAULT_PAGE } else { "/login" })
}

/// `?next=…` of the login page.
#[derive(Debug, Deserialize)]
pub(crate) struct NextQuery {
    next: Option<String>,
}

/// The login form.
#[derive(Deserialize)]
pub(crate) struct LoginForm {
    email: String,
    password: String,
    next: Option<String>,
}

/// The second-factor form.
#[derive(Deserialize)]
pub(crate) struct MfaForm {
    mfa_token: String,
    code: String,
    recovery: Option<String>,
    next: Option<String>,
}

/// The registration form.
#[derive(Deserialize)]
pub(crate) struct RegisterForm {
    email: String,
    password: String,
    name: Option<String>,
    invitation: Option<String>,
}

/// The password-reset form.
#[derive(Debug, Deserialize)]
pub(crate) struct ResetForm {
    email: String,
}

// Passwords and codes never reach a debug print.
impl std::fmt::Debug for LoginForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoginForm(…)")
    }
}
impl std::fmt::Debug for MfaForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MfaForm(…)")
    }
}
impl std::fmt::Debug for RegisterForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RegisterForm(…)")
    }
}

/// `303` to `location` with the session's cookies set.
fn signed_in(console: &ConsoleContext, tokens: &TokenSet, location: &LocalPath) -> HttpResponse {
    let mut response = see_other(location.as_str());
    for cookie in console.session_cookies(tokens) {
        let _ = response.add_cookie(&cookie);
    }
    response
}

fn login_page(
    state: &AppState,
    status: StatusCode,
    email: &str,
    next: &LocalPath,
    error: Option<Shown>,
) -> HttpResponse {
    let next = next.as_str();
    let encoded: String = url::form_urlencoded::byte_serialize(next.as_bytes()).collect();
    let providers: Vec<Value> = state
        .sso
        .providers()
        .into_iter()
        .map(|p| context! { name => p.name, href => format!("/sso/{}/start?next={encoded}", p.id) })
        .collect();
    let values = context! { title => "Log in", email, next, error, providers };
    page(status, Value::UNDEFINED, "login.html", values)
}

/// `GET /login`: the form, carrying `next` when it is a path of this origin
/// ([`LocalPath`]), else the default page, and a button per single sign-on provider.
pub(crate) async fn login_form(
    state: web::Data<AppState>,
    query: web::Query<NextQuery>,
) -> HttpResponse {
    let next = LocalPath::or_default(query.next.as_deref());
    login_page(&state, StatusCode::OK, "", &next, None)
}

/// `POST /login`: checks the password; starts the session or asks for the second factor.
/// Where the browser goes next is decided before the password is checked, so no `next` can
/// make a session whose cookies do not reach the browser.
pub(crate) async fn login(
    state: web::Data<AppState>,
    console: web::Data<ConsoleContext>,
    req: HttpRequest,
    form: Form<LoginForm>,
) -> HttpResponse {
    let form = match form.open(&req) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let next = LocalPath::or_default(form.next.as_deref());
    let result = async {
        state.limits.refuse_if_failing(&req).await?;
        state.limits.login(&req, &form.email).await?;
        let client = client_info(&state, &req);
        failures_counted(&state, &req, state.accounts.login(&form.email, form.password, &client))
            .await
    }
    .await;
    count_login(&state, &result);
    match result {
        Ok(LoginOutcome::Tokens(tokens)) => {
            state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
            signed_in(&console, &tokens, &next)
        }
        Ok(LoginOutcome::MfaRequired(challenge)) => page(
            StatusCode::OK,
            Value::UNDEFINED,
            "login_mfa.html",
            context! {
                title => "Second factor", mfa_token => challenge.mfa_token, next => next.as_str(),
            },
        ),
        Err(e) => {
            let shown = Shown::from(e);
            login_page(&state, shown.status, &form.email, &next, Some(shown))
        }
    }
}

/// `POST /login/mfa`: completes a login with a code or a recovery code.
pub(crate) async fn login_mfa(
    state: web::Data<AppState>,
    console: web::Data<ConsoleContext>,
    req: HttpRequest,
    form: Form<MfaForm>,
) -> HttpResponse {
    let form = match form.open(&req) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let next = LocalPath::or_default(form.next.as_deref());
    let result = async {
        state.limits.refuse_if_failing(&req).await?;
        state.limits.by_ip(&req, Policy::Login).await?;
        let code = form.code.trim();
        let factor = if form.recovery.is_some() {
            SecondFactor::from_fields(None, Some(code))?
        } else {
            SecondFactor::from_fields(Some(code), None)?
        };
        let client = client_info(&state, &req);
        let completed = state.accounts.complete_mfa_login(&form.mfa_token, &factor, &client);
        failures_counted(&state, &req, completed).await
    }
    .await;
    match result {
        Ok(tokens) => {
            state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
            signed_in(&console, &tokens, &next)
        }
        Err(e) => {
            let error = Shown::from(e);
            page(
                error.status,
                Value::UNDEFINED,
                "login_mfa.html",
                context! {
                    title => "Second factor", mfa_token => form.mfa_token, next => next.as_str(),
                    error,
                },
            )
        }
    }
}

fn register_page(
    console: &ConsoleContext,
    status: StatusCode,
    values: minijinja::Value,
) -> HttpResponse {
    let common = context! {
        title => "Create an account",
        mode => console.registration,
        min_password => console.password_min_chars,
    };
    page(status, Value::UNDEFINED, "register.html", merge_maps([values, common]))
}

/// `GET /register`.
pub(crate) async fn register_form(
    console: web::Data<ConsoleContext>,
    query: web::Query<std::collections::HashMap<String, String>>,
) -> HttpResponse {
    let invitation = query.get("invitation").cloned().unwrap_or_default();
    register_page(&console, StatusCode::OK, context! { email => "", name => "", invitation })
}

/// `POST /register`: creates the account and starts its first session.
pub(crate) async fn register(
    state: web::Data<AppState>,
    console: web::Data<ConsoleContext>,
    req: HttpRequest,
    form: Form<RegisterForm>,
) -> HttpResponse {
    let form = match form.open(&req) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let name = form.name.as_deref().map(str::trim).filter(|n| !n.is_empty());
    let invitation = form.invitation.as_deref().map(str::trim).filter(|i| !i.is_empty());
    let result = async {
        state.limits.by_ip(&req, Policy::Register).await?;
        let client = client_info(&state, &req);
        Ok::<_, crate::error::ApiError>(
            state.accounts.register(&form.email, form.password, name, invitation, &client).await?,
        )
    }
    .await;
    match result {
        Ok(tokens) => {
            state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
            signed_in(&console, &tokens, &LocalPath::or_default(None))
        }
        Err(e) => {
            let error = Shown::from(e);
            register_page(
                &console,
                error.status,
                context! {
                    email => form.email, name => form.name, invitation => form.invitation, error,
                },
            )
        }
    }
}

/// `GET /password-reset`.
pub(crate) async fn password_reset_form() -> HttpResponse {
    page(
        StatusCode::OK,
        Value::UNDEFINED,
        "password_reset.html",
        context! { title => "Reset the password", email => "" },
    )
}

/// `POST /password-reset`: sends a link when an account has the address (the page says the
/// same either way, after the same time, as the API).
pub(crate) async fn password_reset(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Form<ResetForm>,
) -> HttpResponse {
    let form = match form.open(&req) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let result = async {
        state.limits.password_reset(&req, &form.email).await?;
        state.account_email.request_password_reset(&form.email)?;
        Ok::<_, crate::error::ApiError>(())
    }
    .await;
    let title = "Reset the password";
    match result {
        Ok(()) => page(
            StatusCode::OK,
            Value::UNDEFINED,
            "password_reset.html",
            context! { title, email => form.email, sent => true },
        ),
        Err(e) => {
            let error = Shown::from(e);
            page(
                error.status,
                Value::UNDEFINED,
                "password_reset.html",
                context! { title, email => form.email, error },
            )
        }
    }
}

/// `POST /logout`: ends this session and removes its cookies.
pub(crate) async fn logout(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let ended = match viewer.authorized::<op::Logout>() {
        Ok(caller) => state.accounts.logout(&caller, LogoutScope::Local, None).await,
        Err(e) => Err(e),
    };
    match ended {
        Ok(revoked) => {
            state
                .telemetry
                .metrics
                .counter(metric::SESSIONS_REVOKED_TOTAL, &[("reason", "logout")])
                .increment(revoked as u64);
            let mut response = see_other("/login");
            for cookie in viewer.keys().removal_cookies() {
                let _ = response.add_cookie(&cookie);
            }
            response
        }
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}
