//! `/teams`: the viewer's teams, paged, and creating one; a team's page (its policy and
//! budget, members, invitations, team keys and usage) and the forms that change it. The same
//! use cases as `/api/v1/teams/…`, so the team's roles decide what a form may do: a page
//! shows the forms the viewer's role allows, and a form sent anyway shows the API's refusal.

use crate::console::keys::{optional, CursorQuery, NewKeyForm};
use crate::console::render::Shown;
use crate::console::session::Viewer;
use crate::console::team_usage::{key_label, member_label};
use crate::console::view::{key_row, money, when, CsrfField, CsrfOnly, Form};
use crate::state::AppState;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use aigw_domain::access::op;
use aigw_domain::{ApiKeyId, BudgetPeriod, TeamId, TeamRole, UserId};
use aigw_service::teams::{MemberAdded, NewMember, NewTeam, TeamPatch, TeamView};
use aigw_service::usage::{UsageQuery, UsageSummary};
use aigw_service::{ApiKeyPatch, ApiKeyView, PageRequest, ServiceError};
use minijinja::{context, Value};
use serde::Deserialize;
use std::collections::HashMap;

/// Items per page of every list.
const PAGE_SIZE: &str = "50";

/// The first page, or the one after `cursor`.
fn page_of(cursor: Option<&String>) -> PageRequest {
    PageRequest { limit: Some(PAGE_SIZE.to_owned()), cursor: cursor.cloned() }
}

/// `cursor` as a query value.
fn encoded(cursor: &str) -> String {
    url::form_urlencoded::byte_serialize(cursor.as_bytes()).collect()
}

/// A money amount in USD as a form shows it (`2000`, `12.5`).
fn usd_field(micros: Option<i64>) -> String {
    micros.map(|m| format!("{}", m as f64 / 1_000_000.0)).unwrap_or_default()
}

/// How a page names a budget period: `this month`, `in total`.
fn period_words(period: Option<BudgetPeriod>) -> &'static str {
    match period.unwrap_or(BudgetPeriod::Total) {
        BudgetPeriod::Daily => "today (UTC)",
        BudgetPeriod::Weekly => "this week (UTC)",
        BudgetPeriod::Monthly => "this month (UTC)",
        BudgetPeriod::Total => "in total",
    }
}

/// Model names or globs as typed: separated by commas, spaces or lines.
fn model_list(raw: &str) -> Vec<String> {
    raw.split([',', '\n', ' '])
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .map(str::to_owned)
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The list of teams.

/// The new-team form.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct NewTeamForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    name: String,
}

impl CsrfField for NewTeamForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `GET /teams`: one page of the viewer's teams, newest first, with the viewer's role in each,
/// and the form that creates one. A bad cursor shows the API's 400.
pub(crate) async fn list(
    state: web::Data<AppState>,
    viewer: Viewer,
    query: web::Query<CursorQuery>,
) -> HttpResponse {
    teams_page(&state, &viewer, query.cursor.as_ref(), StatusCode::OK, "", None).await
}

