//! `/api/v1/auth/email/{verification, verify, change}` and
//! `/api/v1/auth/password-reset[/confirm]`: the flows that reach a user through their mailbox.

use crate::dto::account_email::{
    ChangeEmailRequest, EmailSentData, PasswordResetAcceptedData, PasswordResetConfirmRequest,
    PasswordResetDoneData, PasswordResetRequest, VerifyEmailRequest,
};
use crate::dto::{BodyErrors, Envelope, ErrorEnvelope, MeData, ServerErrors};
use crate::error::ApiError;
use crate::extract::{After, Authorized, JsonBody};
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::time::format_timestamp;
use aigw_service::{Policy, ServiceError};

/// Counts a refused account token (400 on `token`) against the client IP's `auth_failure`
/// quota, as a refused credential is.
async fn token_failures_counted<T>(
    state: &AppState,
    req: &HttpRequest,
    result: Result<T, ServiceError>,
) -> Result<T, ApiError> {
    if let Err(ServiceError::Invalid(field)) = &result {
        if field.field == "token" {
            state.limits.count_failure(req).await;
        }
    }
    result.map_err(ApiError::from)
}

/// Send the caller a new verification link (access token only); earlier links stop working.
#[utoipa::path(post, path = "/api/v1/auth/email/verification", tag = "accounts",
    security(("access_token" = [])),
    responses(
        (status = 202, description = "A link is on its way to the account's address", body = Envelope<EmailSentData>),
        (status = 400, description = "The address is verified already (field: email)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn request_verification(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ManageAccount>,
) -> Result<HttpResponse, ApiError> {
    state.limits.by_user(&req, Policy::EmailSend, caller.user_id()).await?;
    let link = state.account_email.request_verification(&caller).await?;
    let data = EmailSentData { email: link.email, expires_at: format_timestamp(link.expires_at) };
    Ok(HttpResponse::Accepted().json(Envelope::ok(data)))
}

/// Redeem the token of a verification or e-mail change link (no credential: the token is
/// one). A verification marks the address verified; a change moves the account to the new
/// address, verified, and tells the old one.
#[utoipa::path(post, path = "/api/v1/auth/email/verify", tag = "accounts", request_body = VerifyEmailRequest,
    responses(
        (status = 200, description = "The account as it is now", body = Envelope<MeData>),
        (status = 400, description = "The token is malformed, unknown, used, expired or withdrawn, or its address belongs to another account now (field: token)", body = ErrorEnvelope),
        BodyErrors,
        ServerErrors))]
pub(crate) async fn verify(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody<VerifyEmailRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.refuse_if_failing(&req).await?;
    let JsonBody(body) = body;
    let user =
        token_failures_counted(&state, &req, state.account_email.verify_email(&body.token).await)
            .await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(MeData { user: user.into() })))
}

/// Ask to move the caller's account to another address (access token and the current
/// password). A link goes to the new address; the account moves when it is opened.
#[utoipa::path(post, path = "/api/v1/auth/email/change", tag = "accounts", request_body = ChangeEmailRequest,
    security(("access_token" = [])),
    responses(
        (status = 202, description = "A link is on its way to the new address", body = Envelope<EmailSentData>),
        (status = 400, description = "Invalid field: email (malformed, a domain that may not register, the current address, already registered) or password (too long)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, description = "Wrong password (the answer of a failed login)", body = ErrorEnvelope),
        (status = 403, description = "Called with an API key (required: access_token)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn change(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ManageAccount>,
    body: After<JsonBody<ChangeEmailRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    state.limits.by_user(&req, Policy::EmailSend, caller.user_id()).await?;
    let change = state.account_email.request_email_change(&caller, &body.email, body.password);
    let pending = super::attempts::failures_counted(&state, &req, change).await?;
    let data =
        EmailSentData { email: pending.email, expires_at: format_timestamp(pending.expires_at) };
    Ok(HttpResponse::Accepted().json(Envelope::ok(data)))
}

/// Ask for a password reset link. The answer is the same, after the same time, whether or
/// not an account has the address; a link is sent only when one does.
#[utoipa::path(post, path = "/api/v1/auth/password-reset", tag = "accounts", request_body = PasswordResetRequest,
    responses(
        (status = 202, description = "Taken (whether or not an account has the address)", body = Envelope<PasswordResetAcceptedData>),
        (status = 400, description = "Not an e-mail address (field: email)", body = ErrorEnvelope),
        BodyErrors,
        ServerErrors))]
pub(crate) async fn request_reset(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody<PasswordResetRequest>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body;
    state.limits.password_reset(&req, &body.email).await?;
    state.account_email.request_password_reset(&body.email)?;
    let data = PasswordResetAcceptedData { accepted: true };
    Ok(HttpResponse::Accepted().json(Envelope::ok(data)))
}

/// Set a new password with the token of a reset link. Every session of the account ends; the
/// account is told by e-mail.
#[utoipa::path(post, path = "/api/v1/auth/password-reset/confirm", tag = "accounts", request_body = PasswordResetConfirmRequest,
    responses(
        (status = 200, description = "Password replaced", body = Envelope<PasswordResetDoneData>),
        (status = 400, description = "Invalid field: token (malformed, unknown, used, expired or withdrawn) or password (the password policy)", body = ErrorEnvelope),
        BodyErrors,
        ServerErrors))]
pub(crate) async fn confirm_reset(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: JsonBody<PasswordResetConfirmRequest>,
) -> Result<HttpResponse, ApiError> {
    state.limits.refuse_if_failing(&req).await?;
    let JsonBody(body) = body;
    let reset = state.account_email.confirm_password_reset(&body.token, body.password).await;
    let ended_sessions = token_failures_counted(&state, &req, reset).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(PasswordResetDoneData { ended_sessions })))
}
