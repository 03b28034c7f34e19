//! `/usage`: the viewer's usage over a range of days (totals, cost and tokens per day as
//! charts, by model, by endpoint, by key, CSV downloads), their calls one by one, and the
//! teams they lead with what each spent. The same use cases as `GET /api/v1/usage`,
//! `GET /api/v1/usage/requests` and `GET /api/v1/teams/{id}/usage`.

use crate::console::chart::Chart;
use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::view::money;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::UsageRecord;
use aigw_domain::usage::{format_day, DayRange};
use aigw_service::usage::{UsagePage, UsageQuery, UsageSummary, UsageTotals};
use aigw_service::{ApiKeyView, PageRequest};
use minijinja::{context, Value};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Calls per page of the per-request table.
const REQUESTS_PAGE: &str = "50";
/// Keys listed in the key picker (and whose names the tables show): the first page.
const KEYS_LISTED: &str = "200";

/// `?from=…&to=…&api_key_id=…&cursor=…` (empty fields count as absent).
#[derive(Debug, Default, Deserialize, Serialize)]
pub(crate) struct UsageParams {
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
    #[serde(default)]
    api_key_id: String,
    #[serde(default, skip_serializing)]
    cursor: Option<String>,
}

/// `Some(trimmed)` unless empty.
pub(crate) fn given(raw: &str) -> Option<String> {
    Some(raw.trim().to_owned()).filter(|v| !v.is_empty())
}

impl UsageParams {
    /// The use case's query, grouped by `group_by`.
    fn query(&self, group_by: &str) -> UsageQuery {
        UsageQuery {
            from: given(&self.from),
            to: given(&self.to),
            group_by: Some(group_by.to_owned()),
            api_key_id: given(&self.api_key_id),
            endpoint: None,
        }
    }

    /// `/usage?…` with these parameters (the range and key kept) and `cursor`.
    fn href(&self, cursor: Option<&str>) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        for (name, value) in
            [("from", &self.from), ("to", &self.to), ("api_key_id", &self.api_key_id)]
        {
            if let Some(value) = given(value) {
                query.append_pair(name, &value);
            }
        }
        if let Some(cursor) = cursor {
            query.append_pair("cursor", cursor);
        }
        let query = query.finish();
        if query.is_empty() {
            "/usage".to_owned()
        } else {
            format!("/usage?{query}")
        }
    }
}

/// A count with thousands separators: `12,345`.
pub(crate) fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Micro-USD held in a `u64`, as [`money`] shows it.
pub(crate) fn cost(micros: u64) -> String {
    money(i64::try_from(micros).unwrap_or(i64::MAX))
}

/// The sums as the tables show them.
pub(crate) fn totals_view(t: &UsageTotals) -> Value {
    context! {
        requests => count(t.requests),
        prompt_tokens => count(t.prompt_tokens),
        completion_tokens => count(t.completion_tokens),
        total_tokens => count(t.total_tokens),
        cached_tokens => count(t.cached_tokens),
        cache_write_tokens => count(t.cache_write_tokens),
        reasoning_tokens => count(t.reasoning_tokens),
        cost => cost(t.cost_micros),
        estimated_requests => t.estimated_requests,
        unpriced_requests => t.unpriced_requests,
    }
}

/// `part` of `whole` as a fraction (0 when `whole` is 0) and a whole percentage.
pub(crate) fn share(part: u64, whole: u64) -> (f64, String) {
    if whole == 0 {
        return (0.0, "0%".to_owned());
    }
    let fraction = part as f64 / whole as f64;
    (fraction, format!("{:.0}%", fraction * 100.0))
}

/// One row of the by-model or by-key table.
pub(crate) fn group_row(
    group: &str,
    name: Option<&str>,
    t: &UsageTotals,
    total_cost: u64,
) -> Value {
    let (fraction, percent) = share(t.cost_micros, total_cost);
    context! {
        id => group,
        name => name.unwrap_or(group),
        named => name.is_some(),
        totals => totals_view(t),
        share => fraction,
        percent,
    }
}

/// Every day of `range`, with the day rows of `summary` (days without usage as zeros).
pub(crate) fn day_series(range: &DayRange, summary: &UsageSummary) -> Vec<(String, UsageTotals)> {
    let by_day: HashMap<&str, &UsageTotals> =
        summary.rows.iter().map(|(day, t)| (day.as_str(), t)).collect();
    let days = usize::try_from(range.days()).unwrap_or(0);
    range
        .from
        .iter_days()
        .take(days)
        .map(|day| {
            let label = format_day(day);
            let totals = by_day.get(label.as_str()).map(|t| **t).unwrap_or_default();
            (label, totals)
        })
        .collect()
}