/// The list page, with `typed` in the new-team form and `error` above it.
async fn teams_page(
    state: &AppState,
    viewer: &Viewer,
    cursor: Option<&String>,
    status: StatusCode,
    typed: &str,
    error: Option<Shown>,
) -> HttpResponse {
    let teams = match viewer.authorized::<op::ReadAccount>() {
        Ok(caller) => state.teams.list_teams(&caller, &page_of(cursor)).await,
        Err(e) => Err(e),
    };
    let teams = match teams {
        Ok(teams) => teams,
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let rows: Vec<Value> = teams
        .items
        .iter()
        .map(|t| {
            context! {
                id => t.id,
                name => t.name,
                role => t.role.map(TeamRole::as_str),
                budget => t.policy.max_budget_micros.map(|m| format!("{} {}", money(m),
                    t.policy.budget_period.unwrap_or(BudgetPeriod::Total).as_str())),
                created => when(&t.created_at),
            }
        })
        .collect();
    let next = teams.next_cursor.map(|c| format!("/teams?cursor={}", encoded(&c)));
    viewer.page(
        status,
        "teams.html",
        context! { title => "Teams", section => "teams", teams => rows, next,
        first_page => cursor.is_none(), team_name => typed, error },
    )
}

/// `POST /teams`: creates a team whose owner is the viewer and opens its page; a refusal (a
/// bad name, or `auth.team_creation = "admins"` for a user who is not one) comes back on the
/// list with the name typed.
pub(crate) async fn create(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    form: Form<NewTeamForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let created = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => {
            let request = NewTeam { name: form.name.clone(), ..NewTeam::default() };
            state.teams.create_team(&caller, request).await
        }
        Err(e) => Err(e),
    };
    match created {
        Ok(team) => viewer.keys().see_other_with_notice(
            &format!("/teams/{}", team.id),
            "The team is created, and you are its owner.",
        ),
        Err(e) => {
            let shown = Shown::from(e);
            teams_page(&state, &viewer, None, shown.status, &form.name, Some(shown)).await
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A team's page.

/// The cursors of the team page's lists (each list pages on its own).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TeamQuery {
    members_cursor: Option<String>,
    invitations_cursor: Option<String>,
    keys_cursor: Option<String>,
}

/// The add-member form.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
pub(crate) struct AddMemberForm {
    #[serde(default, skip_serializing)]
    csrf: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    role: String,
}

impl CsrfField for AddMemberForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// The policy form: the team's name and policy, as typed.
#[derive(Debug, Default, Deserialize, serde::Serialize)]
pub(crate) struct PolicyForm {
    #[serde(default, skip_serializing)]
    csrf: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    max_budget_usd: String,
    #[serde(default)]
    budget_period: String,
    #[serde(default)]
    member_budget_usd: String,
    #[serde(default)]
    rpm_limit: String,
    #[serde(default)]
    tpm_limit: String,
    #[serde(default)]
    allowed_models: String,
    #[serde(default)]
    budget_mode: String,
    /// `on` when the box is checked (absent otherwise).
    #[serde(default)]
    require_scoped_keys: String,
}

impl CsrfField for PolicyForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

impl PolicyForm {
    /// The form filled with `team`'s name and policy.
    fn of(team: &TeamView) -> Self {
        let policy = &team.policy;
        Self {
            csrf: String::new(),
            name: team.name.clone(),
            max_budget_usd: usd_field(policy.max_budget_micros),
            budget_period: policy.budget_period.unwrap_or(BudgetPeriod::Total).as_str().to_owned(),
            member_budget_usd: usd_field(team.member_budget_micros),
            rpm_limit: policy.rpm_limit.map(|v| v.to_string()).unwrap_or_default(),
            tpm_limit: policy.tpm_limit.map(|v| v.to_string()).unwrap_or_default(),
            allowed_models: policy
                .allowed_models
                .as_ref()
                .map(|m| m.as_slice().join(", "))
                .unwrap_or_default(),
            budget_mode: policy.budget_mode.unwrap_or_default().as_str().to_owned(),
            require_scoped_keys: if team.require_scoped_keys { "on" } else { "" }.to_owned(),
        }
    }

    /// The change from `team` to this form: only the fields that differ (an emptied field
    /// clears its limit), so a new period is sent only when the period changes.
    ///
    /// # Errors
    /// A 400 naming a field that is not a number.
    fn patch(&self, team: &TeamView) -> Result<TeamPatch, Shown> {
        let policy = &team.policy;
        let usd = |micros: Option<i64>| micros.map(|m| m as f64 / 1_000_000.0);
        let mut patch = TeamPatch::default();
        let name = self.name.trim();
        if name != team.name {
            patch.name = Some(Some(name.to_owned()));
        }
        let mut changes = ApiKeyPatch::default();
        let budget = optional::<f64>("max_budget_usd", &self.max_budget_usd)?;
        if budget != usd(policy.max_budget_micros) {
            changes.max_budget_usd = Some(budget);
        }
        let period = self.budget_period.trim();
        let current = policy.budget_period.unwrap_or(BudgetPeriod::Total).as_str();
        if period != current {
            changes.budget_period = Some(Some(period.to_owned()));
        }
        let member_budget = optional::<f64>("member_budget_usd", &self.member_budget_usd)?;
        if member_budget != usd(team.member_budget_micros) {
            patch.member_budget_usd = Some(member_budget);
        }
        let rpm = optional::<i64>("rpm_limit", &self.rpm_limit)?;
        if rpm != policy.rpm_limit {
            changes.rpm_limit = Some(rpm);
        }
        let tpm = optional::<i64>("tpm_limit", &self.tpm_limit)?;
        if tpm != policy.tpm_limit {
            changes.tpm_limit = Some(tpm);
        }
        let models = model_list(&self.allowed_models);
        let current: Vec<String> =
            policy.allowed_models.as_ref().map(|m| m.as_slice().to_vec()).unwrap_or_default();
        if models != current {
            changes.allowed_models = Some((!models.is_empty()).then_some(models));
        }
        let mode = self.budget_mode.trim();
        if !mode.is_empty() && mode != policy.budget_mode.unwrap_or_default().as_str() {
            changes.budget_mode = Some(Some(mode.to_owned()));
        }
        let scoped = self.require_scoped_keys == "on";
        if scoped != team.require_scoped_keys {
            patch.require_scoped_keys = Some(Some(scoped));
        }
        patch.policy = changes;
        Ok(patch)
    }
}

/// What a refused form of the team page sends back: which form, what was typed, and why.
#[derive(Debug, Default)]
pub(super) struct Typed {
    /// `add-member`, `team-policy`, or another form's id.
    form: &'static str,
    member: Option<AddMemberForm>,
    policy: Option<PolicyForm>,
    error: Option<Shown>,
}

impl Typed {
    pub(super) fn refused(form: &'static str, error: Shown) -> Self {
        Self { form, error: Some(error), ..Self::default() }
    }
}

/// What the team page lists besides the team, read with the viewer's rights.
struct Lists {
    members: aigw_service::Page<aigw_service::teams::MemberView>,
    /// Only for the team's owners and admins (and platform admins): the use cases refuse
    /// anyone else.
    managed: Option<Managed>,
}

struct Managed {
    invitations: aigw_service::Page<aigw_service::teams::TeamInvitationView>,
    keys: aigw_service::Page<ApiKeyView>,
    by_member: UsageSummary,
    by_key: UsageSummary,
    /// The team's webhook, and its latest deliveries.
    webhook: Option<aigw_service::alerts::WebhookView>,
    deliveries: Vec<aigw_service::alerts::DeliveryView>,
}

/// Whether the viewer manages `team` (its owners and admins, platform admins).
fn manages(viewer: &Viewer, team: &TeamView) -> bool {
    viewer.is_admin() || team.role.is_some_and(TeamRole::manages)
}

/// Whether the viewer owns `team` (its owners, platform admins).
fn owns(viewer: &Viewer, team: &TeamView) -> bool {
    viewer.is_admin() || team.role == Some(TeamRole::Owner)
}

/// Reads the team and its lists.
async fn read_team(
    state: &AppState,
    viewer: &Viewer,
    id: &TeamId,
    query: &TeamQuery,
) -> Result<(TeamView, Lists), ServiceError> {
    let reader = viewer.authorized::<op::ReadAccount>()?;
    let team = state.teams.get_team(&reader, id).await?;
    let members =
        state.teams.list_team_members(&reader, id, &page_of(query.members_cursor.as_ref())).await?;
    let managed = if manages(viewer, &team) {
        let invitations = state
            .teams
            .list_team_invitations(&reader, id, &page_of(query.invitations_cursor.as_ref()))
            .await?;
        let keys = state
            .teams
            .list_team_api_keys(&reader, id, &page_of(query.keys_cursor.as_ref()))
            .await?;
        let usage = viewer.authorized::<op::ReadUsage>()?;
        let grouped =
            |group: &str| UsageQuery { group_by: Some(group.to_owned()), ..UsageQuery::default() };
        let by_member = state.teams.team_usage(&usage, id, grouped("member")).await?;
        let by_key = state.teams.team_usage(&usage, id, grouped("api_key")).await?;
        let (webhook, deliveries) = super::team_webhook_view::read(state, &reader, id).await?;
        Some(Managed { invitations, keys, by_member, by_key, webhook, deliveries })
    } else {
        None
    };
    Ok((team, Lists { members, managed }))
}

/// A link to the team page with one list at the page after `cursor`.
fn list_href(team_id: &str, param: &str, cursor: Option<String>, anchor: &str) -> Option<String> {
    cursor.map(|c| format!("/teams/{team_id}?{param}={}#{anchor}", encoded(&c)))
}

/// The rows of a usage table, each group named by `label`.
fn usage_rows(summary: &UsageSummary, label: impl Fn(&str) -> String) -> Vec<Value> {
    summary
        .rows
        .iter()
        .map(|(group, totals)| {
            context! {
                group,
                label => label(group),
                requests => totals.requests,
                tokens => totals.total_tokens,
                cost => money(i64::try_from(totals.cost_micros).unwrap_or(i64::MAX)),
            }
        })
        .collect()
}

/// The team page, with `typed` shown in the form it names.
async fn team_page(
    state: &AppState,
    viewer: &Viewer,
    id: &TeamId,
    query: &TeamQuery,
    status: StatusCode,
    typed: Typed,
) -> HttpResponse {
    let (team, lists) = match read_team(state, viewer, id, query).await {
        Ok(read) => read,
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let emails: HashMap<&str, &str> = lists
        .members
        .items
        .iter()
        .map(|m| (m.member.user_id.as_str(), m.member.email.as_str()))
        .collect();
    let members = member_rows(viewer, &team, &lists);
    let members_next = list_href(id, "members_cursor", lists.members.next_cursor, "members");
    let managed = lists.managed.as_ref().map(|managed| managed_view(id, managed, &emails));
    let managed = managed.unwrap_or_default();
    let Typed { form, member, policy: typed_policy, error } = typed;
    let policy_form = typed_policy.unwrap_or_else(|| PolicyForm::of(&team));
    let member_form = member
        .unwrap_or_else(|| AddMemberForm { role: "member".to_owned(), ..AddMemberForm::default() });
    let manages = manages(viewer, &team);
    let subnav_items: Vec<Value> = [
        ("#team-budget", "Budget", true),
        ("#members", "Members", true),
        ("#policy", "Policy", true),
        ("#team-keys", "Team keys", manages),
        ("#usage", "Usage", manages),
    ]
    .into_iter()
    .filter(|(_, _, shown)| *shown)
    .map(|(href, text, _)| context! { href, text, current => false })
    .collect();
    viewer.page(
        status,
        "team.html",
        context! {
            title => format!("Team {}", team.name),
            section => "teams",
            subnav => context! { label => "This team", items => subnav_items },
            team => team_summary(&team),
            budget => team_budget(&team),
            members,
            members_next,
            invitations => managed.invitations,
            invitations_next => managed.invitations_next,
            keys => managed.keys,
            keys_next => managed.keys_next,
            by_member => managed.by_member,
            by_key => managed.by_key,
            usage_range => managed.usage_range,
            webhook => managed.webhook,
            deliveries => managed.deliveries,
            manages,
            owns => owns(viewer, &team),
            is_member => team.role.is_some(),
            roles => ["member", "admin", "owner"],
            periods => ["daily", "weekly", "monthly", "total"],
            policy_form,
            member_form,
            failed => form,
            error,
        },
    )
}

/// The team's budget this period: spent, limit (USD text and numbers for the meter), when it
/// resets.
fn team_budget(team: &TeamView) -> Value {
    let policy = &team.policy;
    let reset = policy.budget_period.and_then(|p| p.reset_at(aigw_domain::time::now()));
    let spent = team.spend_micros.unwrap_or(0);
    context! {
        spent => money(spent),
        limit => policy.max_budget_micros.map(money),
        spent_usd => spent as f64 / 1_000_000.0,
        limit_usd => policy.max_budget_micros.map(|m| m as f64 / 1_000_000.0),
        high_usd => policy.max_budget_micros.map(|m| m as f64 / 1_000_000.0 * 0.8),
        over => policy.max_budget_micros.is_some_and(|m| spent >= m),
        when => period_words(policy.budget_period),
        reset => reset.as_ref().map(when),
    }
}

/// The team as its page's header and policy table show it.
fn team_summary(team: &TeamView) -> Value {
    let policy = &team.policy;
    context! {
        id => team.id,
        name => team.name,
        role => team.role.map(TeamRole::as_str),
        created => when(&team.created_at),
        updated => when(&team.updated_at),
        budget => policy.max_budget_micros.map(money),
        period => policy.budget_period.unwrap_or(BudgetPeriod::Total).as_str(),
        member_budget => team.member_budget_micros.map(money),
        rpm => policy.rpm_limit,
        tpm => policy.tpm_limit,
        models => policy.allowed_models.as_ref().map(|m| m.as_slice().join(", ")),
        budget_mode => policy.budget_mode.unwrap_or_default().as_str(),
        require_scoped_keys => team.require_scoped_keys,
    }
}

/// The members on this page of the list, each with what they spent and their budget.
fn member_rows(viewer: &Viewer, team: &TeamView, lists: &Lists) -> Vec<Value> {
    lists
        .members
        .items
        .iter()
        .map(|m| {
            let member = &m.member;
            let limit = match (member.budget_micros, team.member_budget_micros) {
                (Some(own), _) => Some(format!("{} (own)", money(own))),
                (None, Some(default)) => Some(format!("{} (team default)", money(default))),
                (None, None) => None,
            };
            context! {
                user_id => member.user_id,
                email => member.email,
                name => member.name,
                role => member.role.as_str(),
                spent => money(m.spend_micros),
                limit,
                own_budget => usd_field(member.budget_micros),
                joined => when(&member.created_at),
                is_viewer => member.user_id == viewer.user.id,
            }
        })
        .collect()
}

/// What only the team's owners and admins see: invitations, team keys and usage, each list
/// with the link to its next page.
#[derive(Default)]
struct ManagedView {
    invitations: Vec<Value>,
    invitations_next: Option<String>,
    keys: Vec<Value>,
    keys_next: Option<String>,
    by_member: Vec<Value>,
    by_key: Vec<Value>,
    usage_range: Option<String>,
    webhook: Option<Value>,
    deliveries: Vec<Value>,
}

/// The managers' part of team `id`'s page; `emails` names the members (by user id).
fn managed_view(id: &TeamId, managed: &Managed, emails: &HashMap<&str, &str>) -> ManagedView {
    let invitations = managed
        .invitations
        .items
        .iter()
        .map(|i| {
            context! { id => i.id, email => i.email, role => i.role.as_str(),
            created => when(&i.created_at), status => i.status.as_str(),
            expires => i.expires_at.as_ref().map(when) }
        })
        .collect();
    let keys = managed
        .keys
        .items
        .iter()
        .map(|k| {
            let limit = k.policy.max_budget_micros.map(|max| {
                let period = k.policy.budget_period.unwrap_or(BudgetPeriod::Total);
                format!("{} {}", money(max), period.as_str())
            });
            context! { key => key_row(k, None), limit }
        })
        .collect();
    let by_member = usage_rows(&managed.by_member, |group| {
        match (managed.by_member.labels.get(group), emails.get(group)) {
            (None, Some(email)) if !group.is_empty() => (*email).to_owned(),
            _ => member_label(&managed.by_member, group),
        }
    });
    let by_key = usage_rows(&managed.by_key, |group| key_label(&managed.by_key, group));
    let range = &managed.by_member.range;
    ManagedView {
        invitations,
        invitations_next: list_href(
            id,
            "invitations_cursor",
            managed.invitations.next_cursor.clone(),
            "invitations",
        ),
        keys,
        keys_next: list_href(id, "keys_cursor", managed.keys.next_cursor.clone(), "team-keys"),
        by_member,
        by_key,
        usage_range: Some(format!("{} to {}", range.from, range.to)),
        webhook: managed.webhook.as_ref().map(super::team_webhook_view::webhook_row),
        deliveries: managed.deliveries.iter().map(super::team_webhook_view::delivery_row).collect(),
    }
}

/// `GET /teams/{id}`: the team's policy and its budget this period, its members with what
/// each spent, and for its owners and admins the forms that change it, its invitations, team
/// keys and usage of the last 30 days. Someone who is not a member gets the API's 404.
pub(crate) async fn show(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<TeamId>,
    query: web::Query<TeamQuery>,
) -> HttpResponse {
    team_page(&state, &viewer, &id, &query, StatusCode::OK, Typed::default()).await
}

/// The answer to a team page form: `done`'s notice on the team page, or the page again with
/// the refusal.
pub(super) async fn answer(
    state: &AppState,
    viewer: &Viewer,
    id: &TeamId,
    done: Result<String, Typed>,
    anchor: &str,
) -> HttpResponse {
    match done {
        Ok(notice) => {
            viewer.keys().see_other_with_notice(&format!("/teams/{id}#{anchor}"), &notice)
        }
        Err(typed) => {
            let status =
                typed.error.as_ref().map_or(StatusCode::INTERNAL_SERVER_ERROR, |e| e.status);
            team_page(state, viewer, id, &TeamQuery::default(), status, typed).await
        }
    }
}

/// `POST /teams/{id}/policy`: changes the team's name and policy (its owners and admins; the
/// fields that differ from the team's). A refusal comes back with what was typed.
pub(crate) async fn update_policy(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<TeamId>,
    form: Form<PolicyForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let changed = async {
        let reader = viewer.authorized::<op::ReadAccount>().map_err(Shown::from)?;
        let team = state.teams.get_team(&reader, &id).await.map_err(Shown::from)?;
        let patch = form.patch(&team)?;
        let caller = viewer.authorized::<op::ManageAccount>().map_err(Shown::from)?;
        state.teams.update_team(&caller, &id, patch).await.map_err(Shown::from)
    }
    .await;
    let done = match changed {
        Ok(_) => Ok("The team's policy is saved; every node applies it now.".to_owned()),
        Err(error) if error.status == StatusCode::NOT_FOUND => {
            return viewer.failure(&error);
        }
        Err(error) => Err(Typed {
            form: "team-policy",
            policy: Some(form),
            error: Some(error),
            ..Typed::default()
        }),
    };
    answer(&state, &viewer, &id, done, "policy").await
}

/// `POST /teams/{id}/members`: adds the account with the e-mail address, or invites an address
/// that has none (it joins once an account has the address verified).
pub(crate) async fn add_member(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<TeamId>,
    form: Form<AddMemberForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let added = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => {
            let role = Some(form.role.trim().to_owned()).filter(|r| !r.is_empty());
            let request = NewMember { email: form.email.clone(), role };
            state.teams.add_team_member(&caller, &id, request).await
        }
        Err(e) => Err(e),
    };
    let done = match added {
        Ok(MemberAdded::Joined(member)) => {
            Ok(format!("{} joined the team as {}.", member.email, member.role.as_str()))
        }
        Ok(MemberAdded::Invited(invitation)) => Ok(format!(
            "No account has the address {} yet: it is invited, and joins the team as {} once an account has the address verified.",
            invitation.email,
            invitation.role.as_str()
        )),
        Err(e) => {
            let error = Shown::from(e);
            if error.status == StatusCode::NOT_FOUND {
                return viewer.failure(&error);
            }
            Err(Typed { form: "add-member", member: Some(form), error: Some(error), ..Typed::default() })
        }
    };
    answer(&state, &viewer, &id, done, "members").await
}

/// The role form of a member's row.
#[derive(Debug, Deserialize)]
pub(crate) struct RoleForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    role: String,
}

impl CsrfField for RoleForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /teams/{id}/members/{user_id}/role`: changes a member's role (owners and admins;
/// owners to make or unmake an owner; the last owner stays one).
pub(crate) async fn update_member_role(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, UserId)>,
    form: Form<RoleForm>,
) -> HttpResponse {
    let (id, user_id) = path.into_inner();
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let changed = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => {
            let patch = aigw_service::teams::MemberPatch {
                role: Some(form.role.trim().to_owned()),
                budget_usd: None,
            };
            state.teams.update_team_member(&caller, &id, &user_id, patch).await
        }
        Err(e) => Err(e),
    };
    let done = match changed {
        Ok(view) => Ok(format!(
            "{} is now {} of the team.",
            view.member.email,
            match view.member.role {
                TeamRole::Owner => "an owner",
                TeamRole::Admin => "an admin",
                TeamRole::Member => "a member",
            }
        )),
        Err(e) => Err(Typed::refused("members", Shown::from(e))),
    };
    answer(&state, &viewer, &id, done, "members").await
}

/// The budget form of a member's row: USD per the team's period; empty: the team's default.
#[derive(Debug, Deserialize)]
pub(crate) struct MemberBudgetForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    budget_usd: String,
}

impl CsrfField for MemberBudgetForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// `POST /teams/{id}/members/{user_id}/budget`: sets a member's own budget, or clears it
/// (empty) so that the team's default applies (owners and admins).
pub(crate) async fn update_member_budget(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, UserId)>,
    form: Form<MemberBudgetForm>,
) -> HttpResponse {
    let (id, user_id) = path.into_inner();
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let changed = async {
        let budget = optional::<f64>("budget_usd", &form.budget_usd)?;
        let caller = viewer.authorized::<op::ManageAccount>().map_err(Shown::from)?;
        let patch = aigw_service::teams::MemberPatch { role: None, budget_usd: Some(budget) };
        state.teams.update_team_member(&caller, &id, &user_id, patch).await.map_err(Shown::from)
    }
    .await;
    let done = match changed {
        Ok(view) => Ok(match view.member.budget_micros {
            Some(own) => format!("{}'s budget is now {}.", view.member.email, money(own)),
            None => format!("{} has the team's member budget again.", view.member.email),
        }),
        Err(shown) => Err(Typed::refused("members", shown)),
    };
    answer(&state, &viewer, &id, done, "members").await
}

/// `POST /teams/{id}/members/{user_id}/remove`: removes a member (owners and admins; owners
/// for an owner), or, with the viewer's own id, leaves the team. Their keys scoped to the
/// team stop on every node; the last owner cannot leave.
pub(crate) async fn remove_member(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, UserId)>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    let (id, user_id) = path.into_inner();
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let removed = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.teams.remove_team_member(&caller, &id, &user_id).await,
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) if user_id == viewer.user.id => {
            viewer.keys().see_other_with_notice("/teams", "You left the team.")
        }
        Ok(()) => {
            let notice = "The member is removed; their keys scoped to the team no longer work.";
            answer(&state, &viewer, &id, Ok(notice.to_owned()), "members").await
        }
        Err(e) => answer(&state, &viewer, &id, Err(Typed::refused("members", e.into())), "").await,
    }
}

/// `POST /teams/{id}/invitations/{invitation_id}/revoke`: revokes an open invitation (owners
/// and admins).
pub(crate) async fn revoke_invitation(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, String)>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    let (id, invitation_id) = path.into_inner();
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let revoked = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.teams.revoke_team_invitation(&caller, &id, &invitation_id).await,
        Err(e) => Err(e),
    };
    let done = match revoked {
        Ok(()) => Ok("The invitation is revoked.".to_owned()),
        Err(e) => Err(Typed::refused("invitations", e.into())),
    };
    answer(&state, &viewer, &id, done, "invitations").await
}

/// `POST /teams/{id}/invitations/{invitation_id}/resend`: e-mails an open invitation again
/// and opens it for another `auth.team_invitation_ttl_days` (owners and admins).
pub(crate) async fn resend_invitation(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, String)>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    let (id, invitation_id) = path.into_inner();
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let resent = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.teams.resend_team_invitation(&caller, &id, &invitation_id).await,
        Err(e) => Err(e),
    };
    let done = match resent {
        Ok(invitation) => Ok(format!("The invitation of {} is sent again.", invitation.email)),
        Err(e) => Err(Typed::refused("invitations", e.into())),
    };
    answer(&state, &viewer, &id, done, "invitations").await
}

/// `POST /teams/{id}/keys/{key_id}/revoke`: revokes a team key on every node (owners and
/// admins).
pub(crate) async fn revoke_key(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    path: web::Path<(TeamId, ApiKeyId)>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    let (id, key_id) = path.into_inner();
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let revoked = match viewer.authorized::<op::ChangeApiKey>() {
        Ok(caller) => state.teams.revoke_team_api_key(&caller, &id, &key_id).await,
        Err(e) => Err(e),
    };
    let done = match revoked {
        Ok(key) => Ok(format!("The team key {} is revoked: it no longer works.", key.name)),
        Err(e) => Err(Typed::refused("team-keys", e.into())),
    };
    answer(&state, &viewer, &id, done, "team-keys").await
}

/// `POST /teams/{id}/delete`: deletes the team (its owners, platform admins); every key scoped
/// to it is revoked on every node, its usage history stays.
pub(crate) async fn delete(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<TeamId>,
    form: Form<CsrfOnly>,
) -> HttpResponse {
    if let Err(refused) = form.checked(&req, &viewer) {
        return *refused;
    }
    let deleted = match viewer.authorized::<op::ManageAccount>() {
        Ok(caller) => state.teams.delete_team(&caller, &id).await,
        Err(e) => Err(e),
    };
    match deleted {
        Ok(()) => viewer.keys().see_other_with_notice(
            "/teams",
            "The team is deleted; every key scoped to it is revoked.",
        ),
        Err(e) => {
            answer(&state, &viewer, &id, Err(Typed::refused("delete-team", e.into())), "").await
        }
    }
}

// ---------------------------------------------------------------------------------------------
// A new team key.

/// The new-team-key form of team `team`, with `values` and `error`.
fn new_team_key_page(
    viewer: &Viewer,
    team: &TeamView,
    status: StatusCode,
    values: &NewKeyForm,
    error: Option<Shown>,
) -> HttpResponse {
    viewer.page(
        status,
        "key_new.html",
        context! {
            title => format!("New key of team {}", team.name),
            section => "teams",
            form => values,
            team => context! { id => team.id, name => team.name },
            action => format!("/teams/{}/keys/new", team.id),
            cancel => format!("/teams/{}#team-keys", team.id),
            error,
        },
    )
}

/// `GET /teams/{id}/keys/new`: the form of a team key (as a key of one's own, without the
/// team choice). Someone who is not a member gets the API's 404.
pub(crate) async fn new_key_form(
    state: web::Data<AppState>,
    viewer: Viewer,
    id: web::Path<TeamId>,
) -> HttpResponse {
    let team = match viewer.authorized::<op::ReadAccount>() {
        Ok(reader) => state.teams.get_team(&reader, &id).await,
        Err(e) => Err(e),
    };
    match team {
        Ok(team) => {
            new_team_key_page(&viewer, &team, StatusCode::OK, &NewKeyForm::defaults(), None)
        }
        Err(e) => viewer.failure(&Shown::from(e)),
    }
}

/// `POST /teams/{id}/keys/new`: creates a team key (owners and admins) and shows its secret,
/// once; a refusal comes back in the form with what was typed.
pub(crate) async fn create_key(
    state: web::Data<AppState>,
    req: HttpRequest,
    viewer: Viewer,
    id: web::Path<TeamId>,
    form: Form<NewKeyForm>,
) -> HttpResponse {
    let form = match form.checked(&req, &viewer) {
        Ok(form) => form,
        Err(refused) => return *refused,
    };
    let team = match viewer.authorized::<op::ReadAccount>() {
        Ok(reader) => state.teams.get_team(&reader, &id).await,
        Err(e) => Err(e),
    };
    let team = match team {
        Ok(team) => team,
        Err(e) => return viewer.failure(&Shown::from(e)),
    };
    let created = async {
        let request = form.request()?;
        let caller = viewer.authorized::<op::CreateApiKey>().map_err(Shown::from)?;
        state.teams.create_team_api_key(&caller, &id, request).await.map_err(Shown::from)
    }
    .await;
    match created {
        Ok(created) => viewer.page(
            StatusCode::CREATED,
            "key_secret.html",
            context! { title => "Team key created", section => "teams",
            key => key_row(&created.view, None), secret => created.key,
            team => context! { id => team.id, name => team.name } },
        ),
        Err(error) => new_team_key_page(&viewer, &team, error.status, &form, Some(error)),
    }
}
