//! Who may call what (DESIGN.md "Who may call what"), as one pure function.
//!
//! | operation | access token | API key |
//! |---|---|---|
//! | [`Operation::ReadAccount`] (GET me, GET api-keys) | yes | permission `read` |
//! | [`Operation::CreateApiKey`] (POST api-keys) | yes | never (`required: access_token`) |
//! | [`Operation::ChangeApiKey`] (revoke, DELETE) | yes | permission `write` |
//! | [`Operation::UpdateApiKey`] (PATCH api-keys/{id}, rotate) | yes | never (`required: access_token`) |
//! | [`Operation::ChatCompletion`] (POST ai/chat/completions) | never (`required: api_key`) | permission `ai_gateway` |
//! | [`Operation::ReadUsage`] (GET usage, GET usage/requests) | yes | permission `read` |
//! | [`Operation::Logout`] (POST logout) | yes | never (`required: access_token`) |
//! | [`Operation::ManageAccount`] (PATCH me, POST password, DELETE sessions/{id}) | yes | never (`required: access_token`) |
//! | [`Operation::Administer`] (every `/admin/…` endpoint) | role `admin` | permission `admin` and its owner's role `admin` |
//!
//! `admin` includes every other permission (but never lets a key create a key: seed §5 rule 1).
//! The permission alone never makes a key administrative: any user may create a key with
//! `admin`, so the owner's role is checked too (else every user could make themselves an admin).

use crate::permission::{Permission, PermissionSet};
use crate::user::Role;

/// An operation guarded by the table above.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Read the caller's account or list their API keys.
    ReadAccount,
    /// Create an API key.
    CreateApiKey,
    /// Revoke or delete one of the caller's API keys.
    ChangeApiKey,
    /// Change one of the caller's API keys (PATCH) or rotate its secret: like creating one,
    /// only with an access token (issue 9: a key never changes a key).
    UpdateApiKey,
    /// Call the AI gateway.
    ChatCompletion,
    /// Read the caller's own usage (the ledger of their keys' chat completions).
    ReadUsage,
    /// End sessions of the caller (needs a session: an access token).
    Logout,
    /// Change the caller's own account: name, password, end one of their sessions (issue 11:
    /// an API key may read the account, never change it).
    ManageAccount,
    /// Act on every account: list and change users, any user's API keys (issue 11).
    Administer,
}

/// The kind of credential a request authenticated with, and what it carries.
#[derive(Debug, Clone, Copy)]
pub enum CallerCredential<'a> {
    /// A JWT access token (a user session).
    AccessToken,
    /// An API key with its permissions.
    ApiKey(&'a PermissionSet),
}

/// A refusal: 403 `forbidden` with `details.required` and `details.current` (seed §7).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("requires {required}, caller has {current}")]
pub struct Denied {
    /// What was needed: a permission name, `access_token` or `api_key`.
    pub required: String,
    /// What the caller has: `access_token`, `api_key`, or the key's permissions joined by commas.
    pub current: String,
}

/// Decides whether `caller` may perform `operation`, for a caller whose role is not known
/// (treated as [`Role::User`]: [`Operation::Administer`] is refused).
///
/// # Errors
/// [`Denied`] naming what was required and what the caller has.
pub fn authorize(caller: CallerCredential<'_>, operation: Operation) -> Result<(), Denied> {
    authorize_as(caller, Role::User, operation)
}