/// The page's data: the four summaries, when kept a page of calls, and the teams the
/// viewer leads with what each spent in the range.
struct Usage {
    by_day: UsageSummary,
    by_model: UsageSummary,
    by_endpoint: UsageSummary,
    by_key: UsageSummary,
    requests: Option<UsagePage>,
    teams: Vec<Value>,
}

/// Teams listed in "Teams you lead" (those the viewer owns or administers, of their first
/// page).
const TEAMS_LISTED: i64 = 50;

/// The teams the viewer owns or administers, each with its usage over the page's range and
/// a link to its usage page.
async fn led_teams(
    state: &AppState,
    viewer: &Viewer,
    params: &UsageParams,
) -> Result<Vec<Value>, aigw_service::ServiceError> {
    let caller = viewer.authorized::<op::ReadUsage>()?;
    let query = UsageQuery { api_key_id: None, ..params.query("day") };
    let (range, teams) = state.teams.led_team_usage(&caller, &query, TEAMS_LISTED).await?;
    let href = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("from", &format_day(range.from))
        .append_pair("to", &format_day(range.to))
        .finish();
    Ok(teams
        .iter()
        .map(|team| {
            context! {
                id => team.id, name => team.name, role => team.role.as_str(),
                totals => totals_view(&team.totals),
                href => format!("/teams/{}/usage?{href}", team.id),
            }
        })
        .collect())
}

/// The CSV download at `path` (`/usage/export.csv`, `/teams/{id}/usage/export.csv`) of the
/// days `from`..`to` grouped by `group_by` (of one key when `api_key_id` is given).
pub(crate) fn export_href(
    path: &str,
    (from, to): (&str, &str),
    group_by: &str,
    api_key_id: Option<&str>,
) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    query.append_pair("from", from).append_pair("to", to).append_pair("group_by", group_by);
    if let Some(key) = api_key_id {
        query.append_pair("api_key_id", key);
    }
    format!("{path}?{}", query.finish())
}

/// One call of the requests table, its key named from `names` (key id to name) where known.
fn request_row(r: &UsageRecord, names: &HashMap<&str, &str>) -> Value {
    context! {
        id => r.request_id,
        at => r.started_at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        model => r.model,
        endpoint => r.endpoint.as_str(),
        key_id => r.api_key_id,
        key_name => names.get(r.api_key_id.as_str()).copied().unwrap_or(r.api_key_id.as_str()),
        outcome => r.outcome.as_str(),
        streamed => r.streamed,
        prompt_tokens => count(r.tokens.prompt_tokens),
        completion_tokens => count(r.tokens.completion_tokens),
        total_tokens => count(r.tokens.total_tokens),
        cached_tokens => count(r.tokens.cached_tokens),
        estimated => r.estimated,
        cost => cost(r.cost_micros),
        priced => r.priced,
        latency_ms => count(r.latency_ms),
    }
}

