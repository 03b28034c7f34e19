//! Where account messages go and where their links point ([`AccountMail`]), as the
//! authentication service holds it.

use crate::email::Mailer;
use aigw_domain::account_token::AccountToken;
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Account mail jobs running at once on a node, at most; one past it is dropped (counted as
/// `aigw_emails_total{outcome="dropped"}`).
const MAX_JOBS: usize = 64;

/// What the account e-mail flows need: where messages go and where links point.
#[derive(Debug, Clone)]
pub struct AccountMail {
    pub(crate) mailer: Mailer,
    public_url: String,
    pub(crate) jobs: Arc<Semaphore>,
}

impl AccountMail {
    /// Messages go to `mailer`; links start with `public_url` (`server.public_url`, e.g.
    /// `https://gw.example.com`; a trailing `/` is ignored).
    pub fn new(mailer: Mailer, public_url: &str) -> Self {
        Self {
            mailer,
            public_url: public_url.trim_end_matches('/').to_owned(),
            jobs: Arc::new(Semaphore::new(MAX_JOBS)),
        }
    }

    /// Waits until the queued messages are sent or given up, or `within` has passed (see
    /// [`Mailer::drain`]).
    pub async fn drain(&self, within: std::time::Duration) -> bool {
        self.mailer.drain(within).await
    }

    /// The link of the page at `path` (starting with `/`).
    pub(crate) fn page(&self, path: &str) -> String {
        format!("{}{path}", self.public_url)
    }

    /// The link of a page at `path` (starting with `/`) carrying `token`.
    pub(crate) fn link(&self, path: &str, token: &AccountToken) -> String {
        format!("{}{path}?token={}", self.public_url, token.expose())
    }
}
