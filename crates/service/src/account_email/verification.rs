//! E-mail verification: a single-use link (24 h) proves the account receives mail at its
//! address and sets `email_verified_at`. `auth.email_verification` decides whether
//! registration sends one and whether anything waits for it.

use super::{token_refused, EmailLink};
use crate::account_email::AccountEmail;
use crate::audit::Event;
use crate::auth::{Authorized, Principal};
use crate::config::EmailVerification;
use crate::credential_cache;
use crate::email::MailKind;
use crate::error::ServiceError;
use crate::views::UserView;
use aigw_domain::access::op;
use aigw_domain::account_token::{AccountToken, TokenPurpose};
use aigw_domain::{time, AuditAction, CredentialChangeKind, FieldError};
use aigw_persistence::account_tokens;
use aigw_persistence::models::UserRow;
use aigw_persistence::{transaction, users};

/// The page a verification or e-mail change link opens.
pub const VERIFY_PATH: &str = "/account/verify-email";

impl AccountEmail {
    /// After a registration: unless `auth.email_verification` is `off`, sends `user` a
    /// verification link, in the background (a failure is logged; the account exists).
    pub(crate) fn verify_after_registration(&self, user: &UserRow) {
        if self.config.email_verification == EmailVerification::Off {
            return;
        }
        let (this, user) = (self.clone(), user.clone());
        self.spawn_mail_job(MailKind::VerifyEmail, async move {
            this.send_verification(&user).await.map(drop)
        });
    }

    /// Sends the caller a new verification link (the earlier ones stop working). Answers
    /// where it went and when it expires.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` when the address is verified already;
    /// [`ServiceError::Unauthorized`] when the account no longer exists;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn request_verification(
        &self,
        principal: &Authorized<op::ManageAccount>,
    ) -> Result<EmailLink, ServiceError> {
        let id = principal.user_id().to_owned();
        let user = self
            .db
            .run(move |conn| Ok(users::find_by_id(conn, &id)?))
            .await?
            .ok_or_else(|| ServiceError::revoked_credential("the account no longer exists"))?;
        if user.email_verified_at.is_some() {
            return Err(FieldError::new("email", "is already verified").into());
        }
        self.send_verification(&user).await
    }

    /// Issues a verification token for `user`'s current address and queues its message.
    async fn send_verification(&self, user: &UserRow) -> Result<EmailLink, ServiceError> {
        let now = self.clock.now();
        let issued = Self::new_token(&user.id, TokenPurpose::VerifyEmail, &user.email, now);
        let expires_at = issued.row.expires_at;
        let link = self.link(VERIFY_PATH, &issued.token);
        let token = issued.token.expose().to_owned();
        self.db.run(move |conn| transaction(conn, |conn| Self::store_token(conn, &issued))).await?;
        let values = serde_json::json!({
            "name": user.name,
            "link": link,
            "token": token,
            "hours": TokenPurpose::VerifyEmail.lifetime_secs() / 3600,
        });
        self.send_mail(MailKind::VerifyEmail, &user.email, values);
        Ok(EmailLink { email: user.email.clone(), expires_at })
    }

    /// Redeems an e-mail link's token (`aigwe_…`): a verification token marks the account's
    /// address verified; an e-mail change token moves the account to its new address
    /// (verified) and tells the old one. Needs no credential: the token is one. Answers the
    /// account as it is now.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `token` when it is malformed, unknown, used, expired or
    /// withdrawn, its account is disabled, gone or (verification) has another address now, or
    /// (change) the new address went to another account meanwhile;
    /// [`ServiceError::Unavailable`] when the database is down.
    pub async fn verify_email(&self, token: &str) -> Result<UserView, ServiceError> {
        let token =
            AccountToken::parse(token, TokenPurpose::VerifyEmail).ok_or_else(token_refused)?;
        let digest = token.digest();
        let now = self.clock.now();
        let purposes = [TokenPurpose::VerifyEmail, TokenPurpose::ChangeEmail];
        let (before, after, changes) = self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    // The compare-and-set first: SQLite's write lock before any read.
                    let row = account_tokens::redeem(conn, digest.as_str(), &purposes, now)?
                        .ok_or_else(token_refused)?;
                    let user = users::find_by_id(conn, &row.user_id)?
                        .filter(|u| u.disabled_at.is_none())
                        .ok_or_else(token_refused)?;
                    let mut after = user.clone();
                    after.updated_at = now;
                    if row.purpose == TokenPurpose::ChangeEmail {
                        let taken = FieldError::new("token", "is for an address another account has now");
                        if users::email_taken(conn, &row.email, &user.id)? {
                            return Err(taken.into());
                        }
                        users::change_email(conn, &user.id, &row.email, now).map_err(|e| {
                            match e {
                                aigw_persistence::PersistenceError::Conflict => taken.clone().into(),
                                other => ServiceError::from(other),
                            }
                        })?;
                        // Links sent to the old address stop working.
                        let old = [TokenPurpose::VerifyEmail, TokenPurpose::ResetPassword];
                        account_tokens::withdraw(conn, &user.id, &old, now)?;
                        after.email = row.email.clone();
                        after.email_verified_at = Some(now);
                        Event::new(AuditAction::EmailChanged, Some(&user.id), Some(&user.id), now)
                            .target(&user.id)
                            .details(serde_json::json!({"old_email": user.email, "new_email": row.email}))
                            .insert(conn)?;
                    } else {
                        if row.email != user.email {
                            return Err(token_refused());
                        }
                        users::mark_email_verified(conn, &user.id, now)?;
                        after.email_verified_at = Some(user.email_verified_at.unwrap_or(now));
                        Event::new(AuditAction::EmailVerified, Some(&user.id), Some(&user.id), now)
                            .target(&user.id)
                            .details(serde_json::json!({"email": user.email}))
                            .insert(conn)?;
                    }
                    // The address is verified now: the teams that invited it take it in.
                    let mut changes = crate::team_access::join_invited(conn, &after, now)?;
                    // Last statement (see `aigw_persistence::changes`): every node's user
                    // cache forgets the account.
                    let kind = CredentialChangeKind::UserChanged;
                    changes.push(credential_cache::append(conn, kind, &user.id, now)?);
                    Ok((user, after, changes))
                })
            })
            .await?;
        self.cache.publish(changes).await;
        if before.email != after.email {
            tracing::info!(user_id = %after.id, "e-mail address changed");
            let values = serde_json::json!({
                "name": after.name,
                "new_email": after.email,
                "at": time::format_timestamp(now),
            });
            self.send_mail(MailKind::EmailChanged, &before.email, values);
        } else {
            tracing::info!(user_id = %after.id, "e-mail address verified");
        }
        Ok(UserView::from(&after))
    }

    /// With `auth.email_verification = "required"`, refuses a caller whose account (the
    /// user of an access token, the owner of a key) has not verified its address. A key whose
    /// owner is gone (a team's key outliving its creator) is not refused here.
    ///
    /// # Errors
    /// [`ServiceError::EmailUnverified`]; [`ServiceError::Unavailable`] when the user cache
    /// has to read a database that is down.
    pub async fn ensure_email_verified(&self, principal: &Principal) -> Result<(), ServiceError> {
        if self.config.email_verification != EmailVerification::Required {
            return Ok(());
        }
        match self.cache.user(principal.user_id()).await? {
            Some(user) if user.email_verified_at.is_none() => Err(ServiceError::EmailUnverified),
            _ => Ok(()),
        }
    }
}
