//! Team keys: API keys that belong to a team rather than to a person. Its owners and admins
//! create, list, change, rotate, revoke and delete them; a team key records who created it
//! (`user_id`) and keeps working when that person leaves the team.

use super::TeamAccess;
use crate::api_keys::manage::{KeyScope, NewApiKey, Owner};
use crate::api_keys::policy::ApiKeyPatch;
use crate::auth::{Authorized, Principal};
use crate::email::MailKind;
use crate::error::ServiceError;
use crate::paging::{page_of, Page, PageRequest};
use crate::teams::Teams;
use crate::views::{ApiKeyView, CreatedApiKey};
use aigw_domain::access::op;
use aigw_domain::{ApiKeyId, TeamId, UserId};
use aigw_persistence::{api_keys, teams, users};

impl Teams {
    /// Requires `principal` to manage team `team_id` (its owners and admins, platform admins).
    async fn manages_team(
        &self,
        principal: &Principal,
        team_id: &TeamId,
    ) -> Result<(), ServiceError> {
        let admin = self.is_platform_admin(principal).await?;
        let (team_id, user_id) = (team_id.to_owned(), principal.user_id().to_owned());
        self.db
            .run(move |conn| {
                TeamAccess::of(conn, &team_id, &user_id, admin)?.1.manage().map(|_| ())
            })
            .await
    }

    /// Creates a team key of team `id` (its owners and admins; an access token). Its calls
    /// count against the key and the team; `request.team_id` is ignored.
    ///
    /// # Errors
    /// As [`Teams::create_api_key`]; [`ServiceError::NotFound`] (`team`) for a
    /// non-member; [`ServiceError::Forbidden`] (`team_admin`) for a plain member.
    pub async fn create_team_api_key(
        &self,
        principal: &Authorized<op::CreateApiKey>,
        id: &TeamId,
        request: NewApiKey,
    ) -> Result<CreatedApiKey, ServiceError> {
        self.keys.create_key(principal, request, KeyScope::Team(id.to_owned()), None).await
    }

    /// Creates a key for member `member_id` of team `id`, scoped to the team (its owners and
    /// admins, platform admins; an access token): the key is the member's, its calls count
    /// against the key, the member's budget in the team, the team and the member's own
    /// budget; its secret is in this answer only; the member is told by e-mail (when a mailer
    /// is configured). `request.team_id` is ignored.
    ///
    /// # Errors
    /// As [`Teams::create_team_api_key`]; [`ServiceError::NotFound`] (`team_member`) when
    /// `member_id` is not a member.
    pub async fn create_member_api_key(
        &self,
        principal: &Authorized<op::CreateApiKey>,
        id: &TeamId,
        member_id: &UserId,
        request: NewApiKey,
    ) -> Result<CreatedApiKey, ServiceError> {
        let platform_admin = self.is_platform_admin(principal).await?;
        let scope = KeyScope::ForMember {
            team: id.to_owned(),
            member: member_id.to_owned(),
            platform_admin,
        };
        let created = self.keys.create_key(principal, request, scope, None).await?;
        let (team_id, member, by) =
            (id.to_owned(), member_id.to_owned(), principal.user_id().to_owned());
        let notice = self
            .db
            .run(move |conn| {
                let team = teams::find(conn, &team_id)?.map(|t| t.name).unwrap_or_default();
                let member = users::find_by_id(conn, &member)?;
                let maker = users::find_by_id(conn, &by)?.map_or_else(
                    || "A team owner".to_owned(),
                    |u| format!("{} ({})", u.name, u.email),
                );
                Ok::<_, ServiceError>(member.map(|m| (m, team, maker)))
            })
            .await;
        // The key exists either way: a failed read only loses the notice.
        if let Ok(Some((member, team, maker))) = notice {
            let values = serde_json::json!({
                "name": member.name, "team": team, "inviter": maker,
                "key_name": created.view.name, "key_prefix": created.view.key_prefix,
                "link": self.email.page_link("/keys"),
            });
            self.email.send_mail(MailKind::MemberKeyCreated, &member.email, values);
        }
        Ok(created)
    }

    /// The team keys of team `id`, newest first, a page at a time (its owners and admins).
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`); [`ServiceError::Forbidden`] (`team_admin`);
    /// [`ServiceError::Invalid`] on `limit` or `cursor`.
    pub async fn list_team_api_keys(
        &self,
        principal: &Authorized<op::ReadAccount>,
        id: &TeamId,
        page: &PageRequest,
    ) -> Result<Page<ApiKeyView>, ServiceError> {
        let paging = page.parse()?;
        self.manages_team(principal, id).await?;
        let team_id = id.to_owned();
        let limit = paging.limit;
        let rows = self
            .db
            .run(move |conn| {
                let before = paging.before.as_deref();
                Ok(api_keys::page_for(conn, api_keys::KeyOwner::Team(&team_id), before, limit + 1)?)
            })
            .await?;
        Ok(page_of(rows, limit, |r| &r.id, |r| self.keys.view_of(r)))
    }

    /// Changes team key `key_id` of team `id` (`PATCH`), as [`Teams::update_api_key`].
    ///
    /// # Errors
    /// As [`Teams::update_api_key`]; [`ServiceError::Forbidden`] (`team_admin`).
    pub async fn update_team_api_key(
        &self,
        principal: &Authorized<op::UpdateApiKey>,
        id: &TeamId,
        key_id: &ApiKeyId,
        patch: ApiKeyPatch,
    ) -> Result<ApiKeyView, ServiceError> {
        self.manages_team(principal, id).await?;
        self.keys.update_api_key_of(Owner::Team(id.clone()), principal, key_id, patch).await
    }

    /// Rotates team key `key_id` of team `id`, as [`Teams::rotate_api_key`].
    ///
    /// # Errors
    /// As [`Teams::rotate_api_key`]; [`ServiceError::Forbidden`] (`team_admin`).
    pub async fn rotate_team_api_key(
        &self,
        principal: &Authorized<op::UpdateApiKey>,
        id: &TeamId,
        key_id: &ApiKeyId,
        grace_period_secs: Option<i64>,
    ) -> Result<CreatedApiKey, ServiceError> {
        self.manages_team(principal, id).await?;
        let owner = Owner::Team(id.clone());
        self.keys.rotate_api_key_of(owner, principal, key_id, grace_period_secs).await
    }

    /// Revokes team key `key_id` of team `id` on every node.
    ///
    /// # Errors
    /// [`ServiceError::NotFound`] (`team`, `api_key`); [`ServiceError::Forbidden`]
    /// (`team_admin`).
    pub async fn revoke_team_api_key(
        &self,
        principal: &Authorized<op::ChangeApiKey>,
        id: &TeamId,
        key_id: &ApiKeyId,
    ) -> Result<ApiKeyView, ServiceError> {
        self.manages_team(principal, id).await?;
        let owner = Some(Owner::Team(id.clone()));
        self.keys.revoke_api_key_of(key_id, owner, principal.actor()).await
    }

    /// Deletes team key `key_id` of team `id`.
    ///
    /// # Errors
    /// As [`Teams::revoke_team_api_key`].
    pub async fn delete_team_api_key(
        &self,
        principal: &Authorized<op::ChangeApiKey>,
        id: &TeamId,
        key_id: &ApiKeyId,
    ) -> Result<(), ServiceError> {
        self.manages_team(principal, id).await?;
        self.keys.delete_api_key_of(Owner::Team(id.clone()), principal, key_id).await
    }
}
