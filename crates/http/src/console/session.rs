//! The console's session: two cookies and the checks on every request.
//!
//! Logging in through the console starts an ordinary session (listed with the others, ended
//! like them). Its access token travels in the `aigw_access` cookie and its refresh token in
//! `aigw_refresh`: both `HttpOnly` (no script reads them), `SameSite=Strict` (no other site's
//! page sends them), `Path=/`, and `Secure` unless `server.environment = "development"`.
//! Nothing is kept in `localStorage`. When the access token has expired, the next request
//! rotates the refresh token as `POST /auth/refresh` does and sets both cookies again; a
//! session that has ended (logout, password change, an administrator disabling the account)
//! sends the browser to the login page.
//!
//! Every state-changing request is a form `POST` that must carry the session's CSRF token,
//! `HMAC-SHA256(key, session id)` in hex, the key derived (HKDF-SHA256) from the JWT signing
//! key material every node shares; a `POST` that another site made the browser send
//! (`Sec-Fetch-Site` other than `same-origin`, or an `Origin` of another host) is refused
//! before anything else (this also covers the forms used before a session exists: login,
//! registration, password reset).

use crate::console::redirect::LocalPath;
use crate::console::render::{self, Shown};
use crate::error::ApiError;
use crate::state::AppState;
use actix_web::cookie::{time::Duration as CookieDuration, Cookie, SameSite};
use actix_web::dev::Payload;
use actix_web::http::{header, Method, StatusCode};
use actix_web::{web, FromRequest, HttpMessage, HttpRequest, HttpResponse, ResponseError};
use aigw_domain::access::{op, RouteOperation};
use aigw_domain::Role;
use aigw_service::{Authorized, Policy, Principal, ServiceError, TokenSet, UserView};
use futures_util::future::LocalBoxFuture;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::Arc;

/// The access token's cookie.
pub(crate) const ACCESS_COOKIE: &str = "aigw_access";
/// The refresh token's cookie.
pub(crate) const REFRESH_COOKIE: &str = "aigw_refresh";
/// A one-time notice for the next page (set with a redirect after a form).
pub(crate) const NOTICE_COOKIE: &str = "aigw_notice";
/// The cookie of a single sign-on under way: the sealed pending sign-in, `Path=/sso/`,
/// `SameSite=Lax` (the provider sends the browser back with a cross-site navigation, which
/// `Strict` cookies do not travel with).
pub(crate) const SSO_COOKIE: &str = "aigw_sso";

/// What every console page needs to know (app data of the console's scope): cookie settings,
/// the CSRF key, the registration policy.
#[derive(Clone)]
pub(crate) struct ConsoleContext {
    /// Whether cookies carry `Secure` (everywhere but development).
    pub(crate) secure: bool,
    /// The CSRF MAC key.
    csrf_key: Arc<[u8; 32]>,
    /// Lifetime of the refresh cookie, in seconds (`auth.refresh_token_ttl_secs`).
    refresh_ttl_secs: u64,
    /// `auth.registration`: `open`, `invite` or `closed` (the registration page says which).
    pub(crate) registration: &'static str,
    /// `auth.password_min_chars`.
    pub(crate) password_min_chars: usize,
    /// Whether `auth.email_verification` is `optional` or `required` (the account page then
    /// offers a new verification link).
    pub(crate) email_verification: bool,
}

impl std::fmt::Debug for ConsoleContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsoleContext").field("secure", &self.secure).finish_non_exhaustive()
    }
}

