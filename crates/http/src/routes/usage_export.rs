//! CSV exports of usage (docs/usage.md "Export"): the caller's usage summary, a team's, and
//! the caller's per-request records, streamed [`aigw_service::usage::EXPORT_CHUNK`] records at
//! a time, so an export of a million records holds one chunk in memory, not the file.

use crate::dto::usage::{UsageRecordDto, UsageSummaryData};
use crate::dto::usage_csv::{records_csv, summary_csv};
use crate::dto::{ErrorEnvelope, ServerErrors};
use crate::error::ApiError;
use crate::extract::{query_params, After, Authorized, PathId};
use crate::state::AppState;
use actix_web::http::header::{ContentDisposition, DispositionParam, DispositionType};
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::TeamId;
use aigw_service::usage::{UsagePage, UsageQuery, UsageSummary};
use bytes::Bytes;

/// The media type of every export.
const CSV: &str = "text/csv; charset=utf-8";

/// `Content-Disposition: attachment; filename="…"`.
fn attachment(name: &str) -> ContentDisposition {
    ContentDisposition {
        disposition: DispositionType::Attachment,
        parameters: vec![DispositionParam::Filename(name.to_owned())],
    }
}

/// `summary` as a CSV attachment named `<stem>-by-<group>.csv`.
/// `summary` as a CSV attachment named `<stem>-by-<group>.csv` (also the console's export).
pub(crate) fn summary_answer(stem: &str, summary: UsageSummary) -> HttpResponse {
    let name = format!("{stem}-by-{}.csv", summary.group_by.as_str());
    HttpResponse::Ok()
        .content_type(CSV)
        .insert_header(attachment(&name))
        .body(summary_csv(&UsageSummaryData::from(summary)))
}

/// A summary query from `req`'s parameters (`api_key_id` only when `with_key`).
fn summary_query(req: &HttpRequest, with_key: bool) -> Result<UsageQuery, ApiError> {
    let names: &[&str] = if with_key {
        &["from", "to", "group_by", "api_key_id", "endpoint"]
    } else {
        &["from", "to", "group_by", "endpoint"]
    };
    let mut params = query_params(req, names)?;
    Ok(UsageQuery {
        from: params.remove("from"),
        to: params.remove("to"),
        group_by: params.remove("group_by"),
        api_key_id: params.remove("api_key_id"),
        endpoint: params.remove("endpoint"),
    })
}

