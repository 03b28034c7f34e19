//! `/sso/<provider>/…`: single sign-on in the console (docs/sso.md). `start` sends the
//! browser to the provider with a fresh state, nonce and PKCE challenge, keeping the pending
//! sign-in sealed in a short-lived cookie; `callback` checks the provider's answer
//! ([`aigw_service::sso::Sso::complete`]) and starts an ordinary console session.
//!
//! A start with `redirect_uri` (one of `sso.app_redirect_uris`) and a PKCE `code_challenge`
//! is a single-page application's: its callback sends the browser to that URI with a
//! one-time code (exchanged at `POST /api/v1/auth/sso/exchange`), or with an `error`.
//!
//! The session's cookies are `SameSite=Strict`, and the callback is a cross-site navigation
//! (from the provider): a redirect from it would carry on as cross-site and the next page
//! would not see them. So the callback answers a page that moves on by itself (a meta
//! refresh: a same-site navigation) instead of a redirect.

use crate::console::redirect::LocalPath;
use crate::console::render::{self, page, Shown};
use crate::console::session::{ConsoleContext, SSO_COOKIE};
use crate::observe::metric;
use crate::routes::attempts::client_info;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_service::sso::{AppReturn, SignInEnd};
use aigw_service::{LoginOutcome, Policy};
use minijinja::{context, Value};
use serde::Deserialize;

/// `?next=…&login_hint=…` of a sign-in's start; a single-page application's adds
/// `redirect_uri`, `code_challenge`, `code_challenge_method` (`S256`) and its own `state`.
#[derive(Debug, Deserialize)]
pub(crate) struct StartQuery {
    next: Option<String>,
    login_hint: Option<String>,
    redirect_uri: Option<String>,
    code_challenge: Option<String>,
    code_challenge_method: Option<String>,
    state: Option<String>,
}

impl StartQuery {
    /// The single-page application's return, when it asks for one.
    fn app(&self, uris: &[String]) -> Result<Option<AppReturn>, aigw_service::ServiceError> {
        let Some(uri) = &self.redirect_uri else { return Ok(None) };
        let (challenge, method) = (&self.code_challenge, &self.code_challenge_method);
        let state = self.state.as_deref();
        AppReturn::parse(uris, uri, challenge.as_deref(), method.as_deref(), state).map(Some)
    }
}

/// `?code=…&state=…` (or `error=…&error_description=…`) of the provider's answer.
#[derive(Deserialize)]
pub(crate) struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

// Codes never reach a debug print.
impl std::fmt::Debug for CallbackQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackQuery").field("error", &self.error).finish_non_exhaustive()
    }
}

/// `GET /sso/<provider>/start`: to the provider's authorization page, the pending sign-in in
/// the [`SSO_COOKIE`] for `sso.sign_in_ttl_secs`. `next` is where the console goes after
/// the sign-in (a path of this origin, else the keys page); `login_hint` goes to the
/// provider; `redirect_uri` and the rest make it a single-page application's sign-in.
///
/// Errors: an unknown provider is a 404 page; a `redirect_uri` that is not allowed, or a
/// missing or malformed `code_challenge` with it, a 400 page naming the parameter; a provider
/// whose discovery document cannot be read, a 503 page.
pub(crate) async fn start(
    state: web::Data<AppState>,
    console: web::Data<ConsoleContext>,
    id: web::Path<String>,
    query: web::Query<StartQuery>,
) -> HttpResponse {
    let next = LocalPath::or_default(query.next.as_deref());
    let started = async {
        let app = query.app(state.sso.app_redirect_uris())?;
        let hint = query.login_hint.as_deref();
        let (url, pending) =
            state.sso.begin(&id, Some(next.as_str().to_owned()), hint, app).await?;
        let sealed = state.sso.seal(&pending)?;
        Ok::<_, aigw_service::ServiceError>((url, sealed, state.sso.sign_in_ttl_secs()))
    }
    .await;
    match started {
        Ok((url, sealed, ttl)) => {
            let mut response = render::see_other(&url);
            let _ = response.add_cookie(&console.sso_cookie(sealed, ttl));
            response
        }
        Err(e) => render::failure(Value::UNDEFINED, &Shown::from(e)),
    }
}

