//! `[email]`: how aigw sends e-mail.

use secrecy::SecretString;
use serde::Deserialize;

/// `[email]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EmailConfig {
    /// `log` (default: every message is written to the log under the target `aigw::email`,
    /// links and codes included; for development) or `smtp`.
    pub transport: EmailTransportKind,
    /// The SMTP server's host name (transport `smtp`).
    pub host: String,
    /// The SMTP port; default by `security`: 465 for `tls`, 587 for `starttls`, 25 for `none`.
    pub port: Option<u16>,
    /// `starttls` (default), `tls` (implicit TLS) or `none` (plain text: a local relay only).
    pub security: SmtpSecurity,
    /// SMTP user name; with `password`, aigw authenticates (PLAIN or LOGIN, over TLS).
    pub user: Option<String>,
    /// SMTP password.
    pub password: Option<SecretString>,
    /// The `From` mailbox, e.g. `aigw <no-reply@example.com>` (default
    /// `aigw <no-reply@localhost>`).
    pub from: String,
    /// Seconds one SMTP conversation may take (default 10).
    pub timeout_secs: u64,
    /// Messages waiting to be sent, at most (default 1000); a message past it is dropped and
    /// counted (`outcome="dropped"`).
    pub queue_capacity: usize,
    /// Messages sent at once (default 4).
    pub senders: usize,
    /// Tries per message before it is given up (default 5); a permanent refusal (an SMTP 5xx
    /// reply) is not tried again.
    pub max_attempts: u32,
    /// The first retry's delay in milliseconds (default 1000); each later one doubles, up to
    /// a minute.
    pub retry_base_ms: u64,
}

impl Default for EmailConfig {
    fn default() -> Self {
        Self {
            transport: EmailTransportKind::Log,
            host: String::new(),
            port: None,
            security: SmtpSecurity::Starttls,
            user: None,
            password: None,
            from: "aigw <no-reply@localhost>".to_owned(),
            timeout_secs: 10,
            queue_capacity: 1000,
            senders: 4,
            max_attempts: 5,
            retry_base_ms: 1000,
        }
    }
}

/// `email.transport`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmailTransportKind {
    /// Write each message to the log.
    #[default]
    Log,
    /// Send through the SMTP server of `email.host`.
    Smtp,
}

/// `email.security`: how the SMTP connection is protected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SmtpSecurity {
    /// Plain connection upgraded with STARTTLS, which is required (RFC 3207).
    #[default]
    Starttls,
    /// TLS from the first byte (RFC 8314).
    Tls,
    /// No encryption and no authentication: only for a relay on the same host or network.
    None,
}

impl SmtpSecurity {
    /// The port used when `email.port` is not set.
    pub fn default_port(self) -> u16 {
        match self {
            SmtpSecurity::Starttls => 587,
            SmtpSecurity::Tls => 465,
            SmtpSecurity::None => 25,
        }
    }
}
