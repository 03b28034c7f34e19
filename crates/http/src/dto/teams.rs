//! Bodies of `/api/v1/teams/…` (docs/teams.md).

use crate::dto::BudgetPeriodName;
use aigw_domain::time::format_timestamp;
use aigw_domain::usage::micros_to_usd;
use aigw_service::teams::{Member, MemberAdded, MemberView, TeamInvitationView, TeamView};
use aigw_service::{ApiKeyPatch, KeyPolicyRequest, Page};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use utoipa::ToSchema;

fn usd(micros: i64) -> f64 {
    micros_to_usd(u64::try_from(micros).unwrap_or(0))
}

/// A present field (`null` included) as `Some` (see the key PATCH body).
fn present<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// A team role.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[allow(non_camel_case_types, missing_docs)]
pub(crate) enum TeamRoleName {
    owner,
    admin,
    member,
}

/// `POST /teams` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateTeamRequest {
    /// Display name, 1 to 100 characters.
    #[schema(example = "data", min_length = 1, max_length = 100)]
    pub(crate) name: String,
    /// Model names or `*` globs the team's keys may call (each key's own list applies too).
    #[schema(min_items = 1, max_items = 100)]
    pub(crate) allowed_models: Option<Vec<String>>,
    /// The team's spend allowed per `budget_period`, USD (0 to 1e9).
    #[schema(example = 2000.0, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) max_budget_usd: Option<f64>,
    /// UTC calendar period of the team's and its members' budgets. Absent or null: `total`.
    #[schema(value_type = Option<BudgetPeriodName>)]
    pub(crate) budget_period: Option<String>,
    /// Requests per minute of all the team's keys together, across nodes (1 to 1e9).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) rpm_limit: Option<i64>,
    /// Tokens per minute of all the team's keys together, across nodes (1 to 1e9).
    #[schema(minimum = 1, maximum = 1_000_000_000)]
    pub(crate) tpm_limit: Option<i64>,
    /// String metadata: at most 16 entries, 4096 bytes in all.
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    /// Each member's budget per period unless overridden, USD (0 to 1e9).
    #[schema(example = 300.0, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) member_budget_usd: Option<f64>,
    /// What the team's and its members' budgets do with a call whose worst case does not fit:
    /// `refuse` or `clamp` (as a key's). Absent or null: `refuse`.
    #[schema(value_type = Option<crate::dto::BudgetModeName>)]
    pub(crate) budget_mode: Option<String>,
    /// Members must call the gateway with keys scoped to this team: their personal keys with
    /// `ai_gateway` answer 403 (`required: team_scoped_key`) on gateway calls, and new ones
    /// are refused (400 naming `team_id`). Default false.
    #[serde(default)]
    pub(crate) require_scoped_keys: bool,
}

impl CreateTeamRequest {
    /// The service's request.
    pub(crate) fn into_new(self) -> aigw_service::teams::NewTeam {
        aigw_service::teams::NewTeam {
            name: self.name,
            policy: KeyPolicyRequest {
                allowed_models: self.allowed_models,
                max_budget_usd: self.max_budget_usd,
                budget_period: self.budget_period,
                rpm_limit: self.rpm_limit,
                tpm_limit: self.tpm_limit,
                metadata: self.metadata,
                budget_mode: self.budget_mode,
            },
            member_budget_usd: self.member_budget_usd,
            require_scoped_keys: self.require_scoped_keys,
        }
    }
}

/// `PATCH /teams/{id}` body: absent fields are kept, `null` clears one (not `name`).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateTeamRequest {
    /// Display name.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 100)]
    pub(crate) name: Option<Option<String>>,
    /// As in create; null: every configured model.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<Vec<String>>, nullable, min_items = 1, max_items = 100)]
    pub(crate) allowed_models: Option<Option<Vec<String>>>,
    /// As in create; null: no team budget.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, nullable, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) max_budget_usd: Option<Option<f64>>,
    /// As in create; null: `total`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BudgetPeriodName>, nullable)]
    pub(crate) budget_period: Option<Option<String>>,
    /// As in create; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, nullable, minimum = 1, maximum = 1_000_000_000)]
    pub(crate) rpm_limit: Option<Option<i64>>,
    /// As in create; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, nullable, minimum = 1, maximum = 1_000_000_000)]
    pub(crate) tpm_limit: Option<Option<i64>>,
    /// As in create; null: none.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<BTreeMap<String, String>>, nullable)]
    pub(crate) metadata: Option<Option<BTreeMap<String, String>>>,
    /// As in create; null: no default member budget.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, nullable, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) member_budget_usd: Option<Option<f64>>,
    /// As in create; null: `refuse`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<crate::dto::BudgetModeName>, nullable)]
    pub(crate) budget_mode: Option<Option<String>>,
    /// As in create (not null).
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<bool>)]
    pub(crate) require_scoped_keys: Option<Option<bool>>,
}

