//! Where a rendered message goes: an SMTP server through `lettre`, or the log.

use super::config::{EmailConfig, EmailTransportKind, SmtpSecurity};
use super::message::Rendered;
use lettre::message::{header::ContentType, Mailbox, MultiPart, SinglePart};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use secrecy::ExposeSecret;
use std::time::Duration;

/// Why a message was not sent.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// Worth another try later (a connection failure, a timeout, an SMTP 4xx reply).
    #[error("transient: {0}")]
    Transient(String),
    /// Never going to work (an SMTP 5xx reply, an address lettre cannot write).
    #[error("permanent: {0}")]
    Permanent(String),
}

/// A configured transport.
#[derive(Clone)]
pub enum Transport {
    /// Every message to the log (target `aigw::email`).
    Log {
        /// The `From` mailbox shown.
        from: Mailbox,
    },
    /// An SMTP server.
    Smtp {
        /// The `From` mailbox.
        from: Mailbox,
        /// lettre's pooled SMTP client.
        client: AsyncSmtpTransport<Tokio1Executor>,
    },
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Log { .. } => f.write_str("Transport::Log"),
            Transport::Smtp { .. } => f.write_str("Transport::Smtp"),
        }
    }
}

impl Transport {
    /// The transport `config` describes.
    ///
    /// # Errors
    /// A message naming the setting: `email.from` is not a mailbox, `email.host` is empty
    /// or not a host name for the `smtp` transport, a user without a password.
    pub fn from_config(config: &EmailConfig) -> Result<Self, String> {
        let from: Mailbox = config
            .from
            .parse()
            .map_err(|e| format!("email.from {:?} is not a mailbox: {e}", config.from))?;
        if config.transport == EmailTransportKind::Log {
            return Ok(Transport::Log { from });
        }
        let host = config.host.trim();
        if host.is_empty() {
            return Err("email.host is required with email.transport = \"smtp\"".to_owned());
        }
        let builder = match config.security {
            SmtpSecurity::Tls => AsyncSmtpTransport::<Tokio1Executor>::relay(host),
            SmtpSecurity::Starttls => AsyncSmtpTransport::<Tokio1Executor>::starttls_relay(host),
            SmtpSecurity::None => Ok(AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(host)),
        }
        .map_err(|e| format!("email.host {host:?}: {e}"))?;
        let mut builder = builder
            .port(config.port.unwrap_or_else(|| config.security.default_port()))
            .timeout(Some(Duration::from_secs(config.timeout_secs.max(1))));
        match (&config.user, &config.password) {
            (Some(user), Some(password)) => {
                let password = password.expose_secret().to_owned();
                builder = builder.credentials(Credentials::new(user.clone(), password));
            }
            (None, None) => {}
            _ => return Err("email.user and email.password go together".to_owned()),
        }
        Ok(Transport::Smtp { from, client: builder.build() })
    }

    /// Sends one message.
    ///
    /// # Errors
    /// [`SendError`]: transient or permanent.
    pub async fn send(&self, message: &Rendered) -> Result<(), SendError> {
        match self {
            Transport::Log { from } => {
                tracing::info!(
                    target: "aigw::email",
                    from = %from,
                    to = %message.to,
                    kind = message.kind.as_str(),
                    subject = %message.subject,
                    body = %message.text,
                    "e-mail (log transport: not sent)"
                );
                Ok(())
            }
            Transport::Smtp { from, client } => {
                let email = build(from, message)?;
                client.send(email).await.map(drop).map_err(|e| {
                    if e.is_permanent() {
                        SendError::Permanent(e.to_string())
                    } else {
                        SendError::Transient(e.to_string())
                    }
                })
            }
        }
    }
}

/// The RFC 5322 message: `multipart/alternative` with the text first and the HTML second.
fn build(from: &Mailbox, message: &Rendered) -> Result<Message, SendError> {
    let to: Mailbox = message
        .to
        .parse()
        .map_err(|e| SendError::Permanent(format!("recipient {:?}: {e}", message.to)))?;
    Message::builder()
        .from(from.clone())
        .to(to)
        .subject(&message.subject)
        .multipart(
            MultiPart::alternative()
                .singlepart(
                    SinglePart::builder()
                        .header(ContentType::TEXT_PLAIN)
                        .body(message.text.clone()),
                )
                .singlepart(
                    SinglePart::builder().header(ContentType::TEXT_HTML).body(message.html.clone()),
                ),
        )
        .map_err(|e| SendError::Permanent(format!("building the message: {e}")))
}
