//! What a person reads beside a usage row's group value: a member's e-mail and name, a key's
//! name and visible prefix, a team's name (rows grouped by `member`, `api_key` or `team`).
//! Read in one query per page of ids; a group whose subject is gone (a deleted key) has none.

use aigw_persistence::usage::UsageTotalsRow;
use aigw_persistence::{api_keys, teams, users, DbConnection, PersistenceError};
use std::collections::BTreeMap;

/// The label of one group value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupLabel {
    /// A member (`group_by=member`).
    Member {
        /// Their e-mail address.
        email: String,
        /// Their display name.
        name: String,
    },
    /// An API key (`group_by=api_key`).
    ApiKey {
        /// Its name.
        name: String,
        /// Its first 12 characters.
        key_prefix: String,
    },
    /// A team (`group_by=team`).
    Team {
        /// Its name.
        name: String,
    },
}

/// What the group values of labelled rows are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Labelled {
    /// Members' user ids.
    Member,
    /// API key ids.
    ApiKey,
    /// Team ids.
    Team,
}

/// The labels of `rows`' group values, which are `what`, by value.
///
/// # Errors
/// On database failure.
pub(crate) fn labels_of(
    conn: &mut DbConnection,
    what: Labelled,
    rows: &[UsageTotalsRow],
) -> Result<BTreeMap<String, GroupLabel>, PersistenceError> {
    let ids: Vec<String> = rows.iter().map(|r| r.group.clone()).filter(|g| !g.is_empty()).collect();
    if ids.is_empty() {
        return Ok(BTreeMap::new());
    }
    Ok(match what {
        Labelled::Member => users::find_by_ids(conn, &ids)?
            .into_iter()
            .map(|u| (u.id.to_string(), GroupLabel::Member { email: u.email, name: u.name }))
            .collect(),
        Labelled::ApiKey => api_keys::names_of(conn, &ids)?
            .into_iter()
            .map(|(id, name, key_prefix)| (id, GroupLabel::ApiKey { name, key_prefix }))
            .collect(),
        Labelled::Team => teams::names_of(conn, &ids)?
            .into_iter()
            .map(|(id, name)| (id, GroupLabel::Team { name }))
            .collect(),
    })
}