impl ConsoleContext {
    /// The console's context under `auth` and `server`, its CSRF key derived from the first of
    /// `materials` (the JWT signing key material).
    pub(crate) fn new<'a>(
        secure: bool,
        auth: &aigw_service::AuthConfig,
        mut materials: impl Iterator<Item = &'a [u8]>,
    ) -> Self {
        let mut key = [0u8; 32];
        let material = materials.next().unwrap_or_default();
        // 32 bytes are far below HKDF-SHA256's limit of 8160: expanding cannot fail.
        let _ = hkdf::Hkdf::<Sha256>::new(None, material).expand(b"aigw console csrf v1", &mut key);
        let registration = match auth.registration {
            aigw_service::RegistrationMode::Open => "open",
            aigw_service::RegistrationMode::Invite => "invite",
            aigw_service::RegistrationMode::Closed => "closed",
        };
        Self {
            secure,
            csrf_key: Arc::new(key),
            refresh_ttl_secs: auth.refresh_token_ttl_secs,
            registration,
            password_min_chars: auth.password_min_chars,
            email_verification: auth.email_verification
                != aigw_service::config::EmailVerification::Off,
        }
    }

    /// The CSRF token of session `session_id`: lower-case hex of its HMAC-SHA256.
    fn csrf(&self, session_id: &str) -> String {
        base16ct::lower::encode_string(&self.mac(session_id).finalize().into_bytes())
    }

    /// Whether `presented` is session `session_id`'s CSRF token (constant time).
    fn csrf_matches(&self, session_id: &str, presented: &str) -> bool {
        let Ok(bytes) = base16ct::lower::decode_vec(presented) else { return false };
        self.mac(session_id).verify_slice(&bytes).is_ok()
    }

    fn mac(&self, session_id: &str) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.csrf_key.as_slice())
            .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
        mac.update(session_id.as_bytes());
        mac
    }

    /// A cookie of the console: `HttpOnly`, `SameSite=Strict`, `Path=/`, `Secure` outside
    /// development, living `max_age_secs`.
    fn cookie(&self, name: &'static str, value: String, max_age_secs: u64) -> Cookie<'static> {
        let mut cookie = Cookie::new(name, value);
        cookie.set_http_only(true);
        cookie.set_same_site(SameSite::Strict);
        cookie.set_path("/");
        cookie.set_secure(self.secure);
        cookie
            .set_max_age(CookieDuration::seconds(i64::try_from(max_age_secs).unwrap_or(i64::MAX)));
        cookie
    }

    /// The cookies that carry a new token set.
    pub(crate) fn session_cookies(&self, tokens: &TokenSet) -> [Cookie<'static>; 2] {
        [
            self.cookie(ACCESS_COOKIE, tokens.access_token.clone(), tokens.expires_in),
            self.cookie(REFRESH_COOKIE, tokens.refresh_token.clone(), self.refresh_ttl_secs),
        ]
    }

    /// The cookies that end the browser's copy of the session.
    pub(crate) fn removal_cookies(&self) -> [Cookie<'static>; 2] {
        [
            self.cookie(ACCESS_COOKIE, String::new(), 0),
            self.cookie(REFRESH_COOKIE, String::new(), 0),
        ]
    }

    /// The cookie that keeps a sealed pending sign-in for `max_age_secs` (see [`SSO_COOKIE`]);
    /// an empty `value` and 0 remove it.
    pub(crate) fn sso_cookie(&self, value: String, max_age_secs: u64) -> Cookie<'static> {
        let mut cookie = self.cookie(SSO_COOKIE, value, max_age_secs);
        cookie.set_same_site(SameSite::Lax);
        cookie.set_path("/sso/");
        cookie
    }

    /// `303` to `location` with `notice` shown once on the next page.
    pub(crate) fn see_other_with_notice(&self, location: &str, notice: &str) -> HttpResponse {
        let mut response = render::see_other(location);
        let value = base16ct::lower::encode_string(notice.as_bytes());
        let _ = response.add_cookie(&self.cookie(NOTICE_COOKIE, value, 60));
        response
    }
}

/// The signed-in user of a console page: the session's principal, the account, the CSRF
/// token to put in forms, and a notice left by the previous form.
#[derive(Debug)]
pub(crate) struct Viewer {
    pub(crate) principal: Principal,
    pub(crate) user: UserView,
    pub(crate) csrf: String,
    pub(crate) notice: Option<String>,
    keys: ConsoleContext,
}

