//! A team's members and invitations: add by e-mail (an existing account joins at once; an
//! address without one is invited by e-mail and joins once an account has it verified,
//! [`crate::team_access::join_invited`]), change a role or a member's budget, remove, leave;
//! list and revoke open invitations. A team always keeps an owner.

use super::{budget_micros, team_not_found, MemberView, TeamAccess, TeamInvitationView};
use crate::audit::Event;
use crate::auth::{Authorized, Principal};
use crate::credential_cache;
use crate::email::MailKind;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest};
use crate::team_access::{join_invited, member_not_found};
use crate::teams::Teams;
use aigw_domain::access::op;
use aigw_domain::AuditAction;
use aigw_domain::{CredentialChangeKind, Email, FieldError, TeamRole};
use aigw_domain::{TeamId, TeamInvitationId, UserId};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::teams::{self, TeamInvitationRow};
use aigw_persistence::{transaction, users, DbConnection, PersistenceError};
use chrono::{DateTime, Utc};

/// `POST /teams/{id}/members`, as parsed from JSON (still unvalidated).
#[derive(Debug, Clone, Default)]
pub struct NewMember {
    /// The person's e-mail address.
    pub email: String,
    /// `owner`, `admin` or `member` (default).
    pub role: Option<String>,
}

/// `PATCH /teams/{id}/members/{user_id}`: `None` leaves a field alone; `budget_usd: null`
/// clears the member's own budget (the team's `member_budget_usd` applies again).
#[derive(Debug, Clone, Default)]
pub struct MemberPatch {
    /// New role.
    pub role: Option<String>,
    /// The member's own budget per the team's period, USD.
    pub budget_usd: Option<Option<f64>>,
}

/// What adding a member did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberAdded {
    /// The account joined.
    Joined(super::Member),
    /// No account has the address: it joins once an account has it verified.
    Invited(TeamInvitationView),
}

/// The refusal of a change that would leave the team without an owner.
fn last_owner(field: &str) -> ServiceError {
    FieldError::new(field, "a team keeps at least one owner; make another member owner first")
        .into()
}

/// Appends the team's `team_changed` feed row (its keys' limits and memberships are read
/// again on every node).
fn team_changed(
    conn: &mut DbConnection,
    team_id: &str,
    now: DateTime<Utc>,
) -> Result<ChangeRow, ServiceError> {
    credential_cache::append(conn, CredentialChangeKind::TeamChanged, team_id, now)
}

/// What a new invitation is: its address, role and maker, when it ends, and whether it is
/// e-mailed (a mailer is configured).
struct NewInvitation<'a> {
    email: &'a str,
    role: TeamRole,
    by: &'a UserId,
    expires_at: DateTime<Utc>,
    sent: bool,
}

/// Inserts an open invitation to team `team_id` (see [`NewInvitation`]).
///
/// # Errors
/// [`ServiceError::Invalid`] on `email` when the address is already invited to the team.
fn invite(
    conn: &mut DbConnection,
    team_id: &TeamId,
    new: &NewInvitation<'_>,
    now: DateTime<Utc>,
) -> Result<TeamInvitationRow, ServiceError> {
    let invitation = TeamInvitationRow {
        id: aigw_domain::TeamInvitationId::generate(),
        team_id: team_id.to_owned(),
        email: new.email.to_owned(),
        role: new.role,
        created_by: new.by.to_owned(),
        created_at: now,
        accepted_at: None,
        revoked_at: None,
        expires_at: Some(new.expires_at),
        sent_at: new.sent.then_some(now),
        sends: i32::from(new.sent),
    };
    match teams::insert_invitation(conn, &invitation) {
        Err(PersistenceError::Conflict) => {
            Err(FieldError::new("email", "is already invited").into())
        }
        other => Ok(other.map(|()| invitation)?),
    }
}

/// The invitation e-mail's values but its link: the team's name, the role, and who invited
/// (`by`, as "name (address)").
///
/// # Errors
/// On database failure.
fn invitation_mail(
    conn: &mut DbConnection,
    team: &str,
    role: TeamRole,
    by: &UserId,
) -> Result<serde_json::Value, ServiceError> {
    let inviter = users::find_by_id(conn, by)?
        .map_or_else(|| "A team owner".to_owned(), |u| format!("{} ({})", u.name, u.email));
    Ok(serde_json::json!({"team": team, "role": role.as_str(), "inviter": inviter}))
}

