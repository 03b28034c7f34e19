//! A team itself: create, list the caller's, read, change its name and policy, delete.

use super::{budget_micros, team_not_found, TeamAccess, TeamView};
use crate::api_keys::policy::{ApiKeyPatch, KeyPolicyRequest};
use crate::audit::Event;
use crate::auth::Authorized;
use crate::config::TeamCreation;
use crate::credential_cache;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest};
use crate::teams::Teams;
use aigw_domain::access::op;
use aigw_domain::AuditAction;
use aigw_domain::TeamId;
use aigw_domain::{BudgetPeriod, CounterSubject, CredentialChangeKind, FieldError, UserName};
use aigw_persistence::teams::{self, TeamChanges, TeamRow};
use aigw_persistence::{api_keys, budgets, transaction};

/// `POST /teams`: a new team, as parsed from JSON (still unvalidated).
#[derive(Debug, Clone, Default)]
pub struct NewTeam {
    /// Display name (required, 1 to 100 characters).
    pub name: String,
    /// Budget, period, rate limits, models and metadata, as a key's.
    pub policy: KeyPolicyRequest,
    /// Each member's default budget per period, USD.
    pub member_budget_usd: Option<f64>,
    /// Whether members must call the gateway with keys scoped to the team.
    pub require_scoped_keys: bool,
}

/// `PATCH /teams/{id}`: `None` leaves a field alone, `Some(None)` (JSON `null`) clears it.
/// `policy` uses only the policy fields of a key's patch.
#[derive(Debug, Clone, Default)]
pub struct TeamPatch {
    /// New name (cannot be cleared).
    pub name: Option<Option<String>>,
    /// Budget, period, rate limits, models and metadata.
    pub policy: ApiKeyPatch,
    /// Default member budget, USD.
    pub member_budget_usd: Option<Option<f64>>,
    /// Whether members must call the gateway with keys scoped to the team (cannot be
    /// cleared).
    pub require_scoped_keys: Option<Option<bool>>,
}

