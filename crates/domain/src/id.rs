//! Typed ids: one type per kind of record, so that a key's id cannot be passed where a
//! user's is expected.
//!
//! Each id is a UUID (version 7 for every id aigw makes: time-ordered, so ids sort by
//! creation) kept in its stored form, the hyphenated lower-case text
//! (`0193b0a2-7c1e-7d2a-9f3e-4b5c6d7e8f90`): the same in both databases, in JSON and in the
//! access token's claims. An id read from storage is taken as it is; an id from a request is
//! checked where the request is read. Each derefs to `str`, so it can be given to the
//! repositories, which take ids as text.

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// A new id: a UUIDv7 of the current time.
            pub fn generate() -> Self {
                Self(uuid::Uuid::now_v7().to_string())
            }

            /// The id's text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl From<String> for $name {
            /// An id as stored (not checked: ids are checked where a request is read).
            fn from(id: String) -> Self {
                Self(id)
            }
        }

        impl From<&str> for $name {
            /// An id as stored (not checked: ids are checked where a request is read).
            fn from(id: &str) -> Self {
                Self(id.to_owned())
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                self.0 == *other
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *self == other.0
            }
        }

        impl PartialEq<$name> for str {
            fn eq(&self, other: &$name) -> bool {
                self == other.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }
    };
}

id_type!(
    /// A user's id (`users.id`; an access token's `sub`).
    UserId
);
id_type!(
    /// An API key's id (`api_keys.id`; not its secret).
    ApiKeyId
);
id_type!(
    /// A team's id (`teams.id`).
    TeamId
);
id_type!(
    /// A session's id (`sessions.id`; an access token's `sid`).
    SessionId
);
id_type!(
    /// A refresh token's id (`refresh_tokens.id`; not the token).
    RefreshTokenId
);
id_type!(
    /// An invitation to register's id (`invitations.id`; not its token).
    InvitationId
);
id_type!(
    /// An invitation to a team's id (`team_invitations.id`).
    TeamInvitationId
);
id_type!(
    /// An account token's id (`account_tokens.id`: e-mail verification, e-mail change,
    /// password reset; not the token).
    AccountTokenId
);
id_type!(
    /// A second-factor challenge's id (`mfa_challenges.id`; not its token).
    MfaChallengeId
);
id_type!(
    /// A recovery code's id (`mfa_recovery_codes.id`; not the code).
    RecoveryCodeId
);

#[cfg(test)]
#[allow(clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_uuid_v7_text_and_serialize_as_plain_strings() {
        let id = UserId::generate();
        let Ok(parsed) = uuid::Uuid::parse_str(id.as_str()) else { panic!("not a UUID: {id}") };
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(id.as_str(), parsed.hyphenated().to_string());
        let json = serde_json::to_string(&id).unwrap_or_default();
        assert_eq!(json, format!("\"{id}\""));
        let back = serde_json::from_str::<UserId>(&json).ok();
        assert_eq!(back, Some(id));
    }
}
