//! `/account/mfa`: the viewer's second factor (TOTP) in the console. Turning it on (a QR code
//! and the secret, then a code from the app), the recovery codes shown once, new recovery
//! codes and turning it off (both with the password and a code). The same use cases, counted
//! failures and rate limits as `/api/v1/auth/mfa…` (docs/mfa.md).
//!
//! A started enrollment is shown again until it is confirmed or started over, so a reload or
//! a mistyped code loses nothing; its QR code is an image served from this origin
//! (`/account/mfa/qr.svg`), as the console's Content-Security-Policy allows no other.

use crate::console::render::{secure_headers, Shown};
use crate::console::session::Viewer;
use crate::console::view::{when, CsrfField, CsrfOnly, Form};
use crate::routes::attempts::failures_counted;
use crate::state::AppState;
use actix_web::http::{header, StatusCode};
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::mfa::TotpCode;
use aigw_service::mfa::RecoveryCodes;
use aigw_service::{Authorized, SecondFactor};
use minijinja::context;
use serde::Deserialize;

/// The confirmation form: a code of the app.
#[derive(Debug, Deserialize)]
pub(crate) struct ConfirmForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    code: String,
}

impl CsrfField for ConfirmForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The form that turns the factor off or makes new recovery codes: the password and a code
/// of the app, or a recovery code when `recovery` is ticked.
#[derive(Deserialize)]
pub(crate) struct ProofForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    code: String,
    recovery: Option<String>,
}

// Passwords and codes never reach a debug print.
impl std::fmt::Debug for ProofForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProofForm(…)")
    }
}

impl CsrfField for ProofForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl ProofForm {
    /// The password and the factor the form carries.
    ///
    /// # Errors
    /// The field error of a code that is not 6 digits, or not a recovery code when ticked as
    /// one (named `code`, the form's one field for both).
    fn proof(self) -> Result<(String, SecondFactor), Shown> {
        let code = self.code.trim();
        let factor = if self.recovery.is_some() {
            SecondFactor::from_fields(None, Some(code))
        } else {
            SecondFactor::from_fields(Some(code), None)
        };
        let factor = factor.map_err(|e| {
            let mut shown = Shown::from(aigw_service::ServiceError::from(e));
            shown.field = Some("code".to_owned());
            shown
        })?;
        Ok((self.password, factor))
    }
}

