//! Team memberships and the platform admin role from a provider's groups (docs/sso.md
//! "Groups and teams"): on every
//! single sign-on, the memberships the provider's rules grant are added (or their role
//! changed), and those a rule granted before and no longer grants are removed. Memberships
//! made by hand are left alone, and a team's last owner is never removed. Each change is
//! audited and published on the change feed (`team_changed`), so that every node sees it.

use crate::audit::Event;
use crate::credential_cache;
use crate::error::ServiceError;
use crate::sso_config::SsoProviderConfig;
use aigw_domain::{AuditAction, CredentialChangeKind, Role, TeamId, TeamRole, UserId};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::models::UserRow;
use aigw_persistence::sso;
use aigw_persistence::users;
use aigw_persistence::{teams, DbConnection};
use chrono::{DateTime, Utc};
use std::collections::BTreeMap;

/// Applies `provider`'s group rules and admin groups to `user`, signed in as `subject` (and
/// whether its admin groups made it an admin before), with `groups` (whose rules grant
/// `grants`, [`crate::accounts::SsoAccounts::rule_grants`]) at `now`: the change-feed rows to
/// publish.
///
/// # Errors
/// On database failure.
pub(crate) fn apply(
    conn: &mut DbConnection,
    provider: &SsoProviderConfig,
    user: &UserRow,
    (subject, granted_admin): (&str, bool),
    (groups, grants): (&[String], &[(TeamId, TeamRole)]),
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRow>, ServiceError> {
    let mut changes = sync(conn, provider, &user.id, grants, now)?;
    changes.extend(sync_admin(conn, provider, user, subject, granted_admin, groups, now)?);
    Ok(changes)
}

/// Gives `user_id` the memberships `provider`'s rules grant (`grants`, a role per team) at
/// `now`, inside the sign-in's transaction; the change-feed rows to publish.
///
/// # Errors
/// On database failure.
fn sync(
    conn: &mut DbConnection,
    provider: &SsoProviderConfig,
    user_id: &UserId,
    grants: &[(TeamId, TeamRole)],
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRow>, ServiceError> {
    if provider.team_rules.is_empty() {
        return Ok(Vec::new());
    }
    let wanted: BTreeMap<TeamId, TeamRole> = grants.iter().cloned().collect();
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

/// Applies `provider`'s admin groups to `user` (signed in as `subject`, whose identity says
/// whether these groups made it an admin before) with `groups` at `now`: the change-feed rows
/// to publish.
///
/// # Errors
/// On database failure.
fn sync_admin(
    conn: &mut DbConnection,
    provider: &SsoProviderConfig,
    user: &UserRow,
    subject: &str,
    granted_before: bool,
    groups: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<ChangeRow>, ServiceError> {
    let wants = provider.admin_groups.iter().any(|g| groups.contains(g));
    let (role, granted) = match (wants, user.role, granted_before) {
        // An admin already (by hand, or by these groups): as it is.
        (true, Role::Admin, granted) => (Role::Admin, granted),
        (true, _, _) => (Role::Admin, true),
        // Made an admin by these groups, and no longer in them: back to a user.
        (false, Role::Admin, true) => (Role::User, false),
        (false, role, _) => (role, false),
    };
    if granted != granted_before {
        sso::set_granted_admin(conn, &provider.id, subject, granted)?;
    }
    if role == user.role {
        return Ok(Vec::new());
    }
    users::update_access(conn, &user.id, role, user.disabled_at, now)?;
    let details = serde_json::json!({
        "from": user.role.as_str(), "to": role.as_str(), "by": "sso", "provider": provider.id,
    });
    Event::new(AuditAction::RoleChanged, Some(&user.id), None, now)
        .target(&user.id)
        .details(details)
        .insert(conn)?;
    let change = credential_cache::append(conn, CredentialChangeKind::UserChanged, &user.id, now)?;
    Ok(vec![change])
}
