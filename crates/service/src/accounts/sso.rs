//! The account side of a single sign-on (docs/sso.md): which account a verified identity
//! signs in to, made on the first sign-in when its address's domain is allowed, linked to an
//! existing account only under the provider's rules; then a session as after a login.

use crate::accounts::{Accounts, SsoAccounts};
use crate::audit::Event;
use crate::error::ServiceError;
use crate::mfa::LoginOutcome;
use crate::sso_config::SsoProviderConfig;
use crate::ClientInfo;
use aigw_domain::mfa::SessionAmr;
use aigw_domain::sso::SsoIdentity;
use aigw_domain::{AuditAction, Email, Role, UserId, UserName};
use aigw_persistence::models::UserRow;
use aigw_persistence::sso::{self, SsoIdentityRow};
use aigw_persistence::{transaction, users};
use chrono::{DateTime, Utc};
use rand::RngCore;
use serde::{Deserialize, Serialize};

/// The `amr` values by which a provider says it used a second factor (RFC 8176).
const SECOND_FACTOR_AMR: &[&str] = &["mfa", "otp", "hwk", "swk", "sms", "fido"];

/// Which account a sign-in goes to, and how it was found.
enum Target {
    /// The account this subject signed in to before, and whether the provider's admin groups
    /// made it an admin.
    Known(UserRow, bool),
    /// An existing account with the asserted address, linked now.
    Linked(UserRow),
    /// A new account.
    Created(UserRow),
}

impl Target {
    fn how(&self) -> SsoAccount {
        match self {
            Self::Known(..) => SsoAccount::Known,
            Self::Linked(_) => SsoAccount::Linked,
            Self::Created(_) => SsoAccount::Created,
        }
    }
}

/// How a single sign-on found its account (`account` in the `sso_sign_in` audit event).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SsoAccount {
    /// The subject signed in to it before.
    Known,
    /// An existing account with the asserted address, linked by this sign-in.
    Linked,
    /// Made by this sign-in.
    Created,
}

impl SsoAccount {
    /// Its name in the audit trail: `known`, `linked` or `created`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Known => "known",
            Self::Linked => "linked",
            Self::Created => "created",
        }
    }
}

/// A person a provider signed in, admitted to their account (made or linked, groups applied)
/// and not yet given a session: what [`SsoAccounts::sso_session`] needs, small enough to keep
/// until a single-page application exchanges its one-time code.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SsoAdmission {
    /// The account.
    pub user_id: UserId,
    /// The provider's id.
    pub provider: String,
    /// The provider's subject.
    pub subject: String,
    /// The address the provider asserted.
    pub email: Option<String>,
    /// How the account was found.
    pub account: SsoAccount,
    /// Whether the provider's `amr` asserts a second factor (RFC 8176).
    pub second_factor: bool,
}

impl SsoAccounts {
    /// Signs `identity`, verified by `provider`, in: admits it ([`SsoAccounts::sso_admit`]),
    /// then starts a session ([`SsoAccounts::sso_session`]).
    ///
    /// # Errors
    /// Those of [`SsoAccounts::sso_admit`] and [`SsoAccounts::sso_session`].
    pub async fn sso_sign_in(
        &self,
        provider: &SsoProviderConfig,
        identity: &SsoIdentity,
        client: &ClientInfo,
    ) -> Result<LoginOutcome, ServiceError> {
        let admission = self.sso_admit(provider, identity).await?;
        self.sso_session(&admission, client).await
    }