/// The factor's page, answered with `status`: its state and the forms that fit it (start;
/// the pending enrollment with its confirmation; or new codes and turning off).
async fn mfa_page(
    state: &AppState,
    viewer: &Viewer,
    status: StatusCode,
    error: Option<Shown>,
) -> HttpResponse {
    let read = async { state.mfa.mfa_overview(&viewer.authorized::<op::ManageAccount>()?).await };
    let (mfa, pending) = match read.await {
        Ok(read) => read,
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let mfa = context! {
        enabled => mfa.enabled,
        since => mfa.enabled_at.as_ref().map(when),
        recovery_codes_left => mfa.recovery_codes_left,
    };
    let pending = pending.map(|p| context! { secret => grouped(&p.secret) });
    viewer.page(
        status,
        "mfa.html",
        context! { title => "Second factor", section => "account", mfa, pending, error },
    )
}

/// A base32 secret in groups of four, as apps that take it typed show it.
fn grouped(secret: &str) -> String {
    let chars: Vec<char> = secret.chars().collect();
    chars.chunks(4).map(|c| c.iter().collect::<String>()).collect::<Vec<_>>().join(" ")
}

/// The page that shows new recovery codes, once.
fn codes_page(viewer: &Viewer, codes: &RecoveryCodes, enabled_now: bool) -> HttpResponse {
    viewer.page(
        StatusCode::OK,
        "mfa_codes.html",
        context! {
            title => "Recovery codes", section => "account",
            codes => codes.codes, enabled_now,
        },
    )
}

/// `GET /account/mfa`: the second factor's state and forms.
///
/// Errors: a database outage is a 503 page.
pub(crate) async fn show(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    mfa_page(&state, &viewer, StatusCode::OK, None).await
}

/// `GET /account/mfa/qr.svg`: the pending enrollment's `otpauth://` URI as a QR code
/// (`image/svg+xml`, never cached).
///
/// Errors: 404 when no enrollment waits; a database outage is a 503 page.
pub(crate) async fn qr(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    let pending = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.mfa.mfa_pending(&caller).await,
        Err(e) => Err(e),
    };
    match pending {
        Ok(Some(enrollment)) => {
            let mut response = HttpResponse::Ok();
            secure_headers(&mut response);
            response.insert_header((header::CONTENT_TYPE, "image/svg+xml")).body(enrollment.qr_svg)
        }
        Ok(None) => viewer.failure(&Shown::new(
            StatusCode::NOT_FOUND,
            "No enrollment of a second factor waits for its code.",
        )),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// `POST /account/mfa/enroll`: starts (or starts over) the enrollment: a new secret, shown
/// on the factor's page until a code confirms it.
///
/// Errors: the factor is on already (400): the page with the message.
pub(crate) async fn enroll(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let started = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.mfa.mfa_enroll(&caller).await,
        Err(e) => Err(e),
    };
    match started {
        Ok(_) => viewer.keys().see_other_with_notice(
            "/account/mfa",
            "Scan the QR code with your authenticator app, then enter the code it shows.",
        ),
        Err(e) => {
            let shown = Shown::from(e);
            mfa_page(&state, &viewer, shown.status, Some(shown)).await
        }
    }
}

/// `POST /account/mfa/confirm`: turns the factor on with a code of the app and shows the ten
/// recovery codes, once.
///
/// Errors: a code that is not 6 digits or does not match (400, field `code`), no enrollment
/// waiting (400): the factor's page again with the message; nothing changes.
pub(crate) async fn confirm(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<ConfirmForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let confirmed = async {
        let caller = viewer.authorized::<op::ManageAccount>()?;
        let code = TotpCode::parse("code", form.code.trim())?;
        state.mfa.mfa_confirm(&caller, &code).await
    }
    .await;
    match confirmed {
        Ok(codes) => codes_page(&viewer, &codes, true),
        Err(e) => {
            let shown = Shown::from(e);
            mfa_page(&state, &viewer, shown.status, Some(shown)).await
        }
    }
}

/// Runs `act` on the form's proof (the password and a code) for the signed-in caller: the
/// address's failures checked first, a wrong proof counted as a failed login of the address.
async fn with_proof<T, Fut>(
    state: &AppState,
    req: &HttpRequest,
    viewer: &Viewer,
    form: ProofForm,
    act: impl FnOnce(Authorized<op::ManageAccount>, String, SecondFactor) -> Fut,
) -> Result<T, Shown>
where
    Fut: std::future::Future<Output = Result<T, aigw_service::ServiceError>>,
{
    state.limits.refuse_if_failing(req).await.map_err(Shown::from)?;
    let caller = viewer.authorized::<op::ManageAccount>().map_err(Shown::from)?;
    let (password, factor) = form.proof()?;
    failures_counted(state, req, act(caller, password, factor)).await.map_err(Shown::from)
}

/// `POST /account/mfa/recovery-codes`: replaces every recovery code with ten new ones, shown
/// once; needs the password and a code (or an old recovery code).
///
/// Errors: a wrong password or code (401, counted as a failed login against the client
/// address), a malformed code (400), an address that failed too often (429): the factor's
/// page again with the message; nothing changes.
pub(crate) async fn regenerate(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<ProofForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let mfa = &state.mfa;
    let regenerated =
        with_proof(&state, &req, &viewer, form, |caller, password, factor| async move {
            mfa.mfa_regenerate_recovery_codes(&caller, password, &factor).await
        })
        .await;
    match regenerated {
        Ok(codes) => codes_page(&viewer, &codes, false),
        Err(shown) => mfa_page(&state, &viewer, shown.status, Some(shown)).await,
    }
}

/// `POST /account/mfa/disable`: turns the factor off with the password and a code (or a
/// recovery code); the secret and the recovery codes are deleted.
///
/// Errors: as [`regenerate`].
pub(crate) async fn disable(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<ProofForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let mfa = &state.mfa;
    let disabled = with_proof(&state, &req, &viewer, form, |caller, password, factor| async move {
        mfa.mfa_disable(&caller, password, &factor).await
    })
    .await;
    match disabled {
        Ok(()) => viewer.keys().see_other_with_notice(
            "/account/mfa",
            "The second factor is off: logging in takes only the password now.",
        ),
        Err(shown) => mfa_page(&state, &viewer, shown.status, Some(shown)).await,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_show_in_groups_of_four() {
        assert_eq!(super::grouped("ABCDEFGHIJ"), "ABCD EFGH IJ");
        assert_eq!(super::grouped(""), "");
    }
}