impl From<UpdateTeamRequest> for aigw_service::teams::TeamPatch {
    fn from(r: UpdateTeamRequest) -> Self {
        Self {
            name: r.name,
            policy: ApiKeyPatch {
                allowed_models: r.allowed_models,
                max_budget_usd: r.max_budget_usd,
                budget_period: r.budget_period,
                rpm_limit: r.rpm_limit,
                tpm_limit: r.tpm_limit,
                metadata: r.metadata,
                budget_mode: r.budget_mode,
                ..ApiKeyPatch::default()
            },
            member_budget_usd: r.member_budget_usd,
            require_scoped_keys: r.require_scoped_keys,
        }
    }
}

/// A team.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TeamDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// Display name.
    pub(crate) name: String,
    /// The caller's role; null for a platform admin who is not a member.
    #[schema(value_type = Option<TeamRoleName>)]
    pub(crate) role: Option<String>,
    /// Who created it.
    pub(crate) created_by: String,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// RFC 3339 UTC.
    pub(crate) updated_at: String,
    /// Model globs the team's keys may call; null: every configured model.
    pub(crate) allowed_models: Option<Vec<String>>,
    /// The team's budget per period, USD; null: none.
    pub(crate) max_budget_usd: Option<f64>,
    /// The budgets' period; null: `total`.
    #[schema(value_type = Option<BudgetPeriodName>)]
    pub(crate) budget_period: Option<String>,
    /// Requests per minute of all its keys; null: none.
    pub(crate) rpm_limit: Option<i64>,
    /// Tokens per minute of all its keys; null: none.
    pub(crate) tpm_limit: Option<i64>,
    /// String metadata; null: none.
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    /// Each member's default budget per period, USD; null: none.
    pub(crate) member_budget_usd: Option<f64>,
    /// `refuse` or `clamp`.
    #[schema(value_type = crate::dto::BudgetModeName)]
    pub(crate) budget_mode: String,
    /// When the current period ends, RFC 3339 UTC; null for `total`.
    pub(crate) budget_reset_at: Option<String>,
    /// Whether members must call the gateway with keys scoped to the team.
    pub(crate) require_scoped_keys: bool,
    /// What the team spent in the current period (ever, for `total`), USD, from the ledger;
    /// present on `GET /teams/{id}` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) spend_usd: Option<f64>,
}

impl From<TeamView> for TeamDto {
    fn from(t: TeamView) -> Self {
        Self {
            id: t.id,
            name: t.name,
            role: t.role.map(|r| r.as_str().to_owned()),
            created_by: t.created_by,
            created_at: format_timestamp(t.created_at),
            updated_at: format_timestamp(t.updated_at),
            allowed_models: t.policy.allowed_models.map(|m| m.as_slice().to_vec()),
            max_budget_usd: t.policy.max_budget_micros.map(usd),
            budget_period: t.policy.budget_period.map(|p| p.as_str().to_owned()),
            rpm_limit: t.policy.rpm_limit,
            tpm_limit: t.policy.tpm_limit,
            metadata: t.policy.metadata.map(|m| m.entries().clone()),
            member_budget_usd: t.member_budget_micros.map(usd),
            budget_mode: t.policy.budget_mode.unwrap_or_default().as_str().to_owned(),
            budget_reset_at: t
                .policy
                .budget_period
                .and_then(|p| p.reset_at(aigw_domain::time::now()))
                .map(format_timestamp),
            require_scoped_keys: t.require_scoped_keys,
            spend_usd: t.spend_micros.map(usd),
        }
    }
}

/// `GET /teams` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TeamListData {
    /// The caller's teams, newest first.
    pub(crate) teams: Vec<TeamDto>,
    /// Cursor of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

impl From<Page<TeamView>> for TeamListData {
    fn from(p: Page<TeamView>) -> Self {
        Self { teams: p.items.into_iter().map(Into::into).collect(), next_cursor: p.next_cursor }
    }
}

/// `POST /teams/{id}/members` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct AddMemberRequest {
    /// The person's e-mail address: an account joins at once, an address without one is
    /// invited (by e-mail, when a mailer is configured) and joins once an account has the
    /// address verified.
    #[schema(example = "ada@example.com", format = Email)]
    pub(crate) email: String,
    /// Default `member`; `owner` only by an owner.
    #[schema(value_type = Option<TeamRoleName>)]
    pub(crate) role: Option<String>,
}

/// `PATCH /teams/{id}/members/{user_id}` body.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateMemberRequest {
    /// New role (making or unmaking an owner: owners only; the last owner stays one).
    #[schema(value_type = Option<TeamRoleName>)]
    pub(crate) role: Option<String>,
    /// The member's own budget per the team's period, USD; null: the team's
    /// `member_budget_usd`.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<f64>, nullable, minimum = 0, maximum = 1_000_000_000)]
    pub(crate) budget_usd: Option<Option<f64>>,
}

