//! A lead's usage in the console: a team's usage page (any range of days, cost per day, a
//! chart per member, tables with names), the CSV downloads of the team's and the viewer's
//! own usage, and the viewer's usage page listing the teams they lead.

use crate::common;
use crate::console_usage::{call, priced_app};
use crate::teams::{add, team, team_scoped_key};
use common::browser::Browser;
use common::{Auth, Backend, TestApp};
use serde_json::{json, Value};
use std::time::Duration;

backend_tests!(a_lead_reads_and_downloads_the_team_usage_by_member,);

/// Polls `GET /teams/{id}/usage` (deadline 60 s) until it counts `n` requests.
async fn wait_for_team_usage(app: &TestApp, token: &str, id: &str, n: u64) -> Value {
    let path = format!("/api/v1/teams/{id}/usage?group_by=member");
    let arrived = || async {
        let data = app.get(&path, Auth::Bearer(token)).await.data(200);
        if data["totals"]["requests"].as_u64() >= Some(n) {
            Ok(data)
        } else {
            Err(data)
        }
    };
    common::eventually("team usage did not arrive", Duration::from_secs(60), arrived).await
}

async fn a_lead_reads_and_downloads_the_team_usage_by_member(backend: Backend) {
    let app = priced_app(backend, |_| {}).await;
    let lead = app.new_user("lead").await;
    let (ana, bo) = (app.new_user("ana").await, app.new_user("bo").await);
    let id = team(&app, &lead, json!({"name": "Research <lab>"})).await;
    add(&app, &lead, &id, &ana, "member").await;
    add(&app, &lead, &id, &bo, "member").await;
    let (ana_key, bo_key) =
        (team_scoped_key(&app, &ana, &id).await, team_scoped_key(&app, &bo, &id).await);
    for _ in 0..3 {
        call(&app, &ana_key, "priced").await;
    }
    call(&app, &bo_key, "priced").await;
    let usage = wait_for_team_usage(&app, &lead.token, &id, 4).await;
    assert_eq!(usage["rows"].as_array().unwrap().len(), 2, "{usage}");

    let mut browser = Browser::signed_in(&app, &lead).await;
    let team_page = browser.get(&format!("/teams/{id}")).await;
    assert!(team_page.text.contains(&format!("href=\"/teams/{id}/usage\"")), "{}", team_page.text);
    let page = browser.get(&format!("/teams/{id}/usage")).await;
    assert_eq!(page.status, 200, "{}", page.text);
    assert!(page.text.contains("Research &lt;lab&gt;"), "the name as text: {}", page.text);
    assert!(page.section("<dl id=\"team-totals\"", "</dl>").contains("<dd>4</dd>"));
    // The member chart: one bar per member, the larger spender first, named.
    let chart = page.section("<svg id=\"chart-members\"", "</svg>");
    assert_eq!(chart.matches("<rect ").count(), 2, "{chart}");
    let (ana_at, bo_at) = (chart.find(&ana.email).unwrap(), chart.find(&bo.email).unwrap());
    assert!(ana_at < bo_at, "three calls before one: {chart}");
    let members = page.section("<table id=\"team-by-member\"", "</table>");
    assert!(members.contains(&ana.email) && members.contains(&bo.email), "{members}");
    assert!(members.contains("<td class=\"num\">3</td>"), "{members}");
    let days = page.section("<svg id=\"chart-team-cost\"", "</svg>");
    assert_eq!(days.matches("<rect ").count(), 1, "{days}");
    let keys = page.section("<table id=\"team-by-key\"", "</table>");
    assert_eq!(keys.matches("<td>scoped (aigw_").count(), 2, "named with their prefixes: {keys}");

    // Another range: nothing in it; a bad one names its field.
    let empty = browser.get(&format!("/teams/{id}/usage?from=2020-01-01&to=2020-01-31")).await;
    assert_eq!(empty.status, 200, "{}", empty.text);
    assert!(empty.section("<dl id=\"team-totals\"", "</dl>").contains("<dd>0</dd>"));
    let bad = browser.get(&format!("/teams/{id}/usage?from=2026-02-30")).await;
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert!(bad.section("<input id=\"from\"", ">").contains("aria-invalid=\"true\""));

    // The downloads: the team's by member, with names; the lead's own by model.
    let exports = page.section("<p id=\"team-exports\"", "</p>");
    let href = exports.split("href=\"").nth(2).unwrap().split('"').next().unwrap();
    let href = href.replace("&amp;", "&").replace("&#x2f;", "/");
    assert!(href.contains("group_by=member"), "{href}");
    let csv = browser.get(&href).await;
    assert_eq!(csv.status, 200, "{}", csv.text);
    assert!(csv.header("content-type").starts_with("text/csv"), "{:?}", csv.headers);
    assert!(csv.header("content-disposition").contains("aigw-team-usage-by-member.csv"));
    assert_eq!(csv.text.lines().count(), 3, "a header and two members: {}", csv.text);
    assert!(csv.text.contains(&ana.email) && csv.text.contains(&bo.email), "{}", csv.text);

    // A plain member is refused the team's usage, page and file.
    let mut member = Browser::signed_in(&app, &ana).await;
    assert_eq!(member.get(&format!("/teams/{id}/usage")).await.status, 403);
    assert_eq!(member.get(&format!("/teams/{id}/usage/export.csv")).await.status, 403);
    // The member's own downloads hold their calls.
    let own = member.get("/usage/export.csv?group_by=model").await;
    assert_eq!(own.status, 200, "{}", own.text);
    assert!(own.text.lines().nth(1).unwrap_or_default().starts_with("priced,3,"), "{}", own.text);
    let requests = member.get("/usage/requests.csv").await;
    assert_eq!(requests.status, 200, "{}", requests.text);
    assert_eq!(requests.text.lines().count(), 4, "a header and three calls: {}", requests.text);
    let bad = member.get("/usage/export.csv?group_by=planet").await;
    assert_eq!(bad.status, 400, "{}", bad.text);

    // The lead's usage page lists the team with what it spent; the member's does not.
    let own_page = browser.get("/usage").await;
    let led = own_page.section("<table id=\"led-teams\"", "</table>");
    assert!(led.contains(&format!("href=\"&#x2f;teams&#x2f;{id}&#x2f;usage?from=")), "{led}");
    assert!(led.contains("<td class=\"num\">4</td>"), "{led}");
    assert!(own_page.text.contains("id=\"usage-exports\""), "{}", own_page.text);
    assert!(!member.get("/usage").await.text.contains("id=\"led-teams\""));
}
