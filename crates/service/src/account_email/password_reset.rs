//! Password reset: anyone may ask for a reset link for an address; the answer is the same,
//! after the same time, whether or not an account has it (the lookup runs in the
//! background). The single-use link (30 min) sets a new password under the password policy,
//! ends every session of the account, and the account is told by e-mail.

use super::token_refused;
use crate::account_email::AccountEmail;
use crate::audit::Event;
use crate::credential_cache;
use crate::email::MailKind;
use crate::error::ServiceError;
use aigw_domain::account_token::{AccountToken, TokenPurpose};
use aigw_domain::{normalize_email, time, AuditAction, CredentialChangeKind, Email};
use aigw_persistence::changes::ChangeRow;
use aigw_persistence::{account_tokens, sessions, transaction, users};

/// The page a password reset link opens.
pub const RESET_PATH: &str = "/account/reset-password";

impl AccountEmail {
    /// Asks for a password reset link for `email`. Checks only the address's form, then
    /// answers at once: the account lookup, the token and the message happen in the
    /// background, and nothing is sent when no enabled account has the address.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` when it is not an e-mail address (whatever the
    /// accounts).
    pub fn request_password_reset(&self, email: &str) -> Result<(), ServiceError> {
        // The form only (a malformed address never has an account); the lookup uses the
        // address exactly as registration stores it, as login does.
        Email::parse(email)?;
        let email = normalize_email(email);
        let this = self.clone();
        self.spawn_mail_job(MailKind::PasswordReset, async move {
            this.send_password_reset(&email).await
        });
        Ok(())
    }

    /// The background half of [`AccountEmail::request_password_reset`].
    async fn send_password_reset(&self, email: &str) -> Result<(), ServiceError> {
        let wanted = email.to_owned();
        let user = self.db.run(move |conn| Ok(users::find_by_email(conn, &wanted)?)).await?;
        let Some(user) = user.filter(|u| u.disabled_at.is_none()) else {
            tracing::debug!("password reset asked for an address without an enabled account");
            return Ok(());
        };
        let now = self.clock.now();
        let issued = Self::new_token(&user.id, TokenPurpose::ResetPassword, &user.email, now);
        let link = self.link(RESET_PATH, &issued.token);
        let token = issued.token.expose().to_owned();
        let event = Event::new(AuditAction::PasswordResetRequested, Some(&user.id), None, now)
            .target(&user.id);
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    Self::store_token(conn, &issued)?;
                    event.insert(conn)
                })
            })
            .await?;
        let values = serde_json::json!({
            "name": user.name,
            "link": link,
            "token": token,
            "minutes": TokenPurpose::ResetPassword.lifetime_secs() / 60,
        });
        self.send_mail(MailKind::PasswordReset, &user.email, values);
        Ok(())
    }

    /// Redeems a reset token (`aigwp_…`) with a new password: the password is replaced, the
    /// address counts as verified (the link reached it), every session of the account ends on
    /// every node, the account's other unused links are withdrawn, and the account is told by
    /// e-mail. Answers how many sessions ended.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `token` (malformed, unknown, used, expired, withdrawn, or
    /// its account disabled, gone or at another address now) or `password` (the password
    /// policy); [`ServiceError::Unavailable`] when the database is down.
    pub async fn confirm_password_reset(
        &self,
        token: &str,
        password: String,
    ) -> Result<usize, ServiceError> {
        let token =
            AccountToken::parse(token, TokenPurpose::ResetPassword).ok_or_else(token_refused)?;
        let digest = token.digest();
        // A cheap read before the costly hash: a wrong token costs no argon2 work.
        let (probe, at) = (digest.clone(), self.clock.now());
        let purposes = [TokenPurpose::ResetPassword];
        self.db
            .run(move |conn| Ok(account_tokens::find_valid(conn, probe.as_str(), &purposes, at)?))
            .await?
            .ok_or_else(token_refused)?;
        self.password_policy.check_new(&password)?;
        let hash = self.passwords.hash(password).await?;
        let now = self.clock.now();
        let (user, ended, changes) = self
            .db
            .run(move |conn| {
                transaction(conn, |conn| {
                    let row = account_tokens::redeem(conn, digest.as_str(), &purposes, now)?
                        .ok_or_else(token_refused)?;
                    let user = users::find_by_id(conn, &row.user_id)?
                        .filter(|u| u.disabled_at.is_none() && u.email == row.email)
                        .ok_or_else(token_refused)?;
                    users::update_password_hash(conn, &user.id, &hash, now)?;
                    users::mark_email_verified(conn, &user.id, now)?;
                    account_tokens::withdraw(conn, &user.id, &TokenPurpose::ALL, now)?;
                    let ended = sessions::revoke_user_sessions(
                        conn,
                        &user.id,
                        None,
                        "password_reset",
                        now,
                    )?;
                    Event::new(AuditAction::PasswordReset, Some(&user.id), Some(&user.id), now)
                        .target(&user.id)
                        .details(serde_json::json!({"ended_sessions": ended}))
                        .insert(conn)?;
                    // The reset proved the address: the teams that invited it take it in.
                    // Then the last statements of the transaction (see
                    // `aigw_persistence::changes`).
                    let mut changes: Vec<ChangeRow> =
                        crate::team_access::join_invited(conn, &user, now)?;
                    for id in &ended {
                        let kind = CredentialChangeKind::SessionRevoked;
                        changes.push(credential_cache::append(conn, kind, id, now)?);
                    }
                    let kind = CredentialChangeKind::UserChanged;
                    changes.push(credential_cache::append(conn, kind, &user.id, now)?);
                    Ok((user, ended.len(), changes))
                })
            })
            .await?;
        self.cache.publish(changes).await;
        tracing::info!(user_id = %user.id, ended_sessions = ended, "password reset");
        let values = serde_json::json!({"name": user.name, "at": time::format_timestamp(now)});
        self.send_mail(MailKind::PasswordChanged, &user.email, values);
        Ok(ended)
    }
}
