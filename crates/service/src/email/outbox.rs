//! The [`Mailer`]: use cases hand it messages; a few sender tasks render and send them, with
//! retries, off the request path.

use super::config::EmailConfig;
use super::message::{Mail, Rendered, Templates};
use super::transport::{SendError, Transport};
use crate::metrics::{name as metric, Metrics};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Mutex};

/// The longest wait between two tries of one message.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Queues account messages for sending. Cheap to clone; every clone feeds the same queue.
///
/// Counts `aigw_emails_total{kind, outcome}`: `sent`, `retried` (a failed try that will be
/// tried again), `failed` (given up) and `dropped` (the queue was full).
#[derive(Debug, Clone)]
pub struct Mailer {
    queue: mpsc::Sender<Mail>,
    metrics: Metrics,
    /// Messages queued or being sent.
    pending: Arc<AtomicUsize>,
}

impl Mailer {
    /// Starts `config.senders` sender tasks on the current tokio runtime; they end when every
    /// clone of the returned mailer is dropped and the queue is empty.
    ///
    /// # Errors
    /// A message naming the `[email]` setting that is wrong (see
    /// [`Transport::from_config`]).
    pub fn start(config: &EmailConfig, metrics: Metrics) -> Result<Self, String> {
        let transport = Transport::from_config(config)?;
        let (queue, receiver) = mpsc::channel(config.queue_capacity.max(1));
        let pending = Arc::new(AtomicUsize::new(0));
        let shared = Arc::new(Sender {
            pending: Arc::clone(&pending),
            receiver: Mutex::new(receiver),
            transport,
            templates: Templates::default(),
            metrics: metrics.clone(),
            max_attempts: config.max_attempts.max(1),
            retry_base: Duration::from_millis(config.retry_base_ms.max(1)),
        });
        for _ in 0..config.senders.max(1) {
            tokio::spawn(Arc::clone(&shared).run());
        }
        Ok(Self { queue, metrics, pending })
    }

    /// Queues `mail`; never waits. A full queue drops it (counted, and logged at `warn`).
    pub fn send(&self, mail: Mail) {
        self.pending.fetch_add(1, Ordering::AcqRel);
        if let Err(e) = self.queue.try_send(mail) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            let mail = match e {
                mpsc::error::TrySendError::Full(m) | mpsc::error::TrySendError::Closed(m) => m,
            };
            let kind = mail.kind.as_str();
            self.metrics.count(metric::EMAILS_TOTAL, &[("kind", kind), ("outcome", "dropped")]);
            tracing::warn!(kind, "e-mail dropped: the queue is full");
        }
    }

    /// Waits until every queued message is sent or given up, or `within` has passed (a
    /// command that exits right after queueing). Returns whether the queue emptied.
    pub async fn drain(&self, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while self.pending.load(Ordering::Acquire) > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// What the sender tasks share.
struct Sender {
    pending: Arc<AtomicUsize>,
    receiver: Mutex<mpsc::Receiver<Mail>>,
    transport: Transport,
    templates: Templates,
    metrics: Metrics,
    max_attempts: u32,
    retry_base: Duration,
}

impl Sender {
    async fn run(self: Arc<Self>) {
        loop {
            let next = self.receiver.lock().await.recv().await;
            let Some(mail) = next else { return };
            let kind = mail.kind.as_str();
            match self.templates.render(&mail) {
                Ok(rendered) => self.deliver(&rendered).await,
                Err(e) => {
                    self.metrics
                        .count(metric::EMAILS_TOTAL, &[("kind", kind), ("outcome", "failed")]);
                    tracing::error!(kind, error = %e, "e-mail not rendered");
                }
            }
            self.pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Sends `message`, trying again after transient failures with doubling delays.
    async fn deliver(&self, message: &Rendered) {
        let kind = message.kind.as_str();
        let mut delay = self.retry_base;
        for attempt in 1..=self.max_attempts {
            match self.transport.send(message).await {
                Ok(()) => {
                    self.metrics
                        .count(metric::EMAILS_TOTAL, &[("kind", kind), ("outcome", "sent")]);
                    tracing::debug!(kind, attempt, "e-mail sent");
                    return;
                }
                Err(SendError::Transient(e)) if attempt < self.max_attempts => {
                    self.metrics
                        .count(metric::EMAILS_TOTAL, &[("kind", kind), ("outcome", "retried")]);
                    tracing::warn!(kind, attempt, error = %e, retry_in_ms = delay.as_millis() as u64, "e-mail not sent; trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(MAX_BACKOFF);
                }
                Err(e) => {
                    self.metrics
                        .count(metric::EMAILS_TOTAL, &[("kind", kind), ("outcome", "failed")]);
                    tracing::error!(kind, attempt, error = %e, "e-mail given up");
                    return;
                }
            }
        }
    }
}