/// Decides whether `caller`, whose account has role `role` (read now, not from a token's
/// claim), may perform `operation`.
///
/// # Errors
/// [`Denied`] naming what was required and what the caller has: for
/// [`Operation::Administer`], `required: admin` with `current` the caller's role (`user`), or
/// for a key without the `admin` permission its permissions.
pub fn authorize_as(
    caller: CallerCredential<'_>,
    role: Role,
    operation: Operation,
) -> Result<(), Denied> {
    let needs = |permission: Permission, set: &PermissionSet| {
        if set.allows(permission) {
            Ok(())
        } else {
            Err(Denied { required: permission.as_str().to_owned(), current: set.to_storage() })
        }
    };
    let admin_role = || {
        if role == Role::Admin {
            Ok(())
        } else {
            Err(Denied { required: Role::Admin.as_str().into(), current: role.as_str().into() })
        }
    };
    match (caller, operation) {
        (CallerCredential::AccessToken, Operation::Administer) => admin_role(),
        (CallerCredential::ApiKey(set), Operation::Administer) => {
            needs(Permission::Admin, set)?;
            admin_role()
        }
        (CallerCredential::ApiKey(_), Operation::Logout | Operation::ManageAccount) => {
            Err(Denied { required: "access_token".into(), current: "api_key".into() })
        }
        (CallerCredential::AccessToken, Operation::ChatCompletion) => {
            Err(Denied { required: "api_key".into(), current: "access_token".into() })
        }
        (CallerCredential::AccessToken, _) => Ok(()),
        (CallerCredential::ApiKey(_), Operation::CreateApiKey | Operation::UpdateApiKey) => {
            Err(Denied { required: "access_token".into(), current: "api_key".into() })
        }
        (CallerCredential::ApiKey(set), Operation::ReadAccount | Operation::ReadUsage) => {
            needs(Permission::Read, set)
        }
        (CallerCredential::ApiKey(set), Operation::ChangeApiKey) => needs(Permission::Write, set),
        (CallerCredential::ApiKey(set), Operation::ChatCompletion) => {
            needs(Permission::AiGateway, set)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows() {
        use CallerCredential::*;
        use Operation::*;
        let read = PermissionSet::from_iter([Permission::Read]);
        let admin = PermissionSet::from_iter([Permission::Admin]);
        assert!(authorize(AccessToken, ReadAccount).is_ok());
        assert!(authorize(AccessToken, CreateApiKey).is_ok());
        assert!(authorize(AccessToken, ChangeApiKey).is_ok());
        assert_eq!(
            authorize(AccessToken, ChatCompletion).err().map(|d| d.required),
            Some("api_key".into())
        );
        assert!(authorize(ApiKey(&read), ReadAccount).is_ok());
        assert!(authorize(AccessToken, ReadUsage).is_ok());
        assert!(authorize(ApiKey(&read), ReadUsage).is_ok());
        assert_eq!(
            authorize(ApiKey(&PermissionSet::from_iter([Permission::AiGateway])), ReadUsage)
                .err()
                .map(|d| d.required),
            Some("read".into())
        );
        assert_eq!(
            authorize(ApiKey(&read), ChangeApiKey),
            Err(Denied { required: "write".into(), current: "read".into() })
        );
        assert!(authorize(ApiKey(&admin), CreateApiKey).is_err());
        assert!(authorize(AccessToken, UpdateApiKey).is_ok());
        assert_eq!(
            authorize(ApiKey(&admin), UpdateApiKey),
            Err(Denied { required: "access_token".into(), current: "api_key".into() })
        );
        assert!(authorize(ApiKey(&admin), ChatCompletion).is_ok());
        assert!(authorize(AccessToken, Logout).is_ok());
        assert!(authorize(AccessToken, ManageAccount).is_ok());
        assert_eq!(
            authorize(ApiKey(&admin), ManageAccount).err().map(|d| d.required),
            Some("access_token".into())
        );
        assert_eq!(
            authorize(ApiKey(&admin), Logout).err().map(|d| d.required),
            Some("access_token".into())
        );
    }

    #[test]
    fn administer_needs_the_admin_role_and_for_a_key_also_the_permission() {
        use CallerCredential::*;
        use Operation::*;
        let admin = PermissionSet::from_iter([Permission::Admin]);
        let read = PermissionSet::from_iter([Permission::Read]);
        let user_denied = Denied { required: "admin".into(), current: "user".into() };
        assert_eq!(authorize(AccessToken, Administer), Err(user_denied.clone()));
        assert_eq!(authorize_as(AccessToken, Role::User, Administer), Err(user_denied.clone()));
        assert!(authorize_as(AccessToken, Role::Admin, Administer).is_ok());
        assert!(authorize_as(ApiKey(&admin), Role::Admin, Administer).is_ok());
        // A user's own `admin` key is no way up.
        assert_eq!(authorize_as(ApiKey(&admin), Role::User, Administer), Err(user_denied));
        assert_eq!(
            authorize_as(ApiKey(&read), Role::Admin, Administer),
            Err(Denied { required: "admin".into(), current: "read".into() })
        );
        // The role changes nothing else.
        assert!(authorize_as(AccessToken, Role::Admin, ChatCompletion).is_err());
        assert!(authorize_as(ApiKey(&admin), Role::Admin, CreateApiKey).is_err());
    }
}
