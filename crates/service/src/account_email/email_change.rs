//! E-mail change: the signed-in user names a new address and confirms with their password;
//! a single-use link (24 h) goes to the new address, and opening it (see
//! [`AccountEmail::verify_email`]) moves the account there and tells the old address.

use super::verification::VERIFY_PATH;
use super::EmailLink;
use crate::account_email::AccountEmail;
use crate::audit::Event;
use crate::auth::Authorized;
use crate::email::MailKind;
use crate::error::ServiceError;
use crate::password::Verification;
use crate::password::LOGIN_FAILED;
use aigw_domain::access::op;
use aigw_domain::account_token::TokenPurpose;
use aigw_domain::{AuditAction, Email, FieldError};
use aigw_persistence::{transaction, users};

impl AccountEmail {
    /// Asks to move the caller's account to `new_email`: checks `password` (the same 401,
    /// after the same work, as a failed login), then sends a link to the new address (earlier
    /// change links stop working). The address changes only when the link is opened.
    ///
    /// # Errors
    /// [`ServiceError::Invalid`] on `email` (malformed, in a domain that may not register,
    /// the current address, or already registered, look-alikes included) or `password`
    /// (longer than the policy's maximum); [`ServiceError::Unauthorized`] when `password` is
    /// wrong or the account is gone; [`ServiceError::Unavailable`] when the database is down.
    pub async fn request_email_change(
        &self,
        principal: &Authorized<op::ManageAccount>,
        new_email: &str,
        password: String,
    ) -> Result<EmailLink, ServiceError> {
        self.password_policy.check_length_bound(&password)?;
        let email = Email::parse(new_email)?;
        let allowed = &self.config.allowed_email_domains;
        if !allowed.is_empty() && !aigw_domain::domain_in(email.as_str(), allowed) {
            return Err(FieldError::new("email", "is not in a domain that may register").into());
        }
        let id = principal.user_id().to_owned();
        let user = self.db.run(move |conn| Ok(users::find_by_id(conn, &id)?)).await?;
        let stored_hash = user.as_ref().map(|u| u.password_hash.clone());
        let verification = self.passwords.verify(password, stored_hash).await?;
        let Some(user) = user.filter(|_| verification != Verification::Mismatch) else {
            return Err(ServiceError::rejected(LOGIN_FAILED));
        };
        if email.as_str() == user.email {
            return Err(FieldError::new("email", "is the current address").into());
        }
        let now = self.clock.now();
        let issued = Self::new_token(&user.id, TokenPurpose::ChangeEmail, email.as_str(), now);
        let pending =
            EmailLink { email: email.as_str().to_owned(), expires_at: issued.row.expires_at };
        let link = self.link(VERIFY_PATH, &issued.token);
        let token = issued.token.expose().to_owned();
        let event =
            Event::new(AuditAction::EmailChangeRequested, Some(&user.id), Some(&user.id), now)
                .target(&user.id)
                .details(serde_json::json!({"old_email": user.email, "new_email": pending.email}));
        let (user_id, wanted) = (user.id.clone(), pending.email.clone());
        self.db
            .run(move |conn| {
                transaction(conn, |conn| {
                    if !users::lock(conn, &user_id)? {
                        return Err(ServiceError::revoked_credential(
                            "the account no longer exists",
                        ));
                    }
                    if users::email_taken(conn, &wanted, &user_id)? {
                        return Err(FieldError::new("email", "is already registered").into());
                    }
                    Self::store_token(conn, &issued)?;
                    event.insert(conn)
                })
            })
            .await?;
        let values = serde_json::json!({
            "name": user.name,
            "old_email": user.email,
            "link": link,
            "token": token,
            "hours": TokenPurpose::ChangeEmail.lifetime_secs() / 3600,
        });
        self.send_mail(MailKind::ChangeEmail, &pending.email, values);
        tracing::info!(user_id = %user.id, "e-mail change requested");
        Ok(pending)
    }
}
