//! Webhook deliveries: every node claims due deliveries (one attempt each, held for the
//! receiver's timeout and a margin) every 5 s, and at once when it queued one itself; POSTs
//! each, signed ([`super::signature`]); and records the outcome: `delivered` on a 2xx, else
//! another attempt after `webhook_retry_base_secs` doubled per attempt (at most an hour),
//! until `webhook_max_attempts` attempts failed (`failed`). A node that dies holding a claim
//! loses only that hold: the delivery is due again when it ends.

use super::config::AlertConfig;
use super::signature::sign;
use super::webhook_url::{check, PublicOnly};
use crate::db::Db;
use crate::metrics::name as metric;
use crate::metrics::Metrics;
use crate::seal::Sealer;
use crate::Clock;
use aigw_persistence::webhooks::{self, DeliveryRow, TeamWebhookRow};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Deliveries claimed at once, at most.
const BATCH: i64 = 20;
/// How often due deliveries are looked for without a wake-up (a node's own new deliveries
/// wake it at once; retries are due seconds apart).
const POLL: Duration = Duration::from_secs(5);
/// The longest wait between two looks while the database fails.
const MAX_IDLE: Duration = Duration::from_secs(30);
/// The longest wait between two attempts.
const MAX_BACKOFF_SECS: u64 = 3600;
/// The most of a receiver's error answer kept, in characters.
const MAX_ERROR_CHARS: usize = 200;

/// The delivery task's state.
pub(super) struct Deliveries {
    db: Db,
    clock: Clock,
    sealer: Sealer,
    metrics: Metrics,
    client: reqwest::Client,
    timeout: Duration,
    max_attempts: i32,
    retry_base_secs: u64,
    allow_private: bool,
    queued: Arc<Notify>,
}

/// What the delivery task reads and writes through.
pub(super) struct Ground {
    pub(super) db: Db,
    pub(super) clock: Clock,
    pub(super) sealer: Sealer,
    pub(super) metrics: Metrics,
}

/// What one attempt came to.
enum Outcome {
    Delivered(i32),
    Failed(Option<i32>, String),
}

impl Deliveries {
    /// The task of `config`, woken by `queued`.
    ///
    /// # Errors
    /// A message when the HTTP client cannot be built.
    pub(super) fn new(
        ground: Ground,
        config: &AlertConfig,
        queued: Arc<Notify>,
    ) -> Result<Self, String> {
        let timeout = Duration::from_secs(config.webhook_timeout_secs.max(1));
        let mut client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .user_agent(concat!("aigw/", env!("CARGO_PKG_VERSION")));
        if !config.webhook_allow_private {
            client = client.dns_resolver(Arc::new(PublicOnly));
        }
        let client = client.build().map_err(|e| format!("webhook HTTP client: {e}"))?;
        let Ground { db, clock, sealer, metrics } = ground;
        Ok(Self {
            db,
            clock,
            sealer,
            metrics,
            client,
            timeout,
            max_attempts: i32::try_from(config.webhook_max_attempts.max(1)).unwrap_or(i32::MAX),
            retry_base_secs: config.webhook_retry_base_secs.max(1),
            allow_private: config.webhook_allow_private,
            queued,
        })
    }