    /// Admits `identity`, verified by `provider`: the account its subject signed in to
    /// before; else, for an address whose domain the provider allows, a new account (role
    /// `user`, the address verified when the provider asserts `email_verified`), or the
    /// existing account with that address when the provider links accounts and asserts
    /// `email_verified`. The provider's group rules and admin groups are applied to the
    /// account ([`super::sso_groups`]) on every admission, before any second factor aigw asks
    /// for.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the identity carries no address, its domain is not
    /// allowed, an account has the address and may not be linked, or the account is disabled
    /// or gone; [`ServiceError::Unavailable`] when the database is down.
    pub async fn sso_admit(
        &self,
        provider: &SsoProviderConfig,
        identity: &SsoIdentity,
    ) -> Result<SsoAdmission, ServiceError> {
        let now = self.accounts.clock.now();
        let target = self.sso_target(provider, identity, now).await?;
        let how = target.how();
        let (user, granted_admin) = match target {
            Target::Known(user, granted_admin) => (user, granted_admin),
            Target::Linked(user) | Target::Created(user) => (user, false),
        };
        let grants = self.rule_grants(provider, &identity.groups, &user.id, now).await?;
        let identity_row = SsoIdentityRow {
            provider: provider.id.clone(),
            subject: identity.subject.clone(),
            user_id: user.id.clone(),
            email: identity.email.clone(),
            created_at: now,
            last_sign_in_at: now,
            granted_admin: false,
        };
        let (rules, groups) = (provider.clone(), identity.groups.clone());
        let stored_user = user.clone();
        let changes = self
            .accounts
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // First statement: a write (the new account, or the account's row lock).
                    if how == SsoAccount::Created {
                        Accounts::insert_user(conn, &stored_user)?;
                    } else if !users::lock_if_enabled(conn, &stored_user.id)? {
                        return Err(ServiceError::rejected(
                            "single sign-on refused: the account is disabled",
                        ));
                    }
                    record_identity(conn, &identity_row, how == SsoAccount::Known)?;
                    let mut changes = Vec::new();
                    if how == SsoAccount::Created && stored_user.email_verified_at.is_some() {
                        // Team invitations of a verified address are taken, as after a
                        // verification by e-mail.
                        changes = crate::team_access::join_invited(conn, &stored_user, now)?;
                    }
                    let subject = (identity_row.subject.as_str(), granted_admin);
                    let asserted = (groups.as_slice(), grants.as_slice());
                    changes.extend(super::sso_groups::apply(
                        conn,
                        &rules,
                        &stored_user,
                        subject,
                        asserted,
                        now,
                    )?);
                    Ok(changes)
                })
            })
            .await?;
        self.accounts.cache.publish(changes).await;
        Ok(SsoAdmission {
            user_id: user.id,
            provider: provider.id.clone(),
            subject: identity.subject.clone(),
            email: identity.email.clone(),
            account: how,
            second_factor: identity.amr.iter().any(|a| SECOND_FACTOR_AMR.contains(&a.as_str())),
        })
    }

    /// A session for `admission`: its token set, or, for an account with aigw's second
    /// factor on whose provider asserted none, an MFA challenge. The session counts as one
    /// with a second factor when the provider asserted one. Audited as `sso_sign_in`.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the account was disabled or deleted since its
    /// admission; [`ServiceError::Unavailable`] when the database is down.
    pub async fn sso_session(
        &self,
        admission: &SsoAdmission,
        client: &ClientInfo,
    ) -> Result<LoginOutcome, ServiceError> {
        let user_id = admission.user_id.clone();
        if admission.account != SsoAccount::Created && !admission.second_factor {
            if let Some(challenge) = self.accounts.mfa_challenge_for(&user_id).await? {
                return Ok(LoginOutcome::MfaRequired(challenge));
            }
        }
        let now = self.accounts.clock.now();
        let (mut session, token, refresh) = self.accounts.new_session(&user_id, client, now);
        let amr =
            if admission.second_factor { SessionAmr::PasswordAndOtp } else { SessionAmr::Password };
        session.amr = Some(amr.as_storage().to_owned());
        let event = Event::new(AuditAction::SsoSignIn, Some(&user_id), Some(&user_id), now)
            .target(&session.id)
            .details(serde_json::json!({
                "provider": admission.provider, "subject": admission.subject,
                "account": admission.account.as_str(), "email": admission.email,
            }));
        let stored_session = session.clone();
        let user = self
            .accounts
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // First statement: a write (the account's row lock).
                    if !users::lock_if_enabled(conn, &user_id)? {
                        return Err(ServiceError::rejected(
                            "single sign-on refused: the account is disabled",
                        ));
                    }
                    let user = users::find_by_id(conn, &user_id)?.ok_or_else(|| {
                        ServiceError::rejected("single sign-on refused: the account is gone")
                    })?;
                    Accounts::store_session(conn, &stored_session, &token)?;
                    event.insert(conn)?;
                    Ok(user)
                })
            })
            .await?;
        let account = admission.account.as_str();
        tracing::info!(user_id = %user.id, provider = %admission.provider, account, "single sign-on");
        self.accounts.token_set(&user, &session, &refresh, now).map(LoginOutcome::Tokens)
    }

    /// The account `identity` signs in to (not yet stored when new or linked).
    async fn sso_target(
        &self,
        provider: &SsoProviderConfig,
        identity: &SsoIdentity,
        now: DateTime<Utc>,
    ) -> Result<Target, ServiceError> {
        let (id, subject) = (provider.id.clone(), identity.subject.clone());
        let known = self
            .accounts
            .db
            .run(move |conn| {
                let Some(row) = sso::find(conn, &id, &subject)? else {
                    return Ok(None);
                };
                Ok(Some((users::find_by_id(conn, &row.user_id)?, row.granted_admin)))
            })
            .await?;
        match known {
            Some((Some(user), granted_admin)) if user.disabled_at.is_none() => {
                return Ok(Target::Known(user, granted_admin))
            }
            Some(_) => {
                return Err(ServiceError::rejected(
                    "single sign-on refused: the account is disabled",
                ))
            }
            None => {}
        }
        let email =
            identity.email.as_deref().and_then(|e| Email::parse(e).ok()).ok_or_else(|| {
                ServiceError::rejected("single sign-on refused: the provider asserted no address")
            })?;
        if !provider.allows(email.as_str()) {
            return Err(ServiceError::rejected(
                "single sign-on refused: the address's domain may not sign in with this provider",
            ));
        }
        let wanted = email.as_str().to_owned();
        let existing =
            self.accounts.db.run(move |conn| Ok(users::find_by_email(conn, &wanted)?)).await?;
        match existing {
            Some(user) if provider.link_existing_accounts && identity.email_verified => {
                Ok(Target::Linked(user))
            }
            Some(_) if provider.link_existing_accounts => Err(ServiceError::rejected(
                "single sign-on refused: an account has this address, and the provider does \
                 not assert that the address is verified",
            )),
            Some(_) => Err(ServiceError::rejected(
                "single sign-on refused: an account has this address; log in with its password \
                 (this provider does not link accounts)",
            )),
            None => self.sso_account(&email, identity, now).await.map(Target::Created),
        }
    }

    /// A new account for `identity` with `email` (its password a random secret nobody knows:
    /// a password reset gives it one).
    async fn sso_account(
        &self,
        email: &Email,
        identity: &SsoIdentity,
        now: DateTime<Utc>,
    ) -> Result<UserRow, ServiceError> {
        let name = identity
            .name
            .as_deref()
            .and_then(|n| UserName::parse(n, "name").ok())
            .or_else(|| UserName::parse(email.local_part(), "name").ok())
            .map(UserName::into_string)
            .unwrap_or_default();
        let mut secret = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut secret);
        let unusable = base16ct::lower::encode_string(&secret);
        let password_hash = self.accounts.passwords.hash(unusable).await?;
        Ok(UserRow {
            id: UserId::generate(),
            email: email.as_str().to_owned(),
            name,
            role: Role::User,
            password_hash,
            created_at: now,
            updated_at: now,
            disabled_at: None,
            email_verified_at: identity.email_verified.then_some(now),
            budget_micros: None,
        })
    }
}

/// Records a sign-in of `row`'s subject: its latest address and time when `known`, else the
/// new identity.
fn record_identity(
    conn: &mut aigw_persistence::DbConnection,
    row: &SsoIdentityRow,
    known: bool,
) -> Result<(), aigw_persistence::PersistenceError> {
    if known {
        let at = row.last_sign_in_at;
        sso::touch(conn, &row.provider, &row.subject, row.email.as_deref(), at)
    } else {
        sso::insert(conn, row)
    }
}
