//! Team memberships from a provider's groups (docs/sso.md "Groups and teams"): on every
//! single sign-on, the memberships the provider's rules grant are added (or their role
//! changed), and those a rule granted before and no longer grants are removed. Memberships
//! made by hand are left alone, and a team's last owner is never removed. Each change is
//! audited and published on the change feed (`team_changed`), so that every node sees it.

use crate::audit::Event;
use crate::credential_cache;
use crate::error::ServiceError;
use crate::sso_config::SsoProviderConfig;
use aigw_domain::{AuditAction, CredentialChangeKind, TeamId, TeamRole, UserId};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::sso;
use aigw_persistence::{teams, DbConnection};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// The memberships `provider`'s rules grant for `groups`: the highest role per team.
fn wanted(provider: &SsoProviderConfig, groups: &[String]) -> BTreeMap<TeamId, TeamRole> {
    let mut wanted: BTreeMap<TeamId, TeamRole> = BTreeMap::new();
    for rule in provider.team_rules.iter().filter(|r| groups.contains(&r.group)) {
        let role = rule.role();
        let entry = wanted.entry(TeamId::from(rule.team_id.as_str())).or_insert(role);
        *entry = (*entry).max(role);
    }
    wanted
}

/// Applies `provider`'s group rules to `user_id` with `groups` at `now`, inside the sign-in's
/// transaction; the change-feed rows to publish.
///
/// # Errors
/// On database failure.
pub(crate) fn sync(
    conn: &mut DbConnection,
    provider: &SsoProviderConfig,
    user_id: &UserId,
    groups: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRow>, ServiceError> {
    if provider.team_rules.is_empty() {
        return Ok(Vec::new());
    }
    let wanted = wanted(provider, groups);
    let granted: BTreeMap<TeamId, TeamRole> =
        sso::granted(conn, &provider.id, user_id)?.into_iter().collect();
    let mut changes = Vec::new();
    let event = |action: AuditAction, team: &TeamId, details: serde_json::Value| {
        Event::new(action, Some(user_id), None, now).target(team).details(details)
    };
    for (team, role) in &wanted {
        if !teams::lock(conn, team)? {
            tracing::warn!(provider = %provider.id, team_id = %team, "a group rule names no team");
            continue;
        }
        let current = teams::member(conn, team, user_id)?.map(|m| m.role);
        let by = serde_json::json!({"team_id": team, "role": role.as_str(), "by": "sso", "provider": provider.id});
        match (current, granted.contains_key(team)) {
            (None, _) => {
                teams::insert_member(conn, team, user_id, *role, now)?;
                event(AuditAction::MemberAdded, team, by).insert(conn)?;
            }
            // A rule's membership whose rules now grant another role.
            (Some(had), true) if had != *role => {
                teams::update_member(conn, team, user_id, Some(*role), None)?;
                event(AuditAction::MemberRoleChanged, team, by).insert(conn)?;
            }
            // Made by hand (left alone), or already as the rules want it.
            (Some(_), _) => continue,
        }
        sso::grant(conn, &provider.id, user_id, team, *role)?;
        changes.push(credential_cache::append(conn, CredentialChangeKind::TeamChanged, team, now)?);
    }
    for (team, role) in granted.iter().filter(|(team, _)| !wanted.contains_key(*team)) {
        sso::forget(conn, &provider.id, user_id, team)?;
        let Some(member) = teams::member(conn, team, user_id)? else { continue };
        if member.role == TeamRole::Owner && teams::count_owners(conn, team)? <= 1 {
            tracing::warn!(team_id = %team, "a group no longer grants the team's last owner: kept");
            continue;
        }
        teams::delete_member(conn, team, user_id)?;
        let details = serde_json::json!({"team_id": team, "role": role.as_str(), "by": "sso", "provider": provider.id});
        event(AuditAction::MemberRemoved, team, details).insert(conn)?;
        changes.push(credential_cache::append(conn, CredentialChangeKind::TeamChanged, team, now)?);
    }
    Ok(changes)
}
