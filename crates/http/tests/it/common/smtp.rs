//! A real SMTP server for the account e-mail tests: aiosmtpd (Python, from PyPI; the test
//! script installs it into `.venv-smtp`) on a free port, storing every message in a Maildir
//! the test reads. Killed when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A message the server received.
#[derive(Debug, Clone)]
pub struct ReceivedMail {
    pub to: String,
    pub subject: String,
    pub text: String,
    pub html: String,
}

impl ReceivedMail {
    /// The first `prefix…` token in the text body (50 characters: prefix and 44 base62).
    pub fn token(&self, prefix: &str) -> String {
        let at = self.text.find(prefix).unwrap_or_else(|| panic!("no {prefix} token in {self:?}"));
        self.text[at..].chars().take(50).collect()
    }

    /// The first link in the text body.
    pub fn link(&self) -> String {
        let at = self.text.find("http").unwrap_or_else(|| panic!("no link in {self:?}"));
        self.text[at..].split_whitespace().next().unwrap().to_owned()
    }
}

pub struct SmtpServer {
    pub port: u16,
    child: Child,
    maildir: tempfile::TempDir,
}

impl Drop for SmtpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A Python interpreter that has aiosmtpd: `$AIGW_TEST_SMTP_PYTHON`, the repository's
/// `.venv-smtp`, or `python3`.
fn python() -> Option<String> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv-smtp/bin/python");
    let candidates = [
        std::env::var("AIGW_TEST_SMTP_PYTHON").ok(),
        Some(venv.display().to_string()),
        Some("python3".to_owned()),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import aiosmtpd"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

impl SmtpServer {
    /// Starts one, or returns `None` after a loud message when no Python with aiosmtpd is
    /// found (a failure under `CI=true`).
    pub fn start() -> Option<Self> {
        let Some(python) = python() else {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!("CI=true but aiosmtpd is not installed: the e-mail tests cannot run");
            }
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! aiosmtpd not found: SKIPPING this e-mail test.                    !!!\n\
                 !!! Run scripts/test.sh (it installs it) or set AIGW_TEST_SMTP_PYTHON. !!!\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        Some(Self::spawn(&python, port))
    }

    /// Starts one on `port` (a test that first lets the port refuse connections).
    ///
    /// # Panics
    /// When no Python with aiosmtpd is found (call [`SmtpServer::start`] first to skip).
    pub fn start_on(port: u16) -> Self {
        Self::spawn(&python().expect("a Python with aiosmtpd"), port)
    }

    fn spawn(python: &str, port: u16) -> Self {
        let maildir = tempfile::tempdir().unwrap();
        let child = Command::new(python)
            .args(["-m", "aiosmtpd", "-n", "-l", &format!("127.0.0.1:{port}")])
            .args(["-c", "aiosmtpd.handlers.Mailbox"])
            .arg(maildir.path().join("mail"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("starting aiosmtpd with {python}: {e}"));
        let what = format!("aiosmtpd did not start on {port}");
        super::eventually_blocking(&what, Duration::from_secs(20), || super::listening(port));
        Self { port, child, maildir }
    }

    /// Points `settings` at this server (plain SMTP, quick retries).
    pub fn configure(&self, settings: &mut aigw_http::settings::Settings) {
        use aigw_service::email::{EmailTransportKind, SmtpSecurity};
        settings.email.transport = EmailTransportKind::Smtp;
        settings.email.host = "127.0.0.1".to_owned();
        settings.email.port = Some(self.port);
        settings.email.security = SmtpSecurity::None;
        settings.email.from = "aigw <no-reply@aigw.test>".to_owned();
        settings.email.retry_base_ms = 50;
        settings.server.public_url = Some("https://gw.example.test".to_owned());
    }

    /// Every message received so far.
    pub fn messages(&self) -> Vec<ReceivedMail> {
        let mut found = Vec::new();
        for folder in ["new", "cur"] {
            let Ok(entries) = std::fs::read_dir(self.maildir.path().join("mail").join(folder))
            else {
                continue;
            };
            // In the order they arrived: by the time each file was written (a Maildir name's
            // microseconds are not zero-padded, so the names do not sort by time).
            let mut paths: Vec<_> = entries
                .flatten()
                .map(|e| {
                    let written = e.metadata().and_then(|m| m.modified()).ok();
                    (written, e.path())
                })
                .collect();
            paths.sort();
            let paths = paths.into_iter().map(|(_, path)| path);
            for path in paths {
                let raw = std::fs::read(&path).unwrap();
                let parsed = mail_parser::MessageParser::default().parse(&raw).unwrap();
                let to = parsed
                    .to()
                    .and_then(|a| a.first())
                    .and_then(|a| a.address())
                    .unwrap_or_default()
                    .to_owned();
                found.push(ReceivedMail {
                    to,
                    subject: parsed.subject().unwrap_or_default().to_owned(),
                    text: parsed.body_text(0).map(|t| t.into_owned()).unwrap_or_default(),
                    html: parsed.body_html(0).map(|t| t.into_owned()).unwrap_or_default(),
                });
            }
        }
        found
    }

    /// Waits (up to 10 s) for the `n`-th message (counting from 1) to `to` whose subject
    /// contains `subject`.
    pub async fn wait_for(&self, to: &str, subject: &str, n: usize) -> ReceivedMail {
        let arrived = || {
            let messages = self.messages();
            let mut matching =
                messages.iter().filter(|m| m.to == to && m.subject.contains(subject));
            std::future::ready(match matching.nth(n - 1) {
                Some(message) => Ok(message.clone()),
                None => Err(messages
                    .iter()
                    .map(|m| (m.to.clone(), m.subject.clone()))
                    .collect::<Vec<_>>()),
            })
        };
        let what = format!("no message {n} to {to} about {subject:?} (received below)");
        super::eventually(&what, Duration::from_secs(10), arrived).await
    }

    /// How many messages `to` received.
    pub fn count_to(&self, to: &str) -> usize {
        self.messages().iter().filter(|m| m.to == to).count()
    }
}
