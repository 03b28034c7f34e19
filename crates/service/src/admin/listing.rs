//! What the operator's command line lists and finds (`aigw admin list-users`, `list-keys`,
//! `list-teams`): the same rows the admin API pages through, newest first, up to a limit,
//! without a caller (the operator holds the configuration, so the database).

use crate::admin::Administration;
use crate::error::ServiceError;
use crate::views::{ApiKeyView, UserView};
use aigw_domain::{FieldError, UserId};
use aigw_persistence::{api_keys, teams, users};
use chrono::{DateTime, Utc};

/// Most rows one list shows.
pub const MAX_LISTED: i64 = 10_000;

/// A team as the operator's list shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedTeam {
    /// UUIDv7 string.
    pub id: String,
    /// Display name.
    pub name: String,
    /// Creation time, UTC.
    pub created_at: DateTime<Utc>,
    /// Its members.
    pub members: i64,
    /// Its budget per period, micro-USD (`None`: none).
    pub max_budget_micros: Option<i64>,
}

impl Administration {
    /// Up to `limit` (at most [`MAX_LISTED`]) accounts, newest first, whose e-mail starts
    /// with `email_prefix` when given.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn list_users(
        &self,
        email_prefix: Option<&str>,
        limit: i64,
    ) -> Result<Vec<UserView>, ServiceError> {
        let prefix = email_prefix.map(aigw_domain::normalize_email);
        let limit = limit.clamp(1, MAX_LISTED);
        let rows =
            self.db.run(move |conn| Ok(users::list(conn, prefix.as_deref(), None, limit)?)).await?;
        Ok(rows.iter().map(UserView::from).collect())
    }

    /// Up to `limit` (at most [`MAX_LISTED`]) API keys, newest first: of the account with
    /// e-mail `owner` when given, whose visible prefix starts with `key_prefix` when given;
    /// each with its owner's e-mail address. Never a secret.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `owner` when no account has it;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn list_keys(
        &self,
        owner: Option<&str>,
        key_prefix: Option<&str>,
        limit: i64,
    ) -> Result<Vec<(ApiKeyView, String)>, ServiceError> {
        let owner = owner.map(aigw_domain::normalize_email);
        let key_prefix = key_prefix.map(str::to_owned);
        let limit = limit.clamp(1, MAX_LISTED);
        self.db
            .run(move |conn| {
                let owner_id = match &owner {
                    Some(email) => Some(
                        users::find_by_email(conn, email)?
                            .ok_or_else(|| FieldError::new("email", "no account has it"))?
                            .id,
                    ),
                    None => None,
                };
                let owner_id = owner_id.as_ref().map(UserId::as_str);
                let rows = api_keys::list_all(conn, owner_id, key_prefix.as_deref(), None, limit)?;
                // The owners in one query, not one per key.
                let mut ids: Vec<String> = rows.iter().map(|r| r.user_id.to_string()).collect();
                ids.sort_unstable();
                ids.dedup();
                let owners: std::collections::HashMap<String, String> =
                    users::find_by_ids(conn, &ids)?
                        .into_iter()
                        .map(|u| (u.id.to_string(), u.email))
                        .collect();
                Ok(rows
                    .iter()
                    .map(|row| {
                        let email = owners.get(row.user_id.as_str()).cloned();
                        (ApiKeyView::from(row), email.unwrap_or_else(|| "(gone)".to_owned()))
                    })
                    .collect())
            })
            .await
    }

    /// Up to `limit` (at most [`MAX_LISTED`]) teams, newest first, whose name contains `name`
    /// when given.
    ///
    /// # Errors
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn list_teams(
        &self,
        name: Option<&str>,
        limit: i64,
    ) -> Result<Vec<ListedTeam>, ServiceError> {
        let name = name.map(str::to_owned);
        let limit = limit.clamp(1, MAX_LISTED);
        let rows =
            self.db.run(move |conn| Ok(teams::list_all(conn, name.as_deref(), limit)?)).await?;
        Ok(rows
            .into_iter()
            .map(|(team, members)| ListedTeam {
                id: team.id.to_string(),
                name: team.name,
                created_at: team.created_at,
                members,
                max_budget_micros: team.policy.max_budget_micros,
            })
            .collect())
    }
}