    /// Delivers until the task is aborted. While the database fails, it looks again after
    /// a doubling wait (at most [`MAX_IDLE`]), so that an outage does not add a query a second
    /// per node to the recovering database.
    pub(super) async fn run(&self) {
        let mut failures = 0u32;
        loop {
            match self.round().await {
                Ok(0) => {
                    failures = 0;
                    let _ = tokio::time::timeout(POLL, self.queued.notified()).await;
                }
                Ok(_) => failures = 0,
                Err(_) => {
                    failures = failures.saturating_add(1);
                    let wait = POLL.saturating_mul(1 << failures.min(5)).min(MAX_IDLE);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// Claims the due deliveries and makes one attempt at each; how many it claimed.
    async fn round(&self) -> Result<usize, crate::error::ServiceError> {
        let now = self.clock.now();
        let hold = chrono::Duration::from_std(self.timeout + Duration::from_secs(5))
            .unwrap_or(chrono::Duration::MAX);
        let claimed = self
            .db
            .run(move |conn| Ok(webhooks::claim_due(conn, now, hold, BATCH)?))
            .await
            .inspect_err(|e| tracing::warn!(error = %e, "webhook deliveries not claimed"))?;
        let count = claimed.len();
        let attempts = claimed.into_iter().map(|(delivery, hook)| async move {
            let outcome = self.attempt(&delivery, &hook).await;
            self.record(&delivery, outcome).await;
        });
        futures_util::future::join_all(attempts).await;
        Ok(count)
    }

    /// POSTs `delivery` to `hook`, signed.
    async fn attempt(&self, delivery: &DeliveryRow, hook: &TeamWebhookRow) -> Outcome {
        if let Err(e) = check(&hook.url, self.allow_private) {
            return Outcome::Failed(None, format!("url {}", e.issue));
        }
        let Some(secret) = self.sealer.open(&hook.team_id, &hook.secret_sealed) else {
            return Outcome::Failed(None, "the signing secret cannot be read".to_owned());
        };
        let timestamp = self.clock.now().timestamp();
        let body = delivery.payload.clone().into_bytes();
        let Some(signature) = sign(&secret, &delivery.id, timestamp, &body) else {
            return Outcome::Failed(None, "the signing secret is malformed".to_owned());
        };
        let sent = self
            .client
            .post(&hook.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("webhook-id", &delivery.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(body)
            .send()
            .await;
        match sent {
            Ok(answer) if answer.status().is_success() => {
                Outcome::Delivered(i32::from(answer.status().as_u16()))
            }
            Ok(answer) => {
                let status = i32::from(answer.status().as_u16());
                Outcome::Failed(Some(status), format!("the receiver answered {status}"))
            }
            Err(e) => {
                let what =
                    if e.is_timeout() { "no answer in time".to_owned() } else { e.to_string() };
                Outcome::Failed(None, what.chars().take(MAX_ERROR_CHARS).collect())
            }
        }
    }

    /// Writes the outcome of an attempt at `delivery` and counts it.
    async fn record(&self, delivery: &DeliveryRow, outcome: Outcome) {
        let now = self.clock.now();
        let last = delivery.attempts >= self.max_attempts;
        let label = match &outcome {
            Outcome::Delivered(_) => "delivered",
            Outcome::Failed(..) if last => "failed",
            Outcome::Failed(..) => "retried",
        };
        self.metrics.count(metric::WEBHOOK_DELIVERIES_TOTAL, &[("outcome", label)]);
        let (id, next) = (delivery.id.clone(), now + self.backoff(delivery.attempts));
        let written = self
            .db
            .run(move |conn| {
                match outcome {
                    Outcome::Delivered(status) => webhooks::delivered(conn, &id, status, now)?,
                    Outcome::Failed(status, error) if last => {
                        webhooks::give_up(conn, &id, status, &error)?;
                    }
                    Outcome::Failed(status, error) => {
                        webhooks::retry_at(conn, &id, status, &error, next)?;
                    }
                }
                Ok(())
            })
            .await;
        if let Err(e) = written {
            // The claim ends by itself: the attempt is made again.
            tracing::warn!(error = %e, delivery = %delivery.id, "webhook delivery outcome not written");
        }
    }

    /// The wait after failed attempt number `attempt` (1 for the first).
    fn backoff(&self, attempt: i32) -> chrono::Duration {
        let doublings = u32::try_from(attempt.saturating_sub(1)).unwrap_or(0).min(20);
        let secs = self.retry_base_secs.saturating_mul(1 << doublings).min(MAX_BACKOFF_SECS);
        chrono::Duration::seconds(i64::try_from(secs).unwrap_or(3600))
    }
}
