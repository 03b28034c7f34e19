//! The messages aigw sends and their rendering: one plain-text and one HTML template per kind
//! (`templates/`, compiled into the binary; HTML is auto-escaped, so a display name such as
//! `<img src=x>` arrives as text).

use minijinja::Environment;
use serde::Serialize;

/// The product name the messages use.
const PRODUCT: &str = "aigw";

/// What a message is about (the `kind` label of `aigw_emails_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MailKind {
    /// A link that verifies the account's address.
    VerifyEmail,
    /// A link, sent to a new address, that moves the account to it.
    ChangeEmail,
    /// A notice to the old address that the account moved.
    EmailChanged,
    /// A password reset link.
    PasswordReset,
    /// A notice that the password was reset.
    PasswordChanged,
    /// A notice that a key was revoked because its secret was reported leaked.
    KeyLeaked,
    /// An invitation to join a team, once the address is confirmed.
    TeamInvitation,
    /// An invitation to create an account (`auth.registration = "invite"`), with its code.
    RegistrationInvitation,
    /// A notice that a team's owner or admin made an API key for the recipient.
    MemberKeyCreated,
    /// A budget passed an alert threshold (docs/alerts.md).
    BudgetAlert,
}

impl MailKind {
    /// Every kind.
    pub const ALL: [MailKind; 10] = [
        MailKind::VerifyEmail,
        MailKind::ChangeEmail,
        MailKind::EmailChanged,
        MailKind::PasswordReset,
        MailKind::PasswordChanged,
        MailKind::KeyLeaked,
        MailKind::TeamInvitation,
        MailKind::RegistrationInvitation,
        MailKind::MemberKeyCreated,
        MailKind::BudgetAlert,
    ];

    /// The template name and metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            MailKind::VerifyEmail => "verify_email",
            MailKind::ChangeEmail => "change_email",
            MailKind::EmailChanged => "email_changed",
            MailKind::PasswordReset => "password_reset",
            MailKind::PasswordChanged => "password_changed",
            MailKind::KeyLeaked => "key_leaked",
            MailKind::TeamInvitation => "team_invitation",
            MailKind::RegistrationInvitation => "registration_invitation",
            MailKind::MemberKeyCreated => "member_key_created",
            MailKind::BudgetAlert => "budget_alert",
        }
    }

    fn subject(self) -> &'static str {
        match self {
            MailKind::VerifyEmail => "Confirm your e-mail address",
            MailKind::ChangeEmail => "Confirm your new e-mail address",
            MailKind::EmailChanged => "Your e-mail address was changed",
            MailKind::PasswordReset => "Reset your password",
            MailKind::PasswordChanged => "Your password was reset",
            MailKind::KeyLeaked => "An API key of yours was revoked",
            MailKind::TeamInvitation => "You are invited to a team",
            MailKind::RegistrationInvitation => "You are invited to create an account",
            MailKind::MemberKeyCreated => "An API key was made for you",
            MailKind::BudgetAlert => "A budget passed an alert threshold",
        }
    }
}

/// One message to send: its kind, recipient and the values its templates show.
#[derive(Debug, Clone)]
pub struct Mail {
    /// What it is about.
    pub kind: MailKind,
    /// The recipient's address.
    pub to: String,
    /// Values for the templates (`name`, `link`, `token`, …).
    pub values: serde_json::Value,
}

/// A message ready for a transport.
#[derive(Clone)]
pub struct Rendered {
    /// What it is about.
    pub kind: MailKind,
    /// The recipient's address.
    pub to: String,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    pub text: String,
    /// The HTML body.
    pub html: String,
}

impl std::fmt::Debug for Rendered {
    // The bodies carry single-use tokens: never in a debug print.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rendered").field("kind", &self.kind).field("to", &self.to).finish()
    }
}

/// The compiled templates.
#[derive(Debug)]
pub struct Templates {
    env: Environment<'static>,
}

macro_rules! templates {
    ($($name:literal),* $(,)?) => {
        [$(($name, include_str!(concat!("templates/", $name)))),*]
    };
}