/// The usage page: the picker with `params`, and `usage` (or `error` in its place).
fn usage_page(
    viewer: &Viewer,
    status: StatusCode,
    params: &UsageParams,
    keys: &[ApiKeyView],
    usage: Option<Usage>,
    error: Option<Shown>,
) -> HttpResponse {
    let names: HashMap<&str, &str> =
        keys.iter().map(|k| (k.id.as_str(), k.name.as_str())).collect();
    let mut key_options: Vec<Value> =
        keys.iter().map(|k| context! { id => k.id, name => k.name }).collect();
    if let Some(wanted) = given(&params.api_key_id) {
        if !names.contains_key(wanted.as_str()) {
            key_options.push(context! { id => wanted, name => wanted });
        }
    }
    let mut values = context! {
        title => "Usage", section => "usage", keys => key_options, error,
        first_page_href => params.href(None), paged => params.cursor.is_some(),
    };
    let mut form = context! { from => params.from, to => params.to,
    api_key_id => params.api_key_id };
    if let Some(usage) = usage {
        let range = usage.by_day.range;
        form = context! {
            from => format_day(range.from), to => format_day(range.to),
            api_key_id => params.api_key_id,
        };
        let days = day_series(&range, &usage.by_day);
        let costs: Vec<(String, f64)> =
            days.iter().map(|(d, t)| (d.clone(), t.cost_micros as f64)).collect();
        let tokens: Vec<(String, f64)> =
            days.iter().map(|(d, t)| (d.clone(), t.total_tokens as f64)).collect();
        let cost_chart = Chart::of(&costs, |v| money(v.round() as i64));
        let token_chart = Chart::of(&tokens, |v| count(v.round() as u64));
        let total_cost = usage.by_day.totals.cost_micros;
        let models: Vec<Value> = usage
            .by_model
            .rows
            .iter()
            .map(|(model, t)| group_row(model, None, t, total_cost))
            .collect();
        let endpoints: Vec<Value> = usage
            .by_endpoint
            .rows
            .iter()
            .map(|(endpoint, t)| group_row(endpoint, None, t, total_cost))
            .collect();
        let by_key: Vec<Value> = usage
            .by_key
            .rows
            .iter()
            .map(|(id, t)| group_row(id, names.get(id.as_str()).copied(), t, total_cost))
            .collect();
        let (from, to) = (format_day(range.from), format_day(range.to));
        let key = given(&params.api_key_id);
        let exports: Vec<Value> = [("day", "By day"), ("model", "By model")]
            .into_iter()
            .chain([("api_key", "By key"), ("endpoint", "By endpoint"), ("team", "By team")])
            .map(|(group, text)| {
                let (path, range) = ("/usage/export.csv", (from.as_str(), to.as_str()));
                context! { href => export_href(path, range, group, key.as_deref()), text }
            })
            .collect();
        let kept = usage.requests.is_some();
        let (requests, next) = match usage.requests {
            Some(page) => {
                let rows = page.records.iter().map(|r| request_row(r, &names)).collect();
                (rows, page.next_cursor.map(|c| params.href(Some(&c))))
            }
            None => (Vec::new(), None),
        };
        values = minijinja::value::merge_maps([
            values,
            context! {
                shown => true,
                range => context! { from => format_day(range.from), to => format_day(range.to),
                    days => range.days() },
                totals => totals_view(&usage.by_day.totals),
                cost_chart, token_chart, models, endpoints, by_key,
                records_kept => kept, requests, next, exports, teams => usage.teams,
                one_key => given(&params.api_key_id).is_some(),
            },
        ]);
    }
    viewer.page(status, "usage.html", minijinja::value::merge_maps([values, context! { form }]))
}

/// `GET /usage`: totals, charts per day, tables by model, by endpoint and by key over
/// `from`..`to` (default: the last 30 days; `api_key_id`: one key's usage), and a page of
/// calls.
///
/// Errors: a bad `from`, `to` (not a date, `from` after `to`, more than 366 days) or
/// `cursor` re-renders the picker with the field marked (400); a database outage is a 503
/// page.
pub(crate) async fn show(
    state: web::Data<AppState>,
    viewer: Viewer,
    params: web::Query<UsageParams>,
) -> HttpResponse {
    let params = params.into_inner();
    let keys = async {
        let reader = viewer.authorized::<op::ReadAccount>()?;
        let first = PageRequest { limit: Some(KEYS_LISTED.to_owned()), cursor: None };
        state.api_keys.list_api_keys_page(&reader, &first).await
    }
    .await;
    let keys = match keys {
        Ok(page) => page.items,
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let usage = async {
        let caller = viewer.authorized::<op::ReadUsage>()?;
        let by_day = state.usage.summary(&caller, params.query("day")).await?;
        let by_model = state.usage.summary(&caller, params.query("model")).await?;
        let by_endpoint = state.usage.summary(&caller, params.query("endpoint")).await?;
        let by_key = state.usage.summary(&caller, params.query("api_key")).await?;
        let requests = if state.usage.keeps_request_records() {
            let cursor = params.cursor.as_deref().map(str::trim).filter(|c| !c.is_empty());
            Some(state.usage.requests(&caller, Some(REQUESTS_PAGE), cursor).await?)
        } else {
            None
        };
        let teams = led_teams(&state, &viewer, &params).await?;
        Ok::<_, aigw_service::ServiceError>(Usage {
            by_day,
            by_model,
            by_endpoint,
            by_key,
            requests,
            teams,
        })
    }
    .await;
    match usage {
        Ok(usage) => usage_page(&viewer, StatusCode::OK, &params, &keys, Some(usage), None),
        Err(e) => {
            let shown = Shown::from(e);
            usage_page(&viewer, shown.status, &params, &keys, None, Some(shown))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_have_thousands_separators() {
        for (n, shown) in [(0, "0"), (999, "999"), (1000, "1,000"), (1_234_567, "1,234,567")] {
            assert_eq!(count(n), shown);
        }
    }

    #[test]
    fn links_keep_the_range_and_key() {
        let params = UsageParams {
            from: "2026-01-01".into(),
            to: " ".into(),
            api_key_id: "k&1".into(),
            cursor: Some("old".into()),
        };
        assert_eq!(params.href(Some("abc")), "/usage?from=2026-01-01&api_key_id=k%261&cursor=abc");
        assert_eq!(UsageParams::default().href(None), "/usage");
    }
}
