//! Outgoing e-mail: the account messages (address verification, e-mail change, password
//! reset and their notices), rendered from templates in plain text and HTML, and sent off
//! the request path.
//!
//! - [`config`]: `[email]`, the transport (`log` or `smtp`) and the queue's bounds;
//! - [`message`]: what each message says ([`Mail`]) and its rendering ([`Templates`]);
//! - [`transport`]: SMTP through `lettre` (TLS, STARTTLS, authentication), or the log;
//! - [`outbox`]: the [`Mailer`] a use case hands a message to: a bounded queue, a few
//!   senders, retries with backoff, and `aigw_emails_total{kind, outcome}`.
//!
//! A message never blocks a request: [`Mailer::send`] only queues it. Queued messages live in
//! the node's memory; a node that stops loses those not yet sent (docs/accounts.md).

pub mod account_mail;
pub mod config;
pub mod message;
pub mod outbox;
pub mod transport;

pub use config::{EmailConfig, EmailTransportKind, SmtpSecurity};
pub use message::{Mail, MailKind, Templates};
pub use outbox::Mailer;