/// `GET /sso/<provider>/callback`: the provider's answer. A verified sign-in starts a
/// session (its cookies set, the pending sign-in's removed) and moves on to `next`; an
/// account with aigw's second factor on gets the code form first. A single-page
/// application's sign-in is sent on (303) to its redirect URI with a one-time code, or with
/// an `error` once its pending sign-in was read.
///
/// Errors: every refusal (a provider's error, a missing or forged state, a replayed
/// callback, a refused code, an ID token that fails verification, an address that may not
/// sign in) is a 401 page saying why, and audited; a missing `code` or `state`, 400; an
/// unknown provider, 404; too many sign-ins from the address, 429; the provider or the
/// database unreachable, 503.
pub(crate) async fn callback(
    state: web::Data<AppState>,
    console: web::Data<ConsoleContext>,
    req: HttpRequest,
    id: web::Path<String>,
    query: web::Query<CallbackQuery>,
) -> HttpResponse {
    let mut response = answer(&state, &console, &req, &id, &query).await;
    let _ = response.add_cookie(&console.sso_cookie(String::new(), 0));
    response
}

async fn answer(
    state: &AppState,
    console: &ConsoleContext,
    req: &HttpRequest,
    id: &str,
    query: &CallbackQuery,
) -> HttpResponse {
    if let Some(error) = &query.error {
        let detail = query.error_description.as_deref().unwrap_or("no description");
        let message = format!("The identity provider refused the sign-in: {error} ({detail}).");
        return render::failure(Value::UNDEFINED, &Shown::new(StatusCode::UNAUTHORIZED, message));
    }
    let (Some(code), Some(returned_state)) = (&query.code, &query.state) else {
        let message = "The identity provider's answer lacks its code or state.";
        return render::failure(Value::UNDEFINED, &Shown::new(StatusCode::BAD_REQUEST, message));
    };
    if let Err(e) = state.limits.by_ip(req, Policy::Login).await {
        return render::failure(Value::UNDEFINED, &Shown::from(e));
    }
    let sealed = req.cookie(SSO_COOKIE).map(|c| c.value().to_owned());
    let client = client_info(state, req);
    let completed = state.sso.complete(id, code, returned_state, sealed.as_deref(), &client).await;
    match completed {
        Ok(SignInEnd::App(url)) => render::see_other(&url),
        Ok(SignInEnd::Console(outcome, next)) => signed_in(state, console, id, *outcome, next),
        Err(e) => render::failure(Value::UNDEFINED, &Shown::from(e)),
    }
}

/// The console's answer to a completed sign-in: the session's cookies and the page that
/// moves on to `next`, or the second factor's form.
fn signed_in(
    state: &AppState,
    console: &ConsoleContext,
    id: &str,
    outcome: LoginOutcome,
    next: Option<String>,
) -> HttpResponse {
    match outcome {
        LoginOutcome::Tokens(tokens) => {
            state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
            let next = LocalPath::or_default(next.as_deref());
            let provider = state.sso.providers().into_iter().find(|p| p.id == id);
            let provider = provider.map_or_else(|| id.to_owned(), |p| p.name);
            let values = context! { title => "Signed in", provider, next => next.as_str() };
            let mut response = page(StatusCode::OK, Value::UNDEFINED, "sso_done.html", values);
            for cookie in console.session_cookies(&tokens) {
                let _ = response.add_cookie(&cookie);
            }
            response
        }
        LoginOutcome::MfaRequired(challenge) => {
            let next = LocalPath::or_default(next.as_deref());
            let values = context! {
                title => "Second factor", mfa_token => challenge.mfa_token, next => next.as_str(),
            };
            page(StatusCode::OK, Value::UNDEFINED, "login_mfa.html", values)
        }
    }
}
