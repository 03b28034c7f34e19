//! What the console's pages share: the form extractor (size, type, CSRF and origin checked),
//! and how keys, money and times are shown.

use crate::console::render::{self, Shown};
use crate::console::session::{same_origin, Viewer};
use actix_web::dev::Payload;
use actix_web::http::{header, StatusCode};
use actix_web::{FromRequest, HttpRequest, HttpResponse};
use aigw_service::ApiKeyView;
use chrono::{DateTime, Utc};
use futures_util::future::LocalBoxFuture;
use minijinja::{context, Value};
use serde::de::DeserializeOwned;
use serde::Deserialize;

/// Largest form body, in bytes.
const FORM_LIMIT: usize = 64 * 1024;

/// A form that carries the session's CSRF token.
pub(crate) trait CsrfField {
    /// The `csrf` field.
    fn csrf(&self) -> &str;
}

/// A form with no field but the CSRF token.
#[derive(Debug, Deserialize)]
pub(crate) struct CsrfOnly {
    #[serde(default)]
    csrf: String,
}

impl CsrfField for CsrfOnly {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// An `application/x-www-form-urlencoded` body parsed into `T` (repeated fields into a
/// `Vec`), or why not; opened with [`Form::checked`] once the viewer is known.
#[derive(Debug)]
pub(crate) struct Form<T>(Result<T, String>);

impl<T> Form<T> {
    /// The form before any session exists (login, registration): origin checked only.
    ///
    /// # Errors
    /// A 403 page for another site's form, a 400 page for an unreadable one.
    pub(crate) fn open(self, req: &HttpRequest) -> Result<T, Box<HttpResponse>> {
        same_origin(req)?;
        self.0.map_err(|why| {
            Box::new(render::failure(Value::UNDEFINED, &Shown::new(StatusCode::BAD_REQUEST, why)))
        })
    }
}

impl<T: CsrfField> Form<T> {
    /// The form of a signed-in page: origin, readability and CSRF token checked, in that
    /// order.
    ///
    /// # Errors
    /// A 403 page for another site's form or a wrong CSRF token, a 400 page for an
    /// unreadable one.
    pub(crate) fn checked(
        self,
        req: &HttpRequest,
        viewer: &Viewer,
    ) -> Result<T, Box<HttpResponse>> {
        same_origin(req)?;
        let form = self
            .0
            .map_err(|why| Box::new(viewer.failure(&Shown::new(StatusCode::BAD_REQUEST, why))))?;
        viewer.check_csrf(form.csrf())?;
        Ok(form)
    }
}

impl<T: DeserializeOwned + 'static> FromRequest for Form<T> {
    type Error = actix_web::Error;
    type Future = LocalBoxFuture<'static, Result<Self, actix_web::Error>>;

    fn from_request(req: &HttpRequest, payload: &mut Payload) -> Self::Future {
        let is_form =
            req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).is_some_and(
                |v| v.trim().to_ascii_lowercase().starts_with("application/x-www-form-urlencoded"),
            );
        let body = actix_web::web::Bytes::from_request(req, payload);
        Box::pin(async move {
            let Ok(body) = body.await else {
                return Ok(Form(Err("The form is too large or did not arrive.".to_owned())));
            };
            if !is_form {
                return Ok(Form(Err("The request is not a form.".to_owned())));
            }
            if body.len() > FORM_LIMIT || body.contains(&0) {
                return Ok(Form(Err("The form is too large or holds a NUL character.".to_owned())));
            }
            Ok(Form(
                serde_html_form::from_bytes(&body)
                    .map_err(|e| format!("The form could not be read: {e}.")),
            ))
        })
    }
}

/// Micro-USD as dollars with cents and, below a cent, more digits (`$0.000042`).
pub(crate) fn money(micros: i64) -> String {
    let dollars = micros as f64 / 1_000_000.0;
    if micros != 0 && micros.abs() < 10_000 {
        format!("${dollars:.6}")
    } else {
        format!("${dollars:.2}")
    }
}

/// A time as pages show it: `2026-11-27 08:32 UTC`.
pub(crate) fn when(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// The state of a key: `revoked`, `expired` or `active`.
pub(crate) fn key_status(key: &ApiKeyView) -> &'static str {
    if key.revoked_at.is_some() {
        "revoked"
    } else if key.expires_at.is_some_and(|e| e <= Utc::now()) {
        "expired"
    } else {
        "active"
    }
}

/// A key as the key tables show it; `spent` (micro-USD) is its spend in the budget period.
pub(crate) fn key_row(key: &ApiKeyView, spent: Option<&i64>) -> Value {
    let permissions: Vec<&str> = key.permissions.iter().map(|p| p.as_str()).collect();
    let budget = key.policy.max_budget_micros.map(|max| {
        let period = key.policy.budget_period.map_or("total", |p| p.as_str());
        format!("{} of {} ({period})", money(spent.copied().unwrap_or(0)), money(max))
    });
    context! {
        id => key.id,
        name => key.name,
        prefix => key.key_prefix,
        permissions,
        status => key_status(key),
        created => when(&key.created_at),
        expires => key.expires_at.as_ref().map(when),
        last_used => key.last_used_at.as_ref().map(when),
        rotated => key.rotated_at.as_ref().map(when),
        revoked => key.revoked_at.as_ref().map(when),
        spent => money(spent.copied().unwrap_or(0)),
        budget,
        rpm => key.policy.rpm_limit,
        tpm => key.policy.tpm_limit,
        team_id => key.team_id,
        team_owned => key.team_owned,
    }
}