/// The caller's usage summary as CSV: the parameters and rows of `GET /usage`, one line per row (no totals line), with the key's name and prefix (by key) or the team's name (by team).
#[utoipa::path(get, path = "/api/v1/usage/export", tag = "usage",
    params(
        ("from" = Option<String>, Query, format = Date, description = "First UTC day, YYYY-MM-DD (default: 29 days before `to`)"),
        ("to" = Option<String>, Query, format = Date, description = "Last UTC day, inclusive, YYYY-MM-DD (default: today); at most 366 days after `from`"),
        ("group_by" = Option<String>, Query, pattern = "^(day|model|api_key|endpoint|team)$", description = "As for `GET /usage`"),
        ("api_key_id" = Option<String>, Query, description = "Only this API key's usage"),
        ("endpoint" = Option<String>, Query, pattern = "^(chat|embeddings|responses|messages)$", description = "Only the calls to this endpoint"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "CSV with a header row: the group's columns, then requests, prompt_tokens, completion_tokens, total_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, cost_usd, estimated_requests, priced", content_type = "text/csv", body = String),
        (status = 400, description = "Bad date, range, group_by or endpoint, or an unknown parameter (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn summary(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
) -> Result<HttpResponse, ApiError> {
    let summary = state.usage.summary(&caller, summary_query(&req, true)?).await?;
    Ok(summary_answer("aigw-usage", summary))
}

/// A team's usage as CSV (owners and admins): the parameters and rows of `GET /teams/{id}/usage`, with the member's e-mail and name (by member) or the key's name and prefix (by key).
#[utoipa::path(get, path = "/api/v1/teams/{id}/usage/export", tag = "teams",
    params(
        ("id" = String, Path, description = "Team id"),
        ("from" = Option<String>, Query, format = Date, description = "First UTC day, YYYY-MM-DD (default: 29 days before `to`)"),
        ("to" = Option<String>, Query, format = Date, description = "Last UTC day, inclusive, YYYY-MM-DD (default: today)"),
        ("group_by" = Option<String>, Query, pattern = "^(day|model|member|api_key|endpoint)$", description = "As for `GET /teams/{id}/usage`"),
        ("endpoint" = Option<String>, Query, pattern = "^(chat|embeddings|responses|messages)$", description = "Only the calls to this endpoint"),
    ),
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "CSV with a header row, as `GET /usage/export`", content_type = "text/csv", body = String),
        (status = 400, description = "Bad date, range, group_by, endpoint or id, or an unknown parameter (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope),
        (status = 403, description = "An API key without read, or without the team role (required: team_admin)", body = ErrorEnvelope),
        (status = 404, description = "No such team, or the caller is not a member", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn team(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
    id: After<PathId<TeamId>>,
) -> Result<HttpResponse, ApiError> {
    let PathId(id) = id.into_inner()?;
    let summary = state.teams.team_usage(&caller, &id, summary_query(&req, false)?).await?;
    Ok(summary_answer("aigw-team-usage", summary))
}

/// What a streamed export sends next.
enum Next {
    /// This chunk of records (after the header row when `true`).
    Page(UsagePage, bool),
    /// The error that ends the answer early.
    Failed(actix_web::Error),
    /// Nothing: the answer is complete.
    Done,
}

/// The caller's per-request records as CSV, newest first, streamed (access token, or API key with `read`): every record kept, with no paging. Empty but for its header unless the server keeps per-request records (`usage.request_records = "database"`).
#[utoipa::path(get, path = "/api/v1/usage/requests/export", tag = "usage",
    security(("access_token" = []), ("api_key" = [])),
    responses(
        (status = 200, description = "CSV with a header row: started_at, request_id, api_key_id, model, served_model, provider, endpoint, streamed, outcome, attempts, prompt_tokens, completion_tokens, total_tokens, cached_tokens, cache_write_tokens, reasoning_tokens, estimated, cost_usd, priced, latency_ms. Streamed: a database failure after the first chunk ends the answer early (it then lacks the last line's newline)", content_type = "text/csv", body = String),
        (status = 400, description = "An unknown parameter (details.field names it)", body = ErrorEnvelope),
        (status = 401, body = ErrorEnvelope), (status = 403, description = "API key without read", body = ErrorEnvelope),
        ServerErrors))]
pub(crate) async fn requests(
    state: web::Data<AppState>,
    req: HttpRequest,
    Authorized(caller): Authorized<op::ReadUsage>,
) -> Result<HttpResponse, ApiError> {
    query_params(&req, &[])?;
    // The first chunk before the answer's head: a failure is still an error answer.
    let first = state.usage.export_chunk(&caller, None).await?;
    Ok(records_answer(state, caller, first))
}

/// The caller's per-request records as a streamed CSV attachment, from `first` (read before
/// the answer's head, so that its failure is still an error answer) on, one
/// [`aigw_service::usage::EXPORT_CHUNK`] at a time (also the console's export).
pub(crate) fn records_answer(
    state: web::Data<AppState>,
    caller: aigw_service::Authorized<op::ReadUsage>,
    first: UsagePage,
) -> HttpResponse {
    let chunks = futures_util::stream::unfold(Next::Page(first, true), move |next| {
        let (state, caller) = (state.clone(), caller.clone());
        async move {
            let (page, header) = match next {
                Next::Page(page, header) => (page, header),
                Next::Failed(e) => return Some((Err(e), Next::Done)),
                Next::Done => return None,
            };
            let UsagePage { records, next_cursor } = page;
            let rows: Vec<UsageRecordDto> = records.into_iter().map(UsageRecordDto::from).collect();
            let bytes = Bytes::from(records_csv(&rows, header));
            let following = match next_cursor {
                None => Next::Done,
                Some(cursor) => match state.usage.export_chunk(&caller, Some(&cursor)).await {
                    Ok(page) => Next::Page(page, false),
                    Err(e) => {
                        tracing::warn!(error = %e, "usage export cut short");
                        Next::Failed(actix_web::error::ErrorServiceUnavailable(e.to_string()))
                    }
                },
            };
            Some((Ok::<_, actix_web::Error>(bytes), following))
        }
    });
    HttpResponse::Ok()
        .content_type(CSV)
        .insert_header(attachment("aigw-usage-requests.csv"))
        .streaming(chunks)
}
