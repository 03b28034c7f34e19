//! The teams a provider's group rules grant for a person's groups (docs/sso.md "Groups and
//! teams"): a rule names its team by id, or by name. A name stands for the team settled the
//! first time the rule applied (`sso_rule_teams`): the one team of that name then, or the team
//! the rule made when none had it and the provider's `create_missing_teams` is on. Settled
//! once per provider and name, so two nodes signing people in at once agree on one team.

use crate::accounts::SsoAccounts;
use crate::audit::Event;
use crate::error::ServiceError;
use crate::sso_config::{SsoProviderConfig, SsoTeamRule};
use aigw_domain::{AuditAction, TeamId, TeamRole, UserId};
use aigw_persistence::models::ApiKeyPolicy;
use aigw_persistence::teams::{self, TeamRow};
use aigw_persistence::{sso, transaction, PersistenceError};
use chrono::{DateTime, Utc};

/// What the database says of a team name, before anything is settled or made.
enum Named {
    /// Settled before, and the team is still there.
    Settled(TeamId),
    /// Not settled; exactly one team has the name.
    One(TeamId),
    /// Not settled; no team has the name.
    None,
    /// Not settled; several teams have it.
    Several,
}

/// Why settling a team name failed.
enum Settling {
    /// A concurrent sign-in settled it first.
    Taken,
    /// Anything else.
    Failed(ServiceError),
}

impl From<PersistenceError> for Settling {
    fn from(e: PersistenceError) -> Self {
        match e {
            PersistenceError::Conflict => Self::Taken,
            other => Self::Failed(other.into()),
        }
    }
}

impl SsoAccounts {
    /// The memberships `provider`'s rules grant for `groups`, by team (the highest role of
    /// the rules naming it). `user_id` is recorded as the maker of a team a rule makes.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub(crate) async fn rule_grants(
        &self,
        provider: &SsoProviderConfig,
        groups: &[String],
        user_id: &UserId,
        now: DateTime<Utc>,
    ) -> Result<Vec<(TeamId, TeamRole)>, ServiceError> {
        let mut grants: Vec<(TeamId, TeamRole)> = Vec::new();
        for rule in provider.team_rules.iter().filter(|r| groups.contains(&r.group)) {
            let team = if rule.team_id.is_empty() {
                match self.rule_team(provider, rule, user_id, now).await? {
                    Some(team) => team,
                    None => continue,
                }
            } else {
                TeamId::from(rule.team_id.as_str())
            };
            let role = rule.role();
            match grants.iter_mut().find(|(t, _)| *t == team) {
                Some((_, had)) => *had = (*had).max(role),
                None => grants.push((team, role)),
            }
        }
        Ok(grants)
    }

    /// The team `rule` (naming its team by name) stands for: settled, found or made; `None`
    /// (with a warning in the log) when several teams have the name, or none has it and
    /// teams are not made.
    async fn rule_team(
        &self,
        provider: &SsoProviderConfig,
        rule: &SsoTeamRule,
        user_id: &UserId,
        now: DateTime<Utc>,
    ) -> Result<Option<TeamId>, ServiceError> {
        let name = rule.team.trim().to_owned();
        let (id, looked_up) = (provider.id.clone(), name.clone());
        let named = self.accounts.db.run(move |conn| Ok(look_up(conn, &id, &looked_up)?)).await?;
        let creating = matches!(named, Named::None);
        let team = match named {
            Named::Settled(team) => return Ok(Some(team)),
            Named::One(team) => team,
            Named::Several => {
                tracing::warn!(provider = %provider.id, team = %name, "a group rule names several teams: it grants nothing");
                return Ok(None);
            }
            Named::None if !provider.create_missing_teams => {
                tracing::warn!(provider = %provider.id, team = %name, "a group rule names no team (create_missing_teams is off): it grants nothing");
                return Ok(None);
            }
            Named::None => TeamId::generate(),
        };
        let made = creating.then(|| TeamRow {
            id: team.clone(),
            name: name.clone(),
            created_by: user_id.clone(),
            created_at: now,
            updated_at: now,
            policy: ApiKeyPolicy::default(),
            member_budget_micros: None,
            require_scoped_keys: false,
        });
        let event = Event::new(AuditAction::TeamCreated, Some(user_id), None, now)
            .target(&team)
            .details(serde_json::json!({
                "name": name, "by": "sso", "provider": provider.id, "group": rule.group,
            }));
        let made_id = made.as_ref().map(|row| row.id.clone());
        let (id, settled_name) = (provider.id.clone(), name.clone());
        let settled = self
            .accounts
            .db
            .run(move |conn| {
                let settled = transaction(conn, |conn| {
                    // First statement: a write (the claim on the name).
                    sso::settle_rule_team(conn, &id, &settled_name, &team)?;
                    if let Some(row) = &made {
                        teams::insert_without_members(conn, row)?;
                        event.insert(conn).map_err(Settling::Failed)?;
                    }
                    Ok(team.clone())
                });
                match settled {
                    Ok(team) => Ok(Some(team)),
                    // Settled by a concurrent sign-in: its team.
                    Err(Settling::Taken) => Ok(sso::rule_team(conn, &id, &settled_name)?),
                    Err(Settling::Failed(e)) => Err(e),
                }
            })
            .await?;
        if made_id.is_some() && settled == made_id {
            tracing::info!(provider = %provider.id, team = %name, "a group rule made its team");
        }
        Ok(settled)
    }
}

/// What the database says of team name `name` for `provider`'s rules. A settled team that
/// was deleted since is forgotten, and the name looked up again.
fn look_up(
    conn: &mut aigw_persistence::DbConnection,
    provider: &str,
    name: &str,
) -> Result<Named, PersistenceError> {
    if let Some(team) = sso::rule_team(conn, provider, name)? {
        if teams::find(conn, &team)?.is_some() {
            return Ok(Named::Settled(team));
        }
        sso::forget_rule_team(conn, provider, name)?;
    }
    let mut found = teams::ids_named(conn, name)?;
    Ok(match found.len() {
        0 => Named::None,
        1 => Named::One(found.remove(0)),
        _ => Named::Several,
    })
}
