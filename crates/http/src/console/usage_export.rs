//! The console's CSV downloads: the viewer's usage summary (`/usage/export.csv`), their
//! per-request records (`/usage/requests.csv`, streamed) and a team's summary
//! (`/teams/{id}/usage/export.csv`, its owners and admins). The same use cases and files as
//! `GET /api/v1/usage/export`, `/usage/requests/export` and `/teams/{id}/usage/export`.

use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::usage::given;
use crate::routes::usage_export::{records_answer, summary_answer};
use crate::state::AppState;
use actix_web::{web, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::TeamId;
use aigw_service::usage::UsageQuery;
use serde::Deserialize;

/// `?from=…&to=…&group_by=…&api_key_id=…` (empty fields count as absent).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ExportParams {
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    group_by: String,
    #[serde(default)]
    api_key_id: String,
}

impl ExportParams {
    fn query(&self) -> UsageQuery {
        UsageQuery {
            from: given(&self.from),
            to: given(&self.to),
            group_by: given(&self.group_by),
            api_key_id: given(&self.api_key_id),
            endpoint: None,
        }
    }
}

/// `GET /usage/export.csv`: the viewer's usage over `from`..`to` (default: the last 30
/// days), grouped by `group_by` (`day`, `model`, `api_key`, `endpoint` or `team`; default
/// `day`), optionally one key's.
///
/// Errors: a bad date, range or group is a 400 page naming the field; a database outage, 503.
pub(crate) async fn summary(
    state: web::Data<AppState>,
    viewer: Viewer,
    params: web::Query<ExportParams>,
) -> HttpResponse {
    let summary = async {
        let caller = viewer.authorized::<op::ReadUsage>()?;
        state.usage.summary(&caller, params.query()).await
    }
    .await;
    match summary {
        Ok(summary) => summary_answer("aigw-usage", summary),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// `GET /usage/requests.csv`: every call of the viewer that the server keeps a record of,
/// newest first, streamed.
///
/// Errors: a database outage before the first chunk is a 503 page; one later ends the file
/// early.
pub(crate) async fn requests(state: web::Data<AppState>, viewer: Viewer) -> HttpResponse {
    let first = async {
        let caller = viewer.authorized::<op::ReadUsage>()?;
        let first = state.usage.export_chunk(&caller, None).await?;
        Ok::<_, aigw_service::ServiceError>((caller, first))
    }
    .await;
    match first {
        Ok((caller, first)) => records_answer(state, caller, first),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// `GET /teams/{id}/usage/export.csv`: team `id`'s usage over `from`..`to`, grouped by
/// `group_by` (`day`, `model`, `member`, `api_key` or `endpoint`); its owners and admins.
///
/// Errors: as [`summary`]; 403 for a member without the role, 404 for someone who is not a
/// member.
pub(crate) async fn team(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<TeamId>,
    params: web::Query<ExportParams>,
) -> HttpResponse {
    let summary = async {
        let caller = viewer.authorized::<op::ReadUsage>()?;
        let mut query = params.query();
        query.api_key_id = None;
        state.teams.team_usage(&caller, &id, query).await
    }
    .await;
    match summary {
        Ok(summary) => summary_answer("aigw-team-usage", summary),
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}
