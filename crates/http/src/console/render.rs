//! Pages: the compiled templates (`templates/console/`, HTML, auto-escaped), the headers every
//! page is sent with, and how a refused use case is shown (the API's message and hint).

use crate::error::ApiError;
use actix_web::http::{header, StatusCode};
use actix_web::{HttpResponse, ResponseError};
use minijinja::value::merge_maps;
use minijinja::{context, Environment, Value};
use std::sync::OnceLock;

use crate::console::templates::TEMPLATES;

/// The console's Content-Security-Policy: scripts and styles from this origin only (no
/// `unsafe-inline`, no `unsafe-eval`), forms post here, never framed.
pub(crate) const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
     base-uri 'none'";

fn environment() -> &'static Environment<'static> {
    static ENV: OnceLock<Environment<'static>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Environment::new();
        // `error.field` on a page without an error is undefined, not a failure.
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Chainable);
        for (name, source) in TEMPLATES {
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "console template does not compile");
            }
        }
        env
    })
}

/// Whether every template compiles (checked by a unit test; a broken one is logged at start).
#[cfg(test)]
pub(crate) fn template_errors() -> Vec<String> {
    let mut env = Environment::new();
    TEMPLATES
        .iter()
        .filter_map(|(name, source)| {
            env.add_template(name, source).err().map(|e| format!("{name}: {e}"))
        })
        .collect()
}

/// A failure as a page shows it: the API's status, message and hint, and the field it names.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Shown {
    #[serde(skip)]
    pub(crate) status: StatusCode,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
    pub(crate) field: Option<String>,
}

impl Shown {
    /// A refusal of this console (not of a use case), with `status` and `message`.
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self { status, message: message.into(), hint: None, field: None }
    }
}

impl From<ApiError> for Shown {
    fn from(e: ApiError) -> Self {
        let (message, details) = e.message_and_details();
        let text = |key: &str| details.get(key).and_then(|v| v.as_str()).map(str::to_owned);
        let field = text("field");
        let message = match (&field, text("issue")) {
            (Some(field), Some(issue)) => format!("{message}: {field} {issue}"),
            _ => message.to_owned(),
        };
        Self { status: e.status_code(), message, hint: text("hint"), field }
    }
}

impl From<aigw_service::ServiceError> for Shown {
    fn from(e: aigw_service::ServiceError) -> Self {
        Self::from(ApiError::from(e))
    }
}

/// `template` rendered with `values` and `frame`,
/// answered with `status` and the console's headers.
///
/// `frame` holds what the layout shows of the signed-in user (`viewer`, `csrf`, `notice`;
/// see `Viewer::frame`), or nothing before a session exists.
pub(crate) fn page(
    status: StatusCode,
    frame: Value,
    template: &str,
    values: Value,
) -> HttpResponse {
    let asset_version = crate::console::assets::version();
    let values = merge_maps([values, frame, context! { asset_version }]);
    let body = environment().get_template(template).and_then(|t| t.render(values));
    let (status, body) = match body {
        Ok(body) => (status, body),
        Err(e) => {
            tracing::error!(template, error = %e, "console page not rendered");
            (StatusCode::INTERNAL_SERVER_ERROR, "internal error".to_owned())
        }
    };
    html(status, body)
}

/// An HTML body with the console's headers.
pub(crate) fn html(status: StatusCode, body: String) -> HttpResponse {
    let mut response = HttpResponse::build(status);
    secure_headers(&mut response);
    response.insert_header((header::CONTENT_TYPE, "text/html; charset=utf-8")).body(body)
}

/// The headers of every console answer: the policy, no caching, no framing, no sniffing, and
/// no referrer to other sites (`same-origin`: the console's own forms then carry a real
/// `Origin`, which [`crate::console::session::same_origin`] checks).
pub(crate) fn secure_headers(response: &mut actix_web::HttpResponseBuilder) {
    response
        .insert_header((header::CONTENT_SECURITY_POLICY, CSP))
        .insert_header((header::REFERRER_POLICY, "same-origin"))
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
}

/// The page of a failure outside any form: its status, message and hint.
pub(crate) fn failure(frame: Value, shown: &Shown) -> HttpResponse {
    let title = shown.status.canonical_reason().unwrap_or("Error");
    page(shown.status, frame, "message.html", context! { title, error => shown })
}

/// `303 See Other` to `location` (after a form's `POST`).
pub(crate) fn see_other(location: &str) -> HttpResponse {
    let mut response = HttpResponse::SeeOther();
    secure_headers(&mut response);
    response.insert_header((header::LOCATION, location)).finish()
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_template_compiles() {
        assert_eq!(super::template_errors(), Vec::<String>::new());
    }
}
