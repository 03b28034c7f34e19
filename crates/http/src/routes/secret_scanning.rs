//! Leaked API keys, revoked on report: `POST /api/v1/secret-scanning/github` (GitHub's
//! secret-scanning partner program: no bearer credential, a signature over the body) and
//! `POST /api/v1/admin/leaked-keys` (an admin's pasted list). Both revoke every valid aigw key
//! they name on every node before answering (see `aigw_service::leaks`).

use crate::dto::leaks::{
    GithubReportedToken, GithubTokenVerdict, LeakReportData, LeakedKeysRequest,
};
use crate::dto::{BodyErrors, Envelope, ErrorEnvelope, ServerErrors};
use crate::error::ApiError;
use crate::extract::{AdminCaller, After, JsonBody, RawJson};
use crate::request_id::current_request_id;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::{time, ErrorCode};
use aigw_service::leaks::{self, LeakError, ReportError, KEY_ID_HEADER, SIGNATURE_HEADER};
use serde_json::json;

/// Largest GitHub report read, in bytes (1000 reported secrets with their URLs fit).
pub(crate) const MAX_GITHUB_REPORT_BYTES: usize = 1024 * 1024;

/// The value of header `name`: `None` when absent, a placeholder the checks refuse when it is
/// not visible ASCII.
fn header<'a>(req: &'a HttpRequest, name: &str) -> Option<&'a str> {
    req.headers().get(name).map(|v| v.to_str().unwrap_or("\u{1}"))
}

/// Report leaked secrets, GitHub's way (the secret-scanning partner program). The body is
/// verified against GitHub's published keys (ECDSA P-256, SHA-256, over the exact body)
/// before anything else; each valid aigw key it names is revoked, on every node, before this
/// answers. The answer is GitHub's format, without the success envelope. The same signed body
/// is accepted once. Answers 404 unless `secret_scanning.enabled`.
#[utoipa::path(post, path = "/api/v1/secret-scanning/github", tag = "secret-scanning",
    params(
        ("Github-Public-Key-Identifier" = String, Header, description = "Identifier of the key (of GitHub's keys document) that signed the body"),
        ("Github-Public-Key-Signature" = String, Header, description = "Base64 of the DER-encoded ECDSA P-256 signature of the exact body, with SHA-256"),
    ),
    request_body(content = Vec<GithubReportedToken>, description = "1 to 1000 reported secrets (at most 1 MiB)"),
    responses(
        (status = 200, description = "One verdict per reported secret, in the report's order; every `true_positive` key is revoked", body = Vec<GithubTokenVerdict>),
        (status = 400, description = "A signature header missing or malformed, an unknown key identifier, a signature that does not verify (details.field names the header), or a body that verified but is no report (details.field names it). Nothing changed", body = ErrorEnvelope),
        (status = 404, description = "secret_scanning.enabled is false", body = ErrorEnvelope),
        (status = 409, description = "This exact body was accepted before (a replay): nothing changed", body = ErrorEnvelope),
        BodyErrors,
        ServerErrors))]
pub(crate) async fn github(
    state: web::Data<AppState>,
    req: HttpRequest,
    body: After<RawJson>,
) -> Result<HttpResponse, ApiError> {
    let Some(keys) = state.secret_scanning.as_ref() else {
        return Err(ApiError::no_route(req.path()));
    };
    // An address whose signatures failed too often is refused before any work
    // (`auth_failure`, as failed authentications).
    state.limits.refuse_if_failing(&req).await?;
    let (key_id, signature) = (header(&req, KEY_ID_HEADER), header(&req, SIGNATURE_HEADER));
    let RawJson(body) = body.into_inner()?;
    let report = match leaks::verify_github_report(keys, key_id, signature, &body).await {
        Ok(report) => report,
        Err(ReportError::Signature { field, issue }) => {
            state.limits.count_failure(&req).await;
            return Err(ApiError::invalid(field, issue));
        }
        Err(ReportError::Invalid(e)) => return Err(e.into()),
        Err(ReportError::KeysUnavailable(_)) => {
            return Err(ApiError::new(
                ErrorCode::ServiceUnavailable,
                "GitHub's secret-scanning keys are unavailable; retry later",
                json!({"request_id": current_request_id(),
                       "timestamp": time::format_timestamp(time::now())}),
            ));
        }
    };
    let outcome = state.leaks.revoke_reported_by_github(report).await.map_err(|e| match e {
        LeakError::Replayed { body_digest } => ApiError::new(
            ErrorCode::Conflict,
            "this report was received before; nothing was changed",
            json!({"field": "body", "issue": "is a report already received (a replay)",
                   "body_digest": body_digest}),
        ),
        LeakError::Service(e) => e.into(),
    })?;
    let answer: Vec<GithubTokenVerdict> =
        outcome.verdicts.iter().map(GithubTokenVerdict::from).collect();
    Ok(HttpResponse::Ok().json(answer))
}

/// Report leaked secrets by hand: as GitHub's report, for a pasted list (no signature). Each
/// valid aigw key it names is revoked, on every node, before this answers.
#[utoipa::path(post, path = "/api/v1/admin/leaked-keys", tag = "admin",
    request_body = LeakedKeysRequest,
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "One result per secret, in the request's order", body = Envelope<LeakReportData>),
        (status = 400, description = "Bad secrets, secrets[i], url or source (details.field names it)", body = ErrorEnvelope),
        BodyErrors,
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "Not an admin (required: admin)", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn admin_leaked_keys(
    state: web::Data<AppState>,
    AdminCaller(admin): AdminCaller,
    body: After<JsonBody<LeakedKeysRequest>>,
) -> Result<HttpResponse, ApiError> {
    let JsonBody(body) = body.into_inner()?;
    let tokens = leaks::pasted_list(body.secrets, body.url, body.source)?;
    let outcome = state.leaks.admin_revoke_leaked_keys(&admin, tokens).await?;
    Ok(HttpResponse::Ok().json(Envelope::ok(LeakReportData::from(&outcome))))
}