impl Default for Templates {
    fn default() -> Self {
        let mut env = Environment::new();
        let sources = templates!(
            "layout.html",
            "verify_email.txt",
            "verify_email.html",
            "change_email.txt",
            "change_email.html",
            "email_changed.txt",
            "email_changed.html",
            "password_reset.txt",
            "password_reset.html",
            "password_changed.txt",
            "password_changed.html",
            "key_leaked.txt",
            "key_leaked.html",
            "team_invitation.txt",
            "team_invitation.html",
            "registration_invitation.txt",
            "registration_invitation.html",
            "member_key_created.txt",
            "member_key_created.html",
            "budget_alert.txt",
            "budget_alert.html",
        );
        for (name, source) in sources {
            // The templates are part of the binary and the unit tests render every one; a
            // broken one would fail each message of its kind (counted as `failed`).
            if let Err(e) = env.add_template(name, source) {
                tracing::error!(template = name, error = %e, "e-mail template does not compile");
            }
        }
        Self { env }
    }
}

#[derive(Serialize)]
struct Context<'a> {
    product: &'static str,
    to: &'a str,
    #[serde(flatten)]
    values: &'a serde_json::Value,
}

impl Templates {
    /// Renders `mail` (text and HTML).
    ///
    /// # Errors
    /// A template error (a value the template needs is missing or of the wrong type).
    pub fn render(&self, mail: &Mail) -> Result<Rendered, minijinja::Error> {
        let name = mail.kind.as_str();
        let context = Context { product: PRODUCT, to: &mail.to, values: &mail.values };
        let text = self.env.get_template(&format!("{name}.txt"))?.render(&context)?;
        let html = self.env.get_template(&format!("{name}.html"))?.render(&context)?;
        Ok(Rendered {
            kind: mail.kind,
            to: mail.to.clone(),
            subject: format!("{PRODUCT}: {}", mail.kind.subject()),
            text,
            html,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    fn values() -> serde_json::Value {
        serde_json::json!({
            "name": "<img src=x onerror=alert(1)>",
            "inviter": "<img src=x onerror=alert(1)>",
            "team": "<b>ml</b>",
            "role": "member",
            "link": "https://gw.example.com/account/verify-email?token=aigwe_x&a=b",
            "token": "aigwe_x",
            "hours": 24,
            "minutes": 30,
            "old_email": "old@example.com",
            "new_email": "new@example.com",
            "at": "2026-11-29T10:00:00Z",
            "until": "2026-12-06T10:00:00Z",
            "key_name": "<b>ci</b>",
            "key_prefix": "aigw_AbCdEfG",
            "url": "https://github.com/o/r/blob/main/.env",
            "source": "content",
            "what": "the team “<b>ml</b>”",
            "threshold": 80,
            "refused": false,
            "spent": "80.00",
            "held": "80.00",
            "limit": "100.00",
            "period": "monthly",
            "reset": "2026-12-01T00:00:00Z",
        })
    }

    #[test]
    fn every_kind_renders_and_html_escapes_what_users_wrote() {
        let templates = Templates::default();
        for kind in MailKind::ALL {
            let mail = Mail { kind, to: "ann@example.com".into(), values: values() };
            let r = templates.render(&mail).unwrap_or_else(|e| panic!("{kind:?}: {e:#}"));
            assert!(r.text.contains("<img src=x onerror=alert(1)>"), "{kind:?}: {}", r.text);
            assert!(!r.html.contains("<img"), "{kind:?}: {}", r.html);
            assert!(r.html.contains("&lt;img"), "{kind:?}: {}", r.html);
            assert!(r.subject.starts_with("aigw: "));
            assert!(!format!("{r:?}").contains("aigwe_x"));
        }
    }

    #[test]
    fn links_keep_their_query_in_text_and_are_escaped_in_html() {
        let templates = Templates::default();
        let mail =
            Mail { kind: MailKind::VerifyEmail, to: "ann@example.com".into(), values: values() };
        let r = templates.render(&mail).unwrap();
        assert!(r.text.contains("verify-email?token=aigwe_x&a=b"));
        assert!(r.html.contains("verify-email?token=aigwe_x&amp;a=b"));
    }
}
