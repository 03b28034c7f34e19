//! Who may call what, as one pure function.
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
//! `admin` includes every other permission (but never lets a key create a key: the contract).
//! The permission alone never makes a key administrative: any user may create a key with
//! `admin`, so the owner's role is checked too (else every user could make themselves an admin).
//!
//! Every route declares its operation once, as a type of [`op`] (the HTTP layer's extractor
//! authenticates and checks this table in one step, docs/permissions.md "How a route is
//! checked"); the proof it yields is what the use cases take, so none checks again.

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
    /// only with an access token (a key never changes a key).
    UpdateApiKey,
    /// Call the AI gateway.
    ChatCompletion,
    /// Read the caller's own usage (the ledger of their keys' chat completions).
    ReadUsage,
    /// End sessions of the caller (needs a session: an access token).
    Logout,
    /// Change the caller's own account: name, password, end one of their sessions (
    /// an API key may read the account, never change it).
    ManageAccount,
    /// Act on every account: list and change users, any user's API keys.
    Administer,
}

impl Operation {
    /// Every operation, each a row of the table ([`authorize_as`] decides each of them).
    pub const ALL: [Operation; 9] = [
        Operation::ReadAccount,
        Operation::CreateApiKey,
        Operation::ChangeApiKey,
        Operation::UpdateApiKey,
        Operation::ChatCompletion,
        Operation::ReadUsage,
        Operation::Logout,
        Operation::ManageAccount,
        Operation::Administer,
    ];
}

/// An operation as a type, so that a route names its operation in its signature and the
/// proof of the check carries it (`Authorized<op::ChatCompletion>` in the service crate).
pub trait RouteOperation {
    /// The row of the table this type stands for.
    const OPERATION: Operation;
}

/// One type per [`Operation`] checked from the credential alone. [`Operation::Administer`]
/// has none: it also needs the account's role, read from the database, and its proof is the
/// service crate's `Admin`.
pub mod op {
    use super::{Operation, RouteOperation};

    macro_rules! operations {
        ($($name:ident),* $(,)?) => {$(
            #[doc = concat!("[`Operation::", stringify!($name), "`] as a type.")]
            #[derive(Debug, Clone, Copy)]
            pub enum $name {}
            impl RouteOperation for $name {
                const OPERATION: Operation = Operation::$name;
            }
        )*};
    }

    operations!(
        ReadAccount,
        CreateApiKey,
        ChangeApiKey,
        UpdateApiKey,
        ChatCompletion,
        ReadUsage,
        Logout,
        ManageAccount,
    );
}

/// The kind of credential a request authenticated with, and what it carries.
#[derive(Debug, Clone, Copy)]
pub enum CallerCredential<'a> {
    /// A JWT access token (a user session).
    AccessToken,
    /// An API key with its permissions.
    ApiKey(&'a PermissionSet),
}

/// A refusal: 403 `forbidden` with `details.required` and `details.current`.
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

    /// Fails to compile when an operation is added without a place in [`Operation::ALL`].
    fn position(operation: Operation) -> usize {
        match operation {
            Operation::ReadAccount => 0,
            Operation::CreateApiKey => 1,
            Operation::ChangeApiKey => 2,
            Operation::UpdateApiKey => 3,
            Operation::ChatCompletion => 4,
            Operation::ReadUsage => 5,
            Operation::Logout => 6,
            Operation::ManageAccount => 7,
            Operation::Administer => 8,
        }
    }

    #[test]
    fn every_operation_has_a_row_for_every_credential() {
        let all = PermissionSet::from_iter([
            Permission::Read,
            Permission::Write,
            Permission::AiGateway,
            Permission::Admin,
        ]);
        for (i, operation) in Operation::ALL.into_iter().enumerate() {
            assert_eq!(position(operation), i, "{operation:?} listed once, in place");
            // Each credential gets an answer; an admin with every permission is refused only
            // by a credential-kind rule (a key never creates or changes a key, never logs out,
            // never manages the account; an access token never calls the gateway).
            for role in [Role::User, Role::Admin] {
                for caller in [CallerCredential::AccessToken, CallerCredential::ApiKey(&all)] {
                    if let Err(denied) = authorize_as(caller, role, operation) {
                        assert!(
                            ["access_token", "api_key", "admin"]
                                .contains(&denied.required.as_str()),
                            "{operation:?}: {denied:?}"
                        );
                    }
                }
            }
            assert!(
                authorize_as(CallerCredential::AccessToken, Role::Admin, operation).is_ok()
                    || authorize_as(CallerCredential::ApiKey(&all), Role::Admin, operation).is_ok(),
                "{operation:?} is callable by someone"
            );
        }
        assert_eq!(<op::Logout as RouteOperation>::OPERATION, Operation::Logout);
        assert_eq!(<op::ChatCompletion as RouteOperation>::OPERATION, Operation::ChatCompletion);
    }

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