impl Viewer {
    /// Whether the account is a platform admin (as the database says now).
    pub(crate) fn is_admin(&self) -> bool {
        self.user.role == Role::Admin
    }

    /// The proof the use cases of operation `O` take.
    ///
    /// # Errors
    /// [`ServiceError::Forbidden`] when the who-may-call-what table refuses (never for a
    /// session's principal on the operations the console uses).
    pub(crate) fn authorized<O: RouteOperation>(&self) -> Result<Authorized<O>, ServiceError> {
        Authorized::check(self.principal.clone())
    }

    /// The session's id.
    pub(crate) fn session_id(&self) -> &str {
        match &self.principal {
            Principal::User { session_id, .. } => session_id,
            Principal::ApiKey { key_id, .. } => key_id,
        }
    }

    /// Checks a form's CSRF token.
    ///
    /// # Errors
    /// A 403 page when it is not this session's.
    pub(crate) fn check_csrf(&self, presented: &str) -> Result<(), Box<HttpResponse>> {
        if self.keys.csrf_matches(self.session_id(), presented) {
            Ok(())
        } else {
            Err(Box::new(render::failure(
                self.frame(),
                &Shown::new(
                    StatusCode::FORBIDDEN,
                    "This form has expired or came from another site. Open the page again and resend it.",
                ),
            )))
        }
    }

    /// What the layout shows of the viewer: `viewer` (name, e-mail, id, admin), `csrf` and
    /// `notice`.
    pub(crate) fn frame(&self) -> minijinja::Value {
        minijinja::context! {
            viewer => minijinja::context! {
                name => self.user.name, email => self.user.email, id => self.user.id,
                admin => self.is_admin(),
            },
            csrf => self.csrf,
            notice => self.notice,
        }
    }

    /// `template` rendered for this viewer (see [`render::page`]).
    pub(crate) fn page(
        &self,
        status: StatusCode,
        template: &str,
        values: minijinja::Value,
    ) -> HttpResponse {
        render::page(status, self.frame(), template, values)
    }

    /// The page of a failure, for this viewer.
    pub(crate) fn failure(&self, shown: &Shown) -> HttpResponse {
        render::failure(self.frame(), shown)
    }

    /// The console's cookie settings.
    pub(crate) fn keys(&self) -> &ConsoleContext {
        &self.keys
    }
}

/// Why a request has no [`Viewer`]: no live session (to the login page), or a refusal
/// (rate limit, database down) shown as a page.
#[derive(Debug)]
pub(crate) enum NoViewer {
    /// Not signed in, or the session has ended: `303` to `/login?next=…` (`next`: the page
    /// asked for, kept when it is a [`LocalPath`]), cookies removed.
    LoggedOut { next: String, keys: Option<ConsoleContext> },
    /// A refusal of the request itself.
    Refused(Shown),
}

impl std::fmt::Display for NoViewer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoViewer::LoggedOut { .. } => f.write_str("not signed in"),
            NoViewer::Refused(shown) => f.write_str(&shown.message),
        }
    }
}

impl ResponseError for NoViewer {
    fn status_code(&self) -> StatusCode {
        match self {
            NoViewer::LoggedOut { .. } => StatusCode::SEE_OTHER,
            NoViewer::Refused(shown) => shown.status,
        }
    }

    fn error_response(&self) -> HttpResponse {
        match self {
            NoViewer::LoggedOut { next, keys } => {
                // The page asked for comes back after the login only when it is a path of
                // this origin as a browser reads it (a request's path may hold anything).
                let location = match LocalPath::parse(next) {
                    Some(next) if next.as_str() != "/" => {
                        let next: String =
                            url::form_urlencoded::byte_serialize(next.as_str().as_bytes())
                                .collect();
                        format!("/login?next={next}")
                    }
                    _ => "/login".to_owned(),
                };
                let mut response = render::see_other(&location);
                if let Some(keys) = keys {
                    for cookie in keys.removal_cookies() {
                        let _ = response.add_cookie(&cookie);
                    }
                }
                response
            }
            NoViewer::Refused(shown) => render::failure(minijinja::Value::UNDEFINED, shown),
        }
    }
}