impl Teams {
    /// Creates a team whose first member and owner is the caller (an access token).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming the first invalid field;
    /// [`ServiceError::Forbidden`] (`required: admin`) when `auth.team_creation = "admins"`
    /// and the caller is not one; [`ServiceError::Unavailable`] when the database is down.
    pub async fn create_team(
        &self,
        principal: &Authorized<op::ManageAccount>,
        request: NewTeam,
    ) -> Result<TeamView, ServiceError> {
        if self.config.team_creation == TeamCreation::Admins
            && !self.is_platform_admin(principal).await?
        {
            return Err(ServiceError::Forbidden {
                required: "admin".to_owned(),
                current: "user".to_owned(),
            });
        }
        let name = UserName::parse(&request.name, "name")?.into_string();
        let policy = request.policy.parse()?;
        let member_budget_micros = request
            .member_budget_usd
            .map(|usd| budget_micros(usd, "member_budget_usd"))
            .transpose()?;
        let now = self.clock.now();
        let user_id = principal.user_id().to_owned();
        let row = TeamRow {
            id: TeamId::generate(),
            name,
            created_by: user_id.clone(),
            created_at: now,
            updated_at: now,
            policy,
            member_budget_micros,
            require_scoped_keys: request.require_scoped_keys,
        };
        let event =
            Event::new(AuditAction::TeamCreated, Some(&user_id), Some(principal.actor()), now)
                .target(&row.id)
                .details(serde_json::json!({"name": row.name}));
        let stored = row.clone();
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    teams::insert(conn, &stored, &stored.created_by)?;
                    event.insert(conn)
                })
            })
            .await?;
        tracing::info!(event = "team_created", team_id = %row.id, user_id = %principal.user_id(), "team created");
        Ok(TeamView::new(row, Some(aigw_domain::TeamRole::Owner)))
    }

    /// The teams the caller is a member of, newest first, a page at a time.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `limit` or `cursor`.
    pub async fn list_teams(
        &self,
        principal: &Authorized<op::ReadAccount>,
        page: &PageRequest,
    ) -> Result<Page<TeamView>, ServiceError> {
        let paging = page.parse()?;
        let user_id = principal.user_id().to_owned();
        let limit = paging.limit;
        let rows = self
            .db
            .run(move |conn| {
                Ok(teams::list_for_user(conn, &user_id, paging.before.as_deref(), limit + 1)?)
            })
            .await?;
        Ok(page_of(rows, limit, |(t, _)| &t.id, |(t, role)| TeamView::new(t.clone(), Some(*role))))
    }

    /// Team `id`, for its members and platform admins.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`) for anyone else, or no such team.
    pub async fn get_team(
        &self,
        principal: &Authorized<op::ReadAccount>,
        id: &TeamId,
    ) -> Result<TeamView, ServiceError> {
        let admin = self.is_platform_admin(principal).await?;
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let now = self.clock.now();
        let (row, access, spend) = self
            .db
            .run(move |conn| {
                let (row, access) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                let spend = super::usage::team_spend(
                    conn,
                    &row.id,
                    super::usage::period_start(&row.policy, now),
                )?;
                Ok((row, access, spend))
            })
            .await?;
        let mut view = TeamView::new(row, access.role);
        view.spend_micros = Some(spend);
        Ok(view)
    }

    /// Changes team `id`'s name or policy (its owners and admins). The change reaches every
    /// node (the limits of every key of the team) before this answers.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] naming the first invalid field; [`ServiceError::NotFound`]
    /// (`team`) for a non-member; [`ServiceError::Forbidden`] (`team_admin`) for a member.
    pub async fn update_team(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
        patch: TeamPatch,
    ) -> Result<TeamView, ServiceError> {
        let name = match patch.name {
            Some(None) => return Err(FieldError::new("name", "must not be null").into()),
            Some(Some(name)) => Some(UserName::parse(&name, "name")?.into_string()),
            None => None,
        };
        let for_key = ["name", "permissions", "expires_at"];
        let p = &patch.policy;
        for (field, set) in
            for_key.iter().zip([p.name.is_some(), p.permissions.is_some(), p.expires_at.is_some()])
        {
            if set {
                return Err(FieldError::new(*field, "is not a team field").into());
            }
        }
        let policy =
            patch.policy.parse(|_| Err(FieldError::new("expires_at", "is not a team field")))?;
        let member_budget_micros = match patch.member_budget_usd {
            Some(Some(usd)) => Some(Some(budget_micros(usd, "member_budget_usd")?)),
            Some(None) => Some(None),
            None => None,
        };
        let require_scoped_keys = match patch.require_scoped_keys {
            Some(None) => {
                return Err(FieldError::new("require_scoped_keys", "must not be null").into())
            }
            Some(Some(required)) => Some(required),
            None => None,
        };
        let changes = TeamChanges { name, policy, member_budget_micros, require_scoped_keys };
        let admin = self.is_platform_admin(principal).await?;
        let now = self.clock.now();
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let event =
            Event::new(AuditAction::TeamUpdated, Some(&user_id), Some(principal.actor()), now)
                .target(id)
                .details(serde_json::json!({"fields": changes.field_names()}));
        let (row, access, change) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !teams::lock(conn, &team_id)? {
                        return Err(team_not_found(&team_id));
                    }
                    let (_, access) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                    access.manage()?;
                    let row = teams::update(conn, &team_id, &changes, now)?
                        .ok_or_else(|| team_not_found(&team_id))?;
                    if changes.policy.budget_period.is_some() {
                        // A new period opens the team's and its members' counters anew from
                        // the ledger (the counter of the same first day counts the same days).
                        let period = row.policy.budget_period.unwrap_or(BudgetPeriod::Total);
                        let keep = crate::governance::budget::period_name(period, now);
                        let team_counter = CounterSubject::Team(&team_id).name();
                        budgets::forget_except(conn, &team_counter, &keep)?;
                        budgets::forget_members_except(conn, &team_id, &keep)?;
                    }
                    event.insert(conn)?;
                    let kind = CredentialChangeKind::TeamChanged;
                    let change = credential_cache::append(conn, kind, &team_id, now)?;
                    Ok((row, access, change))
                })
            })
            .await?;
        self.cache.publish(vec![change]).await;
        tracing::info!(event = "team_updated", team_id = %row.id, "team changed");
        Ok(TeamView::new(row, access.role))
    }

    /// Deletes team `id` (its owners, platform admins): every key scoped to it (team keys and
    /// members' keys) is revoked on every node before this answers; its usage history stays.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`) for a non-member; [`ServiceError::Forbidden`]
    /// (`team_owner`) for another member.
    pub async fn delete_team(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
    ) -> Result<(), ServiceError> {
        let admin = self.is_platform_admin(principal).await?;
        let now = self.clock.now();
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let event =
            Event::new(AuditAction::TeamDeleted, Some(&user_id), Some(principal.actor()), now)
                .target(id);
        let changes = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !teams::lock(conn, &team_id)? {
                        return Err(team_not_found(&team_id));
                    }
                    TeamAccess::of(conn, &team_id, &user_id, admin)?.1.own()?;
                    let revoked = api_keys::revoke_team_keys(conn, &team_id, now)?;
                    teams::delete(conn, &team_id, now)?;
                    event
                        .clone()
                        .details(serde_json::json!({"revoked_keys": revoked}))
                        .insert(conn)?;
                    // One feed row for the team, however many keys it had: every node then
                    // reads the team as deleted and refuses its keys as revoked.
                    let kind = CredentialChangeKind::TeamChanged;
                    Ok(vec![credential_cache::append(conn, kind, &team_id, now)?])
                })
            })
            .await?;
        self.cache.publish(changes).await;
        tracing::info!(event = "team_deleted", team_id = %id, "team deleted");
        Ok(())
    }
}
