//! The pages the links in account e-mail open: `/account/verify-email` and
//! `/account/reset-password`. Plain server-rendered HTML forms, no script and no cookie:
//! `GET` only shows the form (a mail scanner that fetches the link changes nothing); the
//! form's `POST` redeems the token through the same use cases as the API.
//!
//! Every page is sent with a Content-Security-Policy that allows nothing but posting its form
//! to this origin, `Referrer-Policy: no-referrer` (the URL carries the token) and
//! `Cache-Control: no-store`.

use crate::state::AppState;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_service::ServiceError;
use minijinja::{context, Environment};
use serde::Deserialize;
use std::sync::OnceLock;

/// The policy of every page: no script, style, image or frame; forms post here only.
const CSP: &str = "default-src 'none'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The compiled page templates (HTML, auto-escaped).
fn pages() -> &'static Environment<'static> {
    static PAGES: OnceLock<Environment<'static>> = OnceLock::new();
    PAGES.get_or_init(|| {
        let mut env = Environment::new();
        for (name, source) in [
            ("layout.html", include_str!("../../templates/pages/layout.html")),
            ("message.html", include_str!("../../templates/pages/message.html")),
            ("verify_email.html", include_str!("../../templates/pages/verify_email.html")),
            ("reset_password.html", include_str!("../../templates/pages/reset_password.html")),
        ] {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "page template does not compile");
            }
        }
        env
    })
}

/// `template` rendered with `values`, answered with `status` and the pages' headers.
fn page(status: StatusCode, template: &str, values: minijinja::Value) -> HttpResponse {
    let body = pages().get_template(template).and_then(|t| t.render(values));
    let (status, body) = match body {
        Ok(body) => (status, body),
        Err(e) => {
            tracing::error!(template, error = %e, "page not rendered");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error".to_owned())
        }
    };
    HttpResponse::build(status)
        .insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8"))
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .finish()
        .set_body(actix_web::body::BoxBody::new(body))
}

fn message(status: StatusCode, title: &str, message: &str) -> HttpResponse {
    page(status, "message.html", context! { title, message })
}

/// The page of a failed use case: a refused token, a bad field, or a fault.
fn failure(title: &str, e: &ServiceError) -> HttpResponse {
    match e {
        ServiceError::Invalid(field) if field.field == "token" => message(
            StatusCode::BAD_REQUEST,
            title,
            "This link is invalid, used or expired. Ask for a new one.",
        ),
        ServiceError::Invalid(field) => message(
            StatusCode::BAD_REQUEST,
            title,
            &format!("The {} {}.", field.field, field.issue),
        ),
        ServiceError::Unavailable(_) | ServiceError::Busy { .. } => message(
            StatusCode::SERVICE_UNAVAILABLE,
            title,
            "The service is busy. Try again in a minute.",
        ),
        _ => message(StatusCode::INTERNAL_SERVER_ERROR, title, "Something went wrong. Try again."),
    }
}

/// `?token=…` of a link.
#[derive(Debug, Deserialize)]
pub(crate) struct LinkQuery {
    token: Option<String>,
}

/// The verification form's fields.
#[derive(Deserialize)]
pub(crate) struct VerifyForm {
    token: String,
}

/// The reset form's fields.
#[derive(Deserialize)]
pub(crate) struct ResetForm {
    token: String,
    password: String,
    password_confirmation: String,
}

// The forms carry a token and passwords: never in a debug print.
impl std::fmt::Debug for VerifyForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerifyForm(…)")
    }
}

impl std::fmt::Debug for ResetForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ResetForm(…)")
    }
}

const VERIFY_TITLE: &str = "Confirm your e-mail address";
const RESET_TITLE: &str = "Choose a new password";
const INCOMPLETE: &str = "This link is incomplete: open the whole link from the message.";

/// `GET /account/verify-email?token=…`: the confirmation form.
pub(crate) async fn verify_email_form(query: web::Query<LinkQuery>) -> HttpResponse {
    match query.into_inner().token.filter(|t| !t.is_empty()) {
        None => message(StatusCode::BAD_REQUEST, VERIFY_TITLE, INCOMPLETE),
        Some(token) => {
            page(StatusCode::OK, "verify_email.html", context! { title => VERIFY_TITLE, token })
        }
    }
}

/// `POST /account/verify-email`: redeems the token.
pub(crate) async fn verify_email_submit(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Result<web::Form<VerifyForm>, actix_web::Error>,
) -> HttpResponse {
    let Ok(web::Form(form)) = form else {
        return message(StatusCode::BAD_REQUEST, VERIFY_TITLE, INCOMPLETE);
    };
    if state.limits.refuse_if_failing(&req).await.is_err() {
        return message(
            StatusCode::TOO_MANY_REQUESTS,
            VERIFY_TITLE,
            "Too many tries. Wait a minute.",
        );
    }
    match state.account_email.verify_email(&form.token).await {
        Ok(user) => message(
            StatusCode::OK,
            "E-mail address confirmed",
            &format!("Your account's address is now {}, confirmed.", user.email),
        ),
        Err(e) => {
            if matches!(&e, ServiceError::Invalid(f) if f.field == "token") {
                state.limits.count_failure(&req).await;
            }
            failure(VERIFY_TITLE, &e)
        }
    }
}

/// `GET /account/reset-password?token=…`: the new-password form.
pub(crate) async fn reset_password_form(query: web::Query<LinkQuery>) -> HttpResponse {
    match query.into_inner().token.filter(|t| !t.is_empty()) {
        None => message(StatusCode::BAD_REQUEST, RESET_TITLE, INCOMPLETE),
        Some(token) => page(
            StatusCode::OK,
            "reset_password.html",
            context! { title => RESET_TITLE, token, error => "" },
        ),
    }
}

/// `POST /account/reset-password`: sets the new password.
pub(crate) async fn reset_password_submit(
    state: web::Data<AppState>,
    req: HttpRequest,
    form: Result<web::Form<ResetForm>, actix_web::Error>,
) -> HttpResponse {
    let Ok(web::Form(form)) = form else {
        return message(StatusCode::BAD_REQUEST, RESET_TITLE, INCOMPLETE);
    };
    let again = |error: &str| {
        page(
            StatusCode::BAD_REQUEST,
            "reset_password.html",
            context! { title => RESET_TITLE, token => form.token.clone(), error },
        )
    };
    if form.password != form.password_confirmation {
        return again("The two passwords differ.");
    }
    if state.limits.refuse_if_failing(&req).await.is_err() {
        return message(
            StatusCode::TOO_MANY_REQUESTS,
            RESET_TITLE,
            "Too many tries. Wait a minute.",
        );
    }
    match state.account_email.confirm_password_reset(&form.token, form.password.clone()).await {
        Ok(_) => message(
            StatusCode::OK,
            "Password changed",
            "Your password was changed and every session of the account ended. Log in with the new password.",
        ),
        Err(ServiceError::Invalid(field)) if field.field == "password" => {
            again(&format!("The password {}.", field.issue))
        }
        Err(e) => {
            if matches!(&e, ServiceError::Invalid(f) if f.field == "token") {
                state.limits.count_failure(&req).await;
            }
            failure(RESET_TITLE, &e)
        }
    }
}