/// Tokens renewed while serving a request: their cookies are added to the answer
/// ([`renewed_cookies`]).
#[derive(Clone)]
struct Renewed(Vec<Cookie<'static>>);

/// Drops the cookies of tokens renewed while serving `req`, for a handler whose answer sets
/// (or removes) the session's cookies itself: a password change's fresh token set, the end
/// of the current session.
pub(crate) fn forget_renewed(req: &HttpRequest) {
    req.extensions_mut().remove::<Renewed>();
}

/// Middleware of the console's scope: adds the cookies of a token set renewed during the
/// request, and removes the one-time notice once a page has shown it.
pub(crate) async fn renewed_cookies(
    req: actix_web::dev::ServiceRequest,
    next: actix_web::middleware::Next<impl actix_web::body::MessageBody + 'static>,
) -> Result<actix_web::dev::ServiceResponse<impl actix_web::body::MessageBody>, actix_web::Error> {
    let had_notice = req.cookie(NOTICE_COOKIE).is_some();
    let keys = req.app_data::<web::Data<ConsoleContext>>().map(|c| ConsoleContext::clone(c));
    let mut response = next.call(req).await?;
    let renewed = response.request().extensions().get::<Renewed>().cloned();
    let is_get = response.request().method() == Method::GET;
    let sets_notice = response
        .headers()
        .get_all(header::SET_COOKIE)
        .any(|v| v.as_bytes().starts_with(NOTICE_COOKIE.as_bytes()));
    if let Some(Renewed(cookies)) = renewed {
        for cookie in cookies {
            let _ = response.response_mut().add_cookie(&cookie);
        }
    }
    if had_notice && is_get && !sets_notice {
        if let Some(keys) = keys {
            let _ =
                response.response_mut().add_cookie(&keys.cookie(NOTICE_COOKIE, String::new(), 0));
        }
    }
    Ok(response)
}

/// Refuses a `POST` that another site made the browser send. A browser that sends
/// `Sec-Fetch-Site` must say `same-origin` (or `none`: typed or bookmarked); else an `Origin`
/// it sends must name this request's host. A request with neither (a client that is not a
/// browser) passes; the CSRF token still guards every signed-in form. The console's pages are
/// sent with `Referrer-Policy: same-origin`, under which browsers send a real `Origin` on
/// their own forms (`no-referrer` would make it `null`).
///
/// # Errors
/// A 403 page.
pub(crate) fn same_origin(req: &HttpRequest) -> Result<(), Box<HttpResponse>> {
    let headers = req.headers();
    let allowed = match headers.get("sec-fetch-site") {
        Some(site) => {
            let site = site.as_bytes();
            site.eq_ignore_ascii_case(b"same-origin") || site.eq_ignore_ascii_case(b"none")
        }
        None => headers.get(header::ORIGIN).is_none_or(|origin| {
            let host = req.connection_info().host().to_ascii_lowercase();
            url::Url::parse(origin.to_str().unwrap_or("null")).is_ok_and(|url| {
                let authority = match (url.host_str(), url.port()) {
                    (Some(h), Some(p)) => format!("{h}:{p}"),
                    (Some(h), None) => h.to_owned(),
                    _ => String::new(),
                };
                authority.to_ascii_lowercase() == host
            })
        }),
    };
    if allowed {
        Ok(())
    } else {
        Err(Box::new(render::failure(
            minijinja::Value::UNDEFINED,
            &Shown::new(StatusCode::FORBIDDEN, "This form was sent from another site."),
        )))
    }
}

impl FromRequest for Viewer {
    type Error = NoViewer;
    type Future = LocalBoxFuture<'static, Result<Self, NoViewer>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let req = req.clone();
        Box::pin(async move { viewer_of(&req).await })
    }
}

