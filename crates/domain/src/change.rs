//! Kinds of credential change carried by the change feed.
//!
//! Every write that other nodes must see (a session revoked, an API key revoked, deleted or
//! changed, a user changed) appends one row `(id, kind, subject_id, created_at)` to the table
//! `credential_changes` in the same transaction as the change. Each node tails that table by
//! `id` and drops what it cached about the subject. The storage names below are stable: rows
//! written by one version are read by every other, so a name is never renamed or reused.
//! Later features add kinds here (and their handling in the service's credential cache).

use std::fmt;
use std::str::FromStr;

/// What changed; the subject is named by the row's `subject_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CredentialChangeKind {
    /// A session was revoked (logout, global logout, refresh-token reuse). Subject: the
    /// session id (the `sid` claim of its access tokens).
    SessionRevoked,
    /// An API key was revoked. Subject: the key id.
    ApiKeyRevoked,
    /// An API key was deleted. Subject: the key id.
    ApiKeyDeleted,
    /// An API key's permissions, expiry or other attributes changed. Subject: the key id.
    ApiKeyChanged,
    /// A user's account changed (password hash, role, name, …). Subject: the user id.
    UserChanged,
    /// A team's policy or membership changed, or the team was deleted: every key scoped to it
    /// is read again. Subject: the team id.
    TeamChanged,
}

impl CredentialChangeKind {
    /// Every kind, in declaration order.
    pub const ALL: [CredentialChangeKind; 6] = [
        CredentialChangeKind::SessionRevoked,
        CredentialChangeKind::ApiKeyRevoked,
        CredentialChangeKind::ApiKeyDeleted,
        CredentialChangeKind::ApiKeyChanged,
        CredentialChangeKind::UserChanged,
        CredentialChangeKind::TeamChanged,
    ];

    /// The stable storage name (`snake_case`), e.g. `"session_revoked"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            CredentialChangeKind::SessionRevoked => "session_revoked",
            CredentialChangeKind::ApiKeyRevoked => "api_key_revoked",
            CredentialChangeKind::ApiKeyDeleted => "api_key_deleted",
            CredentialChangeKind::ApiKeyChanged => "api_key_changed",
            CredentialChangeKind::UserChanged => "user_changed",
            CredentialChangeKind::TeamChanged => "team_changed",
        }
    }

    /// Whether the subject is an API key id.
    pub const fn is_api_key(self) -> bool {
        matches!(
            self,
            CredentialChangeKind::ApiKeyRevoked
                | CredentialChangeKind::ApiKeyDeleted
                | CredentialChangeKind::ApiKeyChanged
        )
    }
}

impl fmt::Display for CredentialChangeKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of parsing a storage name this version does not know (written by a newer one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown credential change kind")]
pub struct UnknownChangeKind;

impl FromStr for CredentialChangeKind {
    type Err = UnknownChangeKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL.into_iter().find(|k| k.as_str() == s).ok_or(UnknownChangeKind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_names_are_stable_and_round_trip() {
        let names: Vec<&str> = CredentialChangeKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "session_revoked",
                "api_key_revoked",
                "api_key_deleted",
                "api_key_changed",
                "user_changed",
                "team_changed"
            ]
        );
        for kind in CredentialChangeKind::ALL {
            assert_eq!(kind.as_str().parse(), Ok(kind));
        }
        assert_eq!("user_disabled".parse::<CredentialChangeKind>(), Err(UnknownChangeKind));
    }
}
