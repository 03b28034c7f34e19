//! `/api/v1/auth/mfa…` (the caller's TOTP second factor) and `POST /api/v1/auth/login/mfa`
//! (completing a login whose password was right). See docs/mfa.md.

use super::attempts::{client_info, failures_counted};
use crate::dto::mfa::{
    LoginMfaRequest, MfaConfirmRequest, MfaDisabledData, MfaEnrollmentData, MfaRecoveryCodesData,
    MfaStatusData, MfaVerifyRequest,
};
use crate::dto::{BodyErrors, Envelope, ErrorEnvelope, ServerErrors, TokenSetDto};
use crate::error::ApiError;
use crate::extract::{After, Authorized, JsonBody};
use crate::observe::metric;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::mfa::TotpCode;
use aigw_service::Policy;

/// The caller's second factor: on or off, since when, recovery codes left (access token,
/// or API key with `read`).
#[utoipa::path(get, path = "/api/v1/auth/mfa", tag = "auth",
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, body = Envelope<MfaStatusData>),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn status(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ReadAccount>,
) -> Result<HttpResponse, ApiError> {
    let status = state.mfa.mfa_status(&caller).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MfaStatusData::from(status))))
}

/// Start a TOTP enrollment (access token only): a new secret, its `otpauth://` URI and QR
/// code, shown once. The factor is on only after `POST /auth/mfa/totp/confirm`; enrolling
/// again before that replaces the pending secret.
#[utoipa::path(post, path = "/api/v1/auth/mfa/totp/enroll", tag = "auth",
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<MfaEnrollmentData>),
        (status = 400, description = "The factor is already on (field mfa)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn enroll(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
) -> Result<HttpResponse, ApiError> {
    let enrollment = state.mfa.mfa_enroll(&caller).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MfaEnrollmentData::from(enrollment))))
}

/// Confirm the pending enrollment with a current code (access token only): the factor is on
/// from now, and the answer carries ten single-use recovery codes, shown once.
#[utoipa::path(post, path = "/api/v1/auth/mfa/totp/confirm", tag = "auth", request_body = MfaConfirmRequest,
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<MfaRecoveryCodesData>),
        (status = 400, description = "code is not 6 digits or does not match (field code), no enrollment is pending or the factor is already on (field mfa)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn confirm(
    state: web::Data<AppState>,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<MfaConfirmRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let code = TotpCode::parse("code", &body.code)?;
    let codes = state.mfa.mfa_confirm(&caller, &code).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MfaRecoveryCodesData::from(codes))))
}

/// Turn the factor off (access token only), with the password and a current code or a
/// recovery code; the secret and the recovery codes are deleted.
#[utoipa::path(post, path = "/api/v1/auth/mfa/totp/disable", tag = "auth", request_body = MfaVerifyRequest,
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<MfaDisabledData>),
        (status = 400, description = "Neither or both of code and recovery_code, a malformed one, or the factor is off (field mfa)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Wrong password or code, or a code already used (one answer for all)", body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn disable(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<MfaVerifyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let factor = body.factor()?;
    let disabled = state.mfa.mfa_disable(&caller, body.password, &factor);
    failures_counted(&state, &req, disabled).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MfaDisabledData { enabled: false })))
}

/// Replace every recovery code with ten new ones, shown once (access token only), with the
/// password and a current code or a recovery code.
#[utoipa::path(post, path = "/api/v1/auth/mfa/recovery-codes", tag = "auth", request_body = MfaVerifyRequest,
    security(("access_token" = [])),
    responses(
        (status = 200, body = Envelope<MfaRecoveryCodesData>),
        (status = 400, description = "Neither or both of code and recovery_code, a malformed one, or the factor is off (field mfa)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Wrong password or code, or a code already used (one answer for all)", body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn regenerate_recovery_codes(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<MfaVerifyRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let factor = body.factor()?;
    let regenerated = state.mfa.mfa_regenerate_recovery_codes(&caller, body.password, &factor);
    let codes = failures_counted(&state, &req, regenerated).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MfaRecoveryCodesData::from(codes))))
}

/// Complete a login whose answer was an MFA challenge, with a current code or a recovery
/// code; answers the token set, as a login without a second factor does. A code works once;
/// after five wrong codes the challenge is dead (log in again).
#[utoipa::path(post, path = "/api/v1/auth/login/mfa", tag = "auth", request_body = LoginMfaRequest,
    responses(
        (status = 200, description = "Logged in; the access token carries amr [\"pwd\", \"otp\"]", body = Envelope<TokenSetDto>),
        (status = 400, description = "Neither or both of code and recovery_code, or a malformed one (details.field names it)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Unknown, used or expired mfa_token; a wrong or already used code; the challenge is dead after 5 failed attempts (details.hint says which)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn login_mfa(
    state: web::Data<AppState>,
    req: HttpRequest,
    JsonBody(body): JsonBody<LoginMfaRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.refuse_if_failing(&req).await?;
    state.limits.by_ip(&req, Policy::Login).await?;
    let factor = body.factor()?;
    let client = client_info(&state, &req);
    let completed = state.accounts.complete_mfa_login(&body.mfa_token, &factor, &client);
    let set = failures_counted(&state, &req, completed).await?;
    state.telemetry.metrics.count(metric::SESSIONS_CREATED_TOTAL, &[]);
    Ok(HttpResponse::Ok().json(Envelope::ok(TokenSetDto::from(set))))
}