async fn viewer_of(req: &HttpRequest) -> Result<Viewer, NoViewer> {
    let state = req.app_data::<web::Data<AppState>>().cloned();
    let keys = req.app_data::<web::Data<ConsoleContext>>().map(|c| ConsoleContext::clone(c));
    let (Some(state), Some(keys)) = (state, keys) else {
        return Err(NoViewer::Refused(Shown::from(ApiError::internal("console state missing"))));
    };
    let next = match req.method() {
        &Method::GET => req.uri().path_and_query().map_or("/", |p| p.as_str()).to_owned(),
        _ => "/".to_owned(),
    };
    let logged_out = || NoViewer::LoggedOut { next: next.clone(), keys: Some(keys.clone()) };
    let refused = |e: ServiceError| NoViewer::Refused(Shown::from(e));

    let access = req.cookie(ACCESS_COOKIE).map(|c| c.value().to_owned()).filter(|v| !v.is_empty());
    let refresh =
        req.cookie(REFRESH_COOKIE).map(|c| c.value().to_owned()).filter(|v| !v.is_empty());
    if access.is_none() && refresh.is_none() {
        return Err(logged_out());
    }
    let mut principal = None;
    if let Some(access) = &access {
        match state.authenticator.authenticate(Some(&format!("Bearer {access}"))).await {
            Ok(p @ Principal::User { .. }) => principal = Some(p),
            Ok(Principal::ApiKey { .. }) | Err(ServiceError::Unauthorized { .. }) => {}
            Err(e) => return Err(refused(e)),
        }
    }
    if principal.is_none() {
        // The access token has expired (or was never set): rotate the refresh token.
        let Some(refresh) = refresh else { return Err(logged_out()) };
        if state.limits.refuse_if_failing(req).await.is_err() {
            return Err(logged_out());
        }
        let tokens = match state.accounts.refresh(&refresh).await {
            Ok(tokens) => tokens,
            Err(ServiceError::Unauthorized { .. }) => {
                state.limits.count_failure(req).await;
                return Err(logged_out());
            }
            Err(e) => return Err(refused(e)),
        };
        match state
            .authenticator
            .authenticate(Some(&format!("Bearer {}", tokens.access_token)))
            .await
        {
            Ok(p @ Principal::User { .. }) => principal = Some(p),
            Ok(Principal::ApiKey { .. }) | Err(ServiceError::Unauthorized { .. }) => {
                return Err(logged_out())
            }
            Err(e) => return Err(refused(e)),
        }
        req.extensions_mut().insert(Renewed(keys.session_cookies(&tokens).to_vec()));
    }
    let principal = principal.ok_or_else(logged_out)?;
    if let Err(e) = state.limits.by_caller(req, Policy::Account, &principal).await {
        return Err(NoViewer::Refused(Shown::from(e)));
    }
    let reader = Authorized::<op::ReadAccount>::check(principal.clone()).map_err(refused)?;
    let user = match state.accounts.me(&reader).await {
        Ok(user) => user,
        Err(ServiceError::Unauthorized { .. } | ServiceError::NotFound { .. }) => {
            return Err(logged_out())
        }
        Err(e) => return Err(refused(e)),
    };
    req.extensions_mut().insert(crate::middleware::access_log::CallerIds::of(&principal));
    let notice = req
        .cookie(NOTICE_COOKIE)
        .and_then(|c| base16ct::lower::decode_vec(c.value()).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|text| !text.is_empty());
    let session_id = match &principal {
        Principal::User { session_id, .. } => session_id.as_str(),
        Principal::ApiKey { key_id, .. } => key_id.as_str(),
    };
    let csrf = keys.csrf(session_id);
    Ok(Viewer { csrf, principal, user, notice, keys })
}
