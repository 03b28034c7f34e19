//! The flows that reach a user through their mailbox: e-mail verification
//! ([`verification`]), e-mail change ([`email_change`]) and password reset
//! ([`password_reset`]), each a part of [`AccountEmail`]; [`pruning`] deletes the tokens (and
//! MFA challenges) that ended. They share [`AccountMail`] (the
//! mailer, the public URL links point to, and the bound on background work) and the single-use
//! tokens of [`aigw_domain::account_token`], stored as digests by
//! `aigw_persistence::account_tokens`.
//!
//! A message is never sent on the request's path: the use case queues it on the
//! [`Mailer`](crate::email::Mailer). A password reset request does all its work (the lookup
//! included) in the background, so its answer takes the same time whether or not the address
//! has an account.

pub mod email_change;
pub mod password_reset;
pub mod pruning;
pub mod verification;

use crate::config::AuthConfig;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
pub use crate::email::account_mail::AccountMail;
use crate::email::{Mail, MailKind};
use crate::error::ServiceError;
use crate::metrics::name as metric;
use crate::metrics::Metrics;
use crate::password::PasswordHasher;
use crate::Clock;
use aigw_domain::account_token::{AccountToken, TokenPurpose};
use aigw_domain::PasswordPolicy;
use aigw_domain::UserId;
use aigw_persistence::account_tokens::{self, AccountTokenRow};
use aigw_persistence::DbConnection;
use chrono::{DateTime, Utc};
use std::future::Future;
use std::sync::Arc;

/// A link on its way to an address, waiting to be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmailLink {
    /// The address it was sent to, normalised.
    pub email: String,
    /// When it stops working, UTC.
    pub expires_at: DateTime<Utc>,
}

/// The account e-mail flows: verification, e-mail change and password reset. Built from the
/// [`ServiceContext`] and, once [`AccountEmail::with_account_mail`] gave it one, the account
/// mail setup (without one, messages are logged as not sent).
#[derive(Debug, Clone)]
pub struct AccountEmail {
    pub(crate) db: Db,
    pub(crate) clock: Clock,
    pub(crate) cache: CredentialCache,
    pub(crate) config: Arc<AuthConfig>,
    pub(crate) passwords: PasswordHasher,
    pub(crate) password_policy: PasswordPolicy,
    pub(crate) metrics: Metrics,
    /// Where account messages go (see [`AccountMail`]).
    pub(crate) mail: Option<AccountMail>,
}

/// A freshly issued token: the stored row and the secret to send.
pub(crate) struct Issued {
    pub(crate) row: AccountTokenRow,
    pub(crate) token: AccountToken,
}

impl AccountEmail {
    /// The account e-mail flows on `ctx`, with no mail setup yet.
    pub fn new(ctx: &ServiceContext) -> Self {
        Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            config: ctx.config.clone(),
            passwords: ctx.passwords.clone(),
            password_policy: ctx.password_policy,
            metrics: ctx.metrics.clone(),
            mail: None,
        }
    }

    /// The account mail setup; without one (a library caller that never set it) messages are
    /// logged as not sent.
    pub fn with_account_mail(mut self, mail: AccountMail) -> Self {
        self.mail = Some(mail);
        self
    }

    /// A new token of `purpose` for user `user_id`, sent to `email`, issued at `now` (valid
    /// for the purpose's lifetime).
    pub(crate) fn new_token(
        user_id: &str,
        purpose: TokenPurpose,
        email: &str,
        now: DateTime<Utc>,
    ) -> Issued {
        let token = AccountToken::generate(purpose, &mut rand::rngs::OsRng);
        let row = AccountTokenRow {
            id: aigw_domain::AccountTokenId::generate(),
            user_id: UserId::from(user_id),
            purpose,
            email: email.to_owned(),
            created_at: now,
            expires_at: now + chrono::Duration::seconds(purpose.lifetime_secs()),
        };
        Issued { row, token }
    }

    /// Stores `issued` (inside the caller's transaction), withdrawing the user's earlier
    /// unused tokens of the same purpose: only the newest link works.
    pub(crate) fn store_token(
        conn: &mut DbConnection,
        issued: &Issued,
    ) -> Result<(), ServiceError> {
        let row = &issued.row;
        account_tokens::withdraw(conn, &row.user_id, &[row.purpose], row.created_at)?;
        account_tokens::insert(conn, row, issued.token.digest().as_str())?;
        Ok(())
    }

    /// Queues message `kind` to `to` with the template values `values`.
    pub(crate) fn send_mail(&self, kind: MailKind, to: &str, values: serde_json::Value) {
        match &self.mail {
            Some(mail) => mail.mailer.send(Mail { kind, to: to.to_owned(), values }),
            None => tracing::warn!(kind = kind.as_str(), "no mailer configured: e-mail not sent"),
        }
    }

    /// Whether messages are sent (a mailer is configured).
    pub(crate) fn can_send(&self) -> bool {
        self.mail.is_some()
    }

    /// The link of the page at `path` (the path alone without a mailer).
    pub(crate) fn page_link(&self, path: &str) -> String {
        match &self.mail {
            Some(mail) => mail.page(path),
            None => path.to_owned(),
        }
    }

    /// The link for `token` to the page at `path`.
    pub(crate) fn link(&self, path: &str, token: &AccountToken) -> String {
        match &self.mail {
            Some(mail) => mail.link(path, token),
            None => format!("{path}?token={}", token.expose()),
        }
    }

    /// Runs `job` in the background with the request's audit context, unless
    /// [`MAX_JOBS`] are running already (then it is dropped and counted). Never waits.
    pub(crate) fn spawn_mail_job<F>(&self, kind: MailKind, job: F)
    where
        F: Future<Output = Result<(), ServiceError>> + Send + 'static,
    {
        let permit = self.mail.as_ref().map(|m| Arc::clone(&m.jobs).try_acquire_owned());
        let permit = match permit {
            Some(Ok(permit)) => Some(permit),
            None => None,
            Some(Err(_)) => {
                let labels = [("kind", kind.as_str()), ("outcome", "dropped")];
                self.metrics.count(metric::EMAILS_TOTAL, &labels);
                tracing::warn!(kind = kind.as_str(), "account mail job dropped: too many running");
                return;
            }
        };
        let context = crate::audit::current_context();
        tokio::spawn(crate::audit::with_context(context, async move {
            let _permit = permit;
            if let Err(e) = job.await {
                tracing::warn!(kind = kind.as_str(), error = %e, "account mail job failed");
            }
        }));
    }
}

/// The one answer to a token that is unknown, used, expired, withdrawn or of another purpose.
pub(crate) fn token_refused() -> ServiceError {
    aigw_domain::FieldError::new("token", "is invalid, used or expired").into()
}
