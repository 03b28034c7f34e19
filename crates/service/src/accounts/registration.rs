//! Registration, login and the current user (register, login, me).

use crate::accounts::sessions::ClientInfo;
use crate::accounts::Accounts;
use crate::audit::Event;
use crate::auth::Authorized;
use crate::config::RegistrationMode;
use crate::credential_cache;
use crate::error::ServiceError;
use crate::mfa::LoginOutcome;
use crate::password::{Verification, LOGIN_FAILED};
use crate::views::{TokenSet, UserView};
use aigw_domain::access::op;
use aigw_domain::invitation::InvitationSecret;
use aigw_domain::AuditAction;
use aigw_domain::{CredentialChangeKind, Email, FieldError, Role, UserId, UserName};
use aigw_persistence::models::UserRow;
use aigw_persistence::{invitations, transaction, users, DbConnection, PersistenceError};

impl Accounts {
    /// Creates an account and starts its first session.
    ///
    /// `name` defaults to the part of the e-mail address before `@`.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` (malformed, or already registered), `name` or
    /// `password` (length outside the policy); [`ServiceError::Unavailable`] when the database
    /// is down. Nothing is stored unless everything is.
    pub async fn register(
        &self,
        email: &str,
        password: String,
        name: Option<&str>,
        invitation: Option<&str>,
        client: &ClientInfo,
    ) -> Result<TokenSet, ServiceError> {
        let invitation = self.registration_allowed(email, invitation)?;
        let user = self.new_user_row(email, password, name, Role::User).await?;
        let now = user.created_at;
        let (session, token, refresh) = self.new_session(&user.id, client, now);
        let stored = user.clone();
        let stored_session = session.clone();
        let event = Event::new(AuditAction::UserRegistered, Some(&user.id), Some(&user.id), now)
            .target(&user.id)
            .details(serde_json::json!({"email": user.email, "session_id": session.id}));
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // First statement: the invitation's compare-and-set (SQLite's write lock).
                    if let Some(digest) = &invitation {
                        let at = now.naive_utc();
                        if !invitations::consume(conn, digest, &stored.email, at)? {
                            return Err(FieldError::new(
                                "invitation",
                                "is unknown, used, expired or for another e-mail",
                            )
                            .into());
                        }
                    }
                    Self::insert_user(conn, &stored)?;
                    // Without an invitation (mode `open`), the address's open invitations to
                    // register are taken all the same: they read `accepted`, not `sent`.
                    if invitation.is_none() {
                        invitations::accept_for_email(conn, &stored.email, now.naive_utc())?;
                    }
                    Self::store_session(conn, &stored_session, &token)?;
                    // Team invitations of the address wait for it to be verified
                    // (`crate::team_access::join_invited`).
                    event.insert(conn)
                })
            })
            .await?;
        tracing::info!(user_id = %user.id, "user registered");
        self.email.verify_after_registration(&user);
        self.token_set(&user, &session, &refresh, now)
    }

    /// Applies `auth.registration` and `auth.allowed_email_domains` to a registration of
    /// `email`; returns the digest of the invitation to consume (mode `invite`).
    fn registration_allowed(
        &self,
        email: &str,
        invitation: Option<&str>,
    ) -> Result<Option<String>, ServiceError> {
        if self.config.registration == RegistrationMode::Closed {
            return Err(ServiceError::Forbidden {
                required: "invitation".to_owned(),
                current: "none".to_owned(),
            });
        }
        let email = Email::parse(email)?;
        let allowed = &self.config.allowed_email_domains;
        if !allowed.is_empty() && !aigw_domain::domain_in(email.as_str(), allowed) {
            return Err(FieldError::new("email", "is not in a domain that may register").into());
        }
        if self.config.sso_only(email.as_str()) {
            return Err(FieldError::new(
                "email",
                "is in a domain that signs in with single sign-on: use the login page's button",
            )
            .into());
        }
        if self.config.registration == RegistrationMode::Open {
            return Ok(None);
        }
        let raw = invitation.ok_or_else(|| FieldError::new("invitation", "is required"))?;
        let secret = InvitationSecret::parse(raw)
            .ok_or_else(|| FieldError::new("invitation", "is not an invitation"))?;
        Ok(Some(secret.digest().into_string()))
    }

    /// Validates a new account's fields and hashes its password (on the argon2 pool): the row
    /// to insert, created now. `name` defaults to the part of the e-mail before `@`.
    pub(crate) async fn new_user_row(
        &self,
        email: &str,
        password: String,
        name: Option<&str>,
        role: Role,
    ) -> Result<UserRow, ServiceError> {
        let email = Email::parse(email)?;
        let name = match name {
            Some(n) => UserName::parse(n, "name")?,
            None => UserName::parse(email.local_part(), "name")?,
        };
        self.password_policy.check_new(&password)?;
        let password_hash = self.passwords.hash(password).await?;
        let now = self.clock.now();
        Ok(UserRow {
            id: UserId::generate(),
            email: email.as_str().to_owned(),
            name: name.into_string(),
            role,
            password_hash,
            created_at: now,
            updated_at: now,
            disabled_at: None,
            email_verified_at: None,
            budget_micros: None,
        })
    }

    /// Inserts `user` (inside the caller's transaction).
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` when it is already registered.
    pub(crate) fn insert_user(conn: &mut DbConnection, user: &UserRow) -> Result<(), ServiceError> {
        users::insert(conn, user).map_err(|e| match e {
            PersistenceError::Conflict => {
                ServiceError::Invalid(FieldError::new("email", "is already registered"))
            }
            other => other.into(),
        })
    }

    /// Checks an e-mail and password and starts a session; for an account whose second
    /// factor is on, answers an MFA challenge instead ([`LoginOutcome::MfaRequired`], completed
    /// by [`Accounts::complete_mfa_login`]).
    ///
    /// An unknown e-mail is verified against a dummy hash, so it costs the same time and
    /// gets the same answer as a wrong password. A stored hash with parameters other than the
    /// configured ones is replaced after a successful login.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] (`invalid e-mail or password`) for every failed login;
    /// [`ServiceError::Invalid`] on `password` longer than the policy's maximum;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn login(
        &self,
        email: &str,
        password: String,
        client: &ClientInfo,
    ) -> Result<LoginOutcome, ServiceError> {
        self.password_policy.check_length_bound(&password)?;
        // The address exactly as registration stores it (NFKC, lower case): a look-alike of
        // another account's address is another address, and finds nothing.
        let email = aigw_domain::normalize_email(email);
        if self.config.sso_only(&email) {
            // Decided by the address's domain alone, before any lookup: the answer says
            // nothing about whether the account exists.
            return Err(ServiceError::rejected(
                "accounts of this domain sign in with single sign-on: use the login page's button",
            ));
        }
        let wanted = email.clone();
        let user = self.db.run(move |conn| Ok(users::find_by_email(conn, &wanted)?)).await?;
        let stored_hash = user.as_ref().map(|u| u.password_hash.clone());
        let verification = self.passwords.verify(password.clone(), stored_hash).await?;
        // A disabled account gets the same answer, after the same work, as a wrong password:
        // disabling is no oracle.
        let user = match (verification, user) {
            (Verification::Match | Verification::MatchNeedsRehash, Some(user))
                if user.disabled_at.is_none() =>
            {
                user
            }
            (verification, user) => {
                let reason = match (&user, verification) {
                    (None, _) => "unknown_email",
                    (Some(_), Verification::Mismatch) => "wrong_password",
                    (Some(_), _) => "account_disabled",
                };
                let id = user.as_ref().map(|u| u.id.as_str());
                let event = Event::new(AuditAction::LoginFailed, id, None, self.clock.now())
                    .details(serde_json::json!({"email": email, "reason": reason}));
                crate::audit::record_alone(&self.db, event).await;
                return Err(ServiceError::rejected(LOGIN_FAILED));
            }
        };
        if verification == Verification::MatchNeedsRehash {
            self.rehash(&user.id, password).await;
        }
        if let Some(challenge) = self.mfa_challenge_for(&user.id).await? {
            return Ok(LoginOutcome::MfaRequired(challenge));
        }
        let now = self.clock.now();
        let (session, token, refresh) = self.new_session(&user.id, client, now);
        let stored_session = session.clone();
        let event = Event::new(AuditAction::LoginSucceeded, Some(&user.id), Some(&user.id), now)
            .target(&session.id)
            .details(serde_json::json!({"email": user.email}));
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // Disabled meanwhile (or being disabled now): no session starts.
                    if !users::lock_if_enabled(conn, &stored_session.user_id)? {
                        return Err(ServiceError::rejected(LOGIN_FAILED));
                    }
                    Self::store_session(conn, &stored_session, &token)?;
                    event.insert(conn)
                })
            })
            .await?;
        tracing::info!(user_id = %user.id, session_id = %session.id, "login");
        self.token_set(&user, &session, &refresh, now).map(LoginOutcome::Tokens)
    }

    /// Replaces a user's hash with one of the configured parameters; failures are logged
    /// only (the login itself has succeeded).
    async fn rehash(&self, user_id: &str, password: String) {
        let id = UserId::from(user_id);
        let result = async {
            let hash = self.passwords.hash(password).await?;
            let now = self.clock.now();
            let change = self
                .db
                .run(move |conn| {
                    transaction(conn, |conn| {
                        users::update_password_hash(conn, &id, &hash, now)?;
                        credential_cache::append(conn, CredentialChangeKind::UserChanged, &id, now)
                    })
                })
                .await?;
            self.cache.publish(vec![change]).await;
            Ok::<_, ServiceError>(())
        }
        .await;
        match result {
            Ok(()) => tracing::info!(user_id, "password re-hashed with current parameters"),
            Err(e) => tracing::warn!(user_id, error = %e, "password re-hash failed"),
        }
    }

    /// The caller's account.
    ///
    /// # Errors
    /// [`ServiceError::Unauthorized`] when the account no longer exists; [`ServiceError::Unavailable`] when the database is
    /// down.
    pub async fn me(
        &self,
        principal: &Authorized<op::ReadAccount>,
    ) -> Result<UserView, ServiceError> {
        self.cache
            .user(principal.user_id())
            .await?
            .ok_or_else(|| ServiceError::revoked_credential("the account no longer exists"))
    }
}
