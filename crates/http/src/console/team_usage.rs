//! `/teams/{id}/usage`: a team's usage over a range of days, for its owners and admins (and
//! platform admins): totals, cost per day, cost per member as a chart, tables by member, key
//! and model, and the CSV downloads of each. The same use case as
//! `GET /api/v1/teams/{id}/usage`.

use crate::console::chart::Chart;
use crate::console::ranking::Ranking;
use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::usage::{cost, day_series, export_href, given, group_row, totals_view};
use crate::console::view::money;
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::usage::format_day;
use aigw_domain::TeamId;
use aigw_service::teams::TeamView;
use aigw_service::usage::{GroupLabel, UsageQuery, UsageSummary};
use aigw_service::ServiceError;
use minijinja::{context, Value};
use serde::Deserialize;

/// `?from=…&to=…` (empty fields count as absent).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RangeParams {
    #[serde(default)]
    from: String,
    #[serde(default)]
    to: String,
}

impl RangeParams {
    fn query(&self, group_by: &str) -> UsageQuery {
        UsageQuery {
            from: given(&self.from),
            to: given(&self.to),
            group_by: Some(group_by.to_owned()),
            ..UsageQuery::default()
        }
    }
}

/// How a page names the member of group value `id` of a `member` summary: their name and
/// address; the team's own keys for the empty value; the id when the account is gone.
pub(crate) fn member_label(summary: &UsageSummary, id: &str) -> String {
    match (id, summary.labels.get(id)) {
        ("", _) => "Team keys".to_owned(),
        (_, Some(GroupLabel::Member { email, name })) if name.is_empty() => email.clone(),
        (_, Some(GroupLabel::Member { email, name })) => format!("{name} <{email}>"),
        (id, _) => format!("user {id}"),
    }
}

/// How a page names the key of group value `id` of an `api_key` summary: name and prefix.
pub(crate) fn key_label(summary: &UsageSummary, id: &str) -> String {
    match summary.labels.get(id) {
        Some(GroupLabel::ApiKey { name, key_prefix }) => format!("{name} ({key_prefix}…)"),
        _ => format!("deleted key {id}"),
    }
}

/// The four summaries the page shows.
struct TeamUsage {
    by_day: UsageSummary,
    by_member: UsageSummary,
    by_key: UsageSummary,
    by_model: UsageSummary,
}

async fn read(
    state: &AppState,
    viewer: &Viewer,
    id: &TeamId,
    params: &RangeParams,
) -> Result<(TeamView, TeamUsage), ServiceError> {
    let team = state.teams.get_team(&viewer.authorized::<op::ReadAccount>()?, id).await?;
    let caller = viewer.authorized::<op::ReadUsage>()?;
    let usage = TeamUsage {
        by_day: state.teams.team_usage(&caller, id, params.query("day")).await?,
        by_member: state.teams.team_usage(&caller, id, params.query("member")).await?,
        by_key: state.teams.team_usage(&caller, id, params.query("api_key")).await?,
        by_model: state.teams.team_usage(&caller, id, params.query("model")).await?,
    };
    Ok((team, usage))
}

/// The page's values for `usage` of `team`.
fn usage_values(team: &TeamView, usage: &TeamUsage) -> Value {
    let range = usage.by_day.range;
    let (from, to) = (format_day(range.from), format_day(range.to));
    let total_cost = usage.by_day.totals.cost_micros;
    let days = day_series(&range, &usage.by_day);
    let costs: Vec<(String, f64)> =
        days.iter().map(|(d, t)| (d.clone(), t.cost_micros as f64)).collect();
    let cost_chart = Chart::of(&costs, |v| money(v.round() as i64));
    let member_costs: Vec<(String, f64)> = usage
        .by_member
        .rows
        .iter()
        .map(|(id, t)| (member_label(&usage.by_member, id), t.cost_micros as f64))
        .collect();
    let member_chart = Ranking::of(&member_costs, |v| money(v.round() as i64));
    let rows = |summary: &UsageSummary, label: &dyn Fn(&str) -> String| -> Vec<Value> {
        summary
            .rows
            .iter()
            .map(|(id, t)| group_row(id, Some(label(id).as_str()), t, total_cost))
            .collect()
    };
    let exports: Vec<Value> = [("day", "By day"), ("member", "By member"), ("api_key", "By key")]
        .into_iter()
        .chain([("model", "By model"), ("endpoint", "By endpoint")])
        .map(|(group, text)| {
            let path = format!("/teams/{}/usage/export.csv", team.id);
            context! { href => export_href(&path, (&from, &to), group, None), text }
        })
        .collect();
    context! {
        shown => true,
        range => context! { from, to, days => range.days() },
        form => context! { from, to },
        totals => totals_view(&usage.by_day.totals),
        spent => cost(total_cost),
        cost_chart,
        member_chart,
        by_member => rows(&usage.by_member, &|id| member_label(&usage.by_member, id)),
        by_key => rows(&usage.by_key, &|id| key_label(&usage.by_key, id)),
        by_model => rows(&usage.by_model, &|id| id.to_owned()),
        exports,
    }
}

/// `GET /teams/{id}/usage`: the team's usage over `from`..`to` (default: the last 30 days,
/// UTC): totals, cost per day, cost per member, tables by member, key and model, and CSV
/// downloads.
///
/// Errors: a bad `from` or `to` (not a date, `from` after `to`, more than 366 days)
/// re-renders the range form with the field marked (400); a member without the owner or
/// admin role gets the API's 403, someone who is not a member its 404; a database outage is
/// a 503 page.
pub(crate) async fn show(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<TeamId>,
    params: web::Query<RangeParams>,
) -> HttpResponse {
    let (team, usage) = match read(&state, &viewer, &id, &params).await {
        Ok(read) => read,
        Err(e @ ServiceError::Invalid(_)) => {
            let shown = Shown::from(e);
            let form = context! { from => params.from, to => params.to };
            return viewer.page(
                shown.status,
                "team_usage.html",
                context! {
                    title => "Team usage", section => "teams", team_id => id.as_str(), form,
                    error => shown,
                },
            );
        }
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let values = usage_values(&team, &usage);
    let heading = context! {
        title => format!("Usage of {}", team.name), section => "teams", team_id => team.id,
        team_name => team.name,
    };
    viewer.page(StatusCode::OK, "team_usage.html", minijinja::value::merge_maps([heading, values]))
}

#[cfg(test)]
mod tests {
    #[test]
    fn export_links_carry_the_range_and_group() {
        assert_eq!(
            super::export_href(
                "/teams/t1/usage/export.csv",
                ("2026-01-01", "2026-01-31"),
                "member",
                None
            ),
            "/teams/t1/usage/export.csv?from=2026-01-01&to=2026-01-31&group_by=member"
        );
    }
}