/// A member of a team.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MemberDto {
    /// The member's user id.
    pub(crate) user_id: String,
    /// Their e-mail address.
    pub(crate) email: String,
    /// Their display name.
    pub(crate) name: String,
    /// Their role.
    #[schema(value_type = TeamRoleName)]
    pub(crate) role: String,
    /// Their own budget per period, USD; null: the team's `member_budget_usd`.
    pub(crate) budget_usd: Option<f64>,
    /// When they joined, RFC 3339 UTC.
    pub(crate) joined_at: String,
    /// What their team-scoped keys cost in the team's current budget period, USD.
    pub(crate) spend_usd: f64,
    /// When the team's current budget period ends, RFC 3339 UTC; null for `total`.
    pub(crate) budget_reset_at: Option<String>,
}

impl From<Member> for MemberDto {
    fn from(m: Member) -> Self {
        Self {
            user_id: m.user_id,
            email: m.email,
            name: m.name,
            role: m.role.as_str().to_owned(),
            budget_usd: m.budget_micros.map(usd),
            joined_at: format_timestamp(m.created_at),
            spend_usd: 0.0,
            budget_reset_at: None,
        }
    }
}

impl From<MemberView> for MemberDto {
    fn from(m: MemberView) -> Self {
        Self {
            spend_usd: usd(m.spend_micros),
            budget_reset_at: m.budget_reset_at.map(format_timestamp),
            ..m.member.into()
        }
    }
}

/// `GET /teams/{id}/members` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MemberListData {
    /// The members.
    pub(crate) members: Vec<MemberDto>,
    /// Cursor of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

impl From<Page<MemberView>> for MemberListData {
    fn from(p: Page<MemberView>) -> Self {
        Self { members: p.items.into_iter().map(Into::into).collect(), next_cursor: p.next_cursor }
    }
}

/// Where a team invitation stands: `pending` (open, never e-mailed: no mailer), `sent` (open,
/// e-mailed), `accepted`, `expired` (re-send it to open it again), `revoked`.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
// The OpenAPI schema of `TeamInvitationDto::status`; never built.
#[allow(non_camel_case_types, missing_docs, dead_code)]
pub(crate) enum InvitationStatusName {
    pending,
    sent,
    accepted,
    expired,
    revoked,
}

/// An invitation to a team.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TeamInvitationDto {
    /// UUIDv7.
    pub(crate) id: String,
    /// The invited address.
    pub(crate) email: String,
    /// The role they will have.
    #[schema(value_type = TeamRoleName)]
    pub(crate) role: String,
    /// Who invited them.
    pub(crate) created_by: String,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// Where it stands.
    #[schema(value_type = InvitationStatusName)]
    pub(crate) status: String,
    /// When it ends unless re-sent, RFC 3339 UTC; null: never (made before invitations
    /// expired).
    pub(crate) expires_at: Option<String>,
    /// When it was last e-mailed, RFC 3339 UTC; null: never (no mailer).
    pub(crate) sent_at: Option<String>,
    /// Times it was e-mailed.
    pub(crate) sends: u32,
}

impl From<TeamInvitationView> for TeamInvitationDto {
    fn from(i: TeamInvitationView) -> Self {
        Self {
            id: i.id,
            email: i.email,
            role: i.role.as_str().to_owned(),
            created_by: i.created_by,
            created_at: format_timestamp(i.created_at),
            status: i.status.as_str().to_owned(),
            expires_at: i.expires_at.map(format_timestamp),
            sent_at: i.sent_at.map(format_timestamp),
            sends: i.sends,
        }
    }
}

/// `GET /teams/{id}/invitations` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TeamInvitationListData {
    /// Open invitations (expired ones included: they can be re-sent), newest first.
    pub(crate) invitations: Vec<TeamInvitationDto>,
    /// Cursor of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

impl From<Page<TeamInvitationView>> for TeamInvitationListData {
    fn from(p: Page<TeamInvitationView>) -> Self {
        Self {
            invitations: p.items.into_iter().map(Into::into).collect(),
            next_cursor: p.next_cursor,
        }
    }
}

/// `POST /teams/{id}/members` answer: the member (`status: joined`) or the invitation
/// (`status: invited`).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct MemberAddedData {
    /// `joined` or `invited`.
    #[schema(example = "joined")]
    pub(crate) status: String,
    /// The new member, when `joined`.
    pub(crate) member: Option<MemberDto>,
    /// The invitation, when `invited`.
    pub(crate) invitation: Option<TeamInvitationDto>,
}

impl From<MemberAdded> for MemberAddedData {
    fn from(added: MemberAdded) -> Self {
        match added {
            MemberAdded::Joined(m) => {
                Self { status: "joined".to_owned(), member: Some(m.into()), invitation: None }
            }
            MemberAdded::Invited(i) => {
                Self { status: "invited".to_owned(), member: None, invitation: Some(i.into()) }
            }
        }
    }
}

/// `GET /teams/{id}/api-keys` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TeamApiKeyListData {
    /// The team keys, newest first.
    pub(crate) api_keys: Vec<crate::dto::ApiKeyDto>,
    /// Cursor of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

/// `DELETE /teams/{id}…` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TeamDeletedData {
    /// What was deleted or removed.
    pub(crate) id: String,
    /// Always `true`.
    pub(crate) deleted: bool,
}