impl Teams {
    /// Adds the account with `email` to team `id` with `role` (default `member`), or, when no
    /// account has that address, invites it: the invitation is e-mailed (when a mailer is
    /// configured), and the address joins once an account has it verified, whatever
    /// `auth.email_verification` says: whoever registers with the address first does not join
    /// the team, and its budget, without showing the address is theirs.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` or `role`, or on `email` when already a member or
    /// invited; [`ServiceError::NotFound`] (`team`) for a non-member;
    /// [`ServiceError::Forbidden`] (`team_admin`, or `team_owner` to add an owner).
    pub async fn add_team_member(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
        request: NewMember,
    ) -> Result<MemberAdded, ServiceError> {
        let email = Email::parse(&request.email)?.as_str().to_owned();
        let role = match request.role.as_deref() {
            Some(raw) => TeamRole::parse(raw, "role")?,
            None => TeamRole::Member,
        };
        let admin = self.is_platform_admin(principal).await?;
        let now = self.clock.now();
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let actor = principal.actor().to_owned();
        let invitee = email.clone();
        let (sent, expires_at) = (self.email.can_send(), self.invitation_ends(now));
        let (added, change, mail) = self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !teams::lock(conn, &team_id)? {
                        return Err(team_not_found(&team_id));
                    }
                    let (team, access) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                    if role == TeamRole::Owner { access.own()? } else { access.manage()? };
                    let details = serde_json::json!({"team_id": team_id, "role": role.as_str()});
                    let Some(user) = users::find_by_email(conn, &email)? else {
                        let new = NewInvitation { email: &email, role, by: &user_id, expires_at, sent };
                        let invitation = invite(conn, &team_id, &new, now)?;
                        Event::new(AuditAction::TeamInvitationCreated, None, Some(&actor), now)
                            .target(&team_id)
                            .details(serde_json::json!({
                                "team_id": team_id, "role": role.as_str(), "invitation_id": invitation.id,
                            }))
                            .insert(conn)?;
                        let mail = invitation_mail(conn, &team.name, role, &user_id)?;
                        let view = TeamInvitationView::at(invitation, now);
                        return Ok((MemberAdded::Invited(view), None, Some(mail)));
                    };
                    match teams::insert_member(conn, &team_id, &user.id, role, now) {
                        Err(PersistenceError::Conflict) => {
                            return Err(FieldError::new("email", "is already a member").into())
                        }
                        other => other?,
                    }
                    Event::new(AuditAction::MemberAdded, Some(&user.id), Some(&actor), now)
                        .target(&team_id)
                        .details(details)
                        .insert(conn)?;
                    let member = teams::member(conn, &team_id, &user.id)?
                        .ok_or_else(|| member_not_found(&user.id))?;
                    let change = team_changed(conn, &team_id, now)?;
                    Ok((MemberAdded::Joined(member.into()), Some(change), None))
                })
            })
            .await?;
        if let Some(change) = change {
            self.cache.publish(vec![change]).await;
        }
        if let Some(mut values) = mail {
            values["link"] = serde_json::json!(self.email.page_link("/register"));
            self.email.send_mail(MailKind::TeamInvitation, &invitee, values);
        }
        Ok(added)
    }

    /// The members of team `id`, a page at a time (by user id, newest account first).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`) for a non-member; [`ServiceError::Invalid`] on
    /// `limit` or `cursor`.
    pub async fn list_team_members(
        &self,
        principal: &Authorized<op::ReadAccount>,
        id: &TeamId,
        page: &PageRequest,
    ) -> Result<Page<MemberView>, ServiceError> {
        let paging = page.parse()?;
        let admin = self.is_platform_admin(principal).await?;
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let limit = paging.limit;
        let now = self.clock.now();
        let rows = self
            .db
            .run(move |conn| {
                let (team, _) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                let before = paging.before.as_deref();
                let members = teams::list_members(conn, &team_id, before, limit + 1)?;
                let spend = super::usage::member_spend(
                    conn,
                    &team_id,
                    super::usage::period_start(&team.policy, now),
                    now.date_naive(),
                )?;
                Ok(super::usage::with_spend(members, &spend, &team.policy, now))
            })
            .await?;
        Ok(page_of(rows, limit, |m| &m.member.user_id, Clone::clone))
    }

    /// Changes member `member_id`'s role or own budget in team `id`.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `role` or `budget_usd`, or on `role` when it would leave
    /// no owner; [`ServiceError::NotFound`] (`team`, `team_member`);
    /// [`ServiceError::Forbidden`] (`team_admin`, or `team_owner` to make or unmake an owner).
    pub async fn update_team_member(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
        member_id: &UserId,
        patch: MemberPatch,
    ) -> Result<MemberView, ServiceError> {
        let role = patch.role.as_deref().map(|r| TeamRole::parse(r, "role")).transpose()?;
        let budget = match patch.budget_usd {
            Some(Some(usd)) => Some(Some(budget_micros(usd, "budget_usd")?)),
            Some(None) => Some(None),
            None => None,
        };
        let admin = self.is_platform_admin(principal).await?;
        let now = self.clock.now();
        let (team_id, user_id, target) =
            (id.to_owned(), principal.user_id().to_owned(), member_id.to_owned());
        let actor = principal.actor().to_owned();
        let (member, change) = self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !teams::lock(conn, &team_id)? {
                        return Err(team_not_found(&team_id));
                    }
                    let (team, access) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                    let access = access.manage()?;
                    let current = teams::member(conn, &team_id, &target)?
                        .ok_or_else(|| member_not_found(&target))?;
                    let owner_involved =
                        current.role == TeamRole::Owner || role == Some(TeamRole::Owner);
                    if owner_involved && role.is_some_and(|r| r != current.role) {
                        access.own()?;
                        if current.role == TeamRole::Owner && teams::count_owners(conn, &team_id)? <= 1
                        {
                            return Err(last_owner("role"));
                        }
                    }
                    teams::update_member(conn, &team_id, &target, role, budget)?;
                    if let Some(role) = role.filter(|r| *r != current.role) {
                        Event::new(AuditAction::MemberRoleChanged, Some(&target), Some(&actor), now)
                            .target(&team_id)
                            .details(serde_json::json!({
                                "team_id": team_id, "from": current.role.as_str(), "to": role.as_str(),
                            }))
                            .insert(conn)?;
                    }
                    if budget.is_some() {
                        Event::new(AuditAction::MemberBudgetChanged, Some(&target), Some(&actor), now)
                            .target(&team_id)
                            .details(serde_json::json!({"team_id": team_id, "budget_micros": budget.flatten()}))
                            .insert(conn)?;
                    }
                    let member = teams::member(conn, &team_id, &target)?
                        .ok_or_else(|| member_not_found(&target))?;
                    let spend = super::usage::member_spend(
                        conn,
                        &team_id,
                        super::usage::period_start(&team.policy, now),
                        now.date_naive(),
                    )?;
                    let view =
                        super::usage::with_spend(vec![member], &spend, &team.policy, now).pop();
                    let view = view.ok_or_else(|| member_not_found(&target))?;
                    Ok((view, team_changed(conn, &team_id, now)?))
                })
            })
            .await?;
        self.cache.publish(vec![change]).await;
        Ok(member)
    }

    /// Removes member `member_id` from team `id` (the caller themselves: leaving). Their keys
    /// scoped to the team stop on every node before this answers; team keys stay.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `user_id` when it is the last owner;
    /// [`ServiceError::NotFound`] (`team`, `team_member`); [`ServiceError::Forbidden`]
    /// (`team_admin`, or `team_owner` to remove an owner) to remove someone else.
    pub async fn remove_team_member(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
        member_id: &UserId,
    ) -> Result<(), ServiceError> {
        let admin = self.is_platform_admin(principal).await?;
        self.remove_member(principal, id, member_id, admin).await
    }

    async fn remove_member(
        &self,
        principal: &Principal,
        id: &TeamId,
        member_id: &UserId,
        admin: bool,
    ) -> Result<(), ServiceError> {
        let now = self.clock.now();
        let (team_id, user_id, target) =
            (id.to_owned(), principal.user_id().to_owned(), member_id.to_owned());
        let actor = principal.actor().to_owned();
        let change = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !teams::lock(conn, &team_id)? {
                        return Err(team_not_found(&team_id));
                    }
                    let (_, access) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                    let current = teams::member(conn, &team_id, &target)?
                        .ok_or_else(|| member_not_found(&target))?;
                    if target != user_id {
                        let access = access.manage()?;
                        if current.role == TeamRole::Owner {
                            access.own()?;
                        }
                    }
                    if current.role == TeamRole::Owner && teams::count_owners(conn, &team_id)? <= 1
                    {
                        return Err(last_owner("user_id"));
                    }
                    teams::delete_member(conn, &team_id, &target)?;
                    let action = if target == user_id {
                        AuditAction::MemberLeft
                    } else {
                        AuditAction::MemberRemoved
                    };
                    Event::new(action, Some(&target), Some(&actor), now)
                        .target(&team_id)
                        .details(
                            serde_json::json!({"team_id": team_id, "role": current.role.as_str()}),
                        )
                        .insert(conn)?;
                    team_changed(conn, &team_id, now)
                })
            })
            .await?;
        self.cache.publish(vec![change]).await;
        tracing::info!(event = "member_removed", team_id = %id, user_id = %member_id, "team member removed");
        Ok(())
    }

    /// When an invitation made or re-sent at `now` ends (`auth.team_invitation_ttl_days`).
    fn invitation_ends(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        let days = i64::from(self.config.team_invitation_ttl_days.max(1));
        now + chrono::Duration::days(days)
    }

    /// E-mails open invitation `invitation_id` of team `id` again (when a mailer is
    /// configured) and opens it for `auth.team_invitation_ttl_days` more from now, expired or
    /// not; answers it as it is now. Audited as `team_invitation_resent`. When an account has
    /// verified the address meanwhile (while the invitation had expired), it joins now instead
    /// of being e-mailed.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`, or `team_invitation` when it is not an open one of
    /// the team); [`ServiceError::Forbidden`] (`team_admin`).
    pub async fn resend_team_invitation(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
        invitation_id: &str,
    ) -> Result<TeamInvitationView, ServiceError> {
        let admin = self.is_platform_admin(principal).await?;
        let now = self.clock.now();
        let (sent, expires_at) = (self.email.can_send(), self.invitation_ends(now));
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let (actor, target) = (principal.actor().to_owned(), TeamInvitationId::from(invitation_id));
        let (invitation, mail, changes) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !teams::lock(conn, &team_id)? {
                        return Err(team_not_found(&team_id));
                    }
                    let (team, access) = TeamAccess::of(conn, &team_id, &user_id, admin)?;
                    access.manage()?;
                    let not_found = || ServiceError::NotFound {
                        resource: "team_invitation",
                        id: target.chars().take(64).collect(),
                    };
                    let email = teams::invitation(conn, &target)?.ok_or_else(not_found)?.email;
                    // An account that verified the address meanwhile joins instead of a mail.
                    let verified = users::find_by_email(conn, &email)?
                        .filter(|user| user.email_verified_at.is_some());
                    let mailed = sent && verified.is_none();
                    let invitation =
                        teams::resend_invitation(conn, &team_id, &target, now, expires_at, mailed)?
                            .ok_or_else(not_found)?;
                    Event::new(AuditAction::TeamInvitationResent, None, Some(&actor), now)
                        .target(&team_id)
                        .details(serde_json::json!({
                            "team_id": team_id, "invitation_id": invitation.id, "sent": mailed,
                        }))
                        .insert(conn)?;
                    if let Some(user) = verified {
                        let changes = join_invited(conn, &user, now)?;
                        let taken = teams::invitation(conn, &invitation.id)?.unwrap_or(invitation);
                        return Ok((taken, None, changes));
                    }
                    let mail = invitation_mail(conn, &team.name, invitation.role, &user_id)?;
                    Ok((invitation, Some(mail), Vec::new()))
                })
            })
            .await?;
        self.cache.publish(changes).await;
        if let Some(mut values) = mail {
            values["link"] = serde_json::json!(self.email.page_link("/register"));
            self.email.send_mail(MailKind::TeamInvitation, &invitation.email, values);
        }
        Ok(TeamInvitationView::at(invitation, now))
    }

    /// The open invitations of team `id`, newest first, a page at a time (its owners and
    /// admins).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`); [`ServiceError::Forbidden`] (`team_admin`).
    pub async fn list_team_invitations(
        &self,
        principal: &Authorized<op::ReadAccount>,
        id: &TeamId,
        page: &PageRequest,
    ) -> Result<Page<TeamInvitationView>, ServiceError> {
        let paging = page.parse()?;
        let admin = self.is_platform_admin(principal).await?;
        let (team_id, user_id) = (id.to_owned(), principal.user_id().to_owned());
        let limit = paging.limit;
        let rows = self
            .db
            .run(move |conn| {
                TeamAccess::of(conn, &team_id, &user_id, admin)?.1.manage()?;
                let before = paging.before.as_deref();
                Ok(teams::list_invitations(conn, Some(&team_id), before, limit + 1)?)
            })
            .await?;
        let now = self.clock.now();
        Ok(page_of(rows, limit, |i| &i.id, |i| TeamInvitationView::at(i.clone(), now)))
    }

    /// Revokes open invitation `invitation_id` of team `id`.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`, `team_invitation`); [`ServiceError::Forbidden`]
    /// (`team_admin`).
    pub async fn revoke_team_invitation(
        &self,
        principal: &Authorized<op::ManageAccount>,
        id: &TeamId,
        invitation_id: &str,
    ) -> Result<(), ServiceError> {
        let admin = self.is_platform_admin(principal).await?;
        let now = self.clock.now();
        let (team_id, user_id, target) =
            (id.to_owned(), principal.user_id().to_owned(), TeamInvitationId::from(invitation_id));
        let actor = principal.actor().to_owned();
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    TeamAccess::of(conn, &team_id, &user_id, admin)?.1.manage()?;
                    if teams::revoke_invitation(conn, Some(&team_id), &target, now)?.is_none() {
                        return Err(ServiceError::NotFound {
                            resource: "team_invitation",
                            id: target.chars().take(64).collect(),
                        });
                    }
                    Event::new(AuditAction::TeamInvitationRevoked, None, Some(&actor), now)
                        .target(&team_id)
                        .details(serde_json::json!({"team_id": team_id, "invitation_id": target}))
                        .insert(conn)
                })
            })
            .await
    }
}
