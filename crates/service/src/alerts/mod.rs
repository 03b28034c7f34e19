//! Budget alerts: every budget (a key's, a member's in a team, a team's, a user's) tells its
//! people when its spend passes each of `alerts.thresholds` (50, 80 and 100 % by default),
//! once per budget period, by e-mail (the key's owner, the member, the team's owners and
//! admins, the user) and, for budgets of a team, by a POST to the team's webhook, signed as
//! Standard Webhooks define and retried with backoff until the receiver takes it. Each team's
//! budget use is a gauge in `/metrics`. docs/alerts.md.
//!
//! - [`watch`]: the spend signals of usage flushes and refusals, turned into alerts, each
//!   claimed once across nodes by its row.
//! - [`deliver`]: the webhook deliveries, claimed by one node per attempt.
//! - [`webhooks`]: a team's webhook, set, read and removed by its owners and admins, and its
//!   deliveries listed.

mod alert;
mod config;
mod deliver;
mod signature;
mod watch;
mod webhook_url;
mod webhooks;

pub use alert::BUDGET_EVENT;
pub use config::AlertConfig;
pub use signature::{sign, SECRET_PREFIX};
pub use webhooks::{CreatedWebhook, DeliveryView, WebhookView};

use crate::account_email::AccountEmail;
use crate::context::ServiceContext;
use crate::credential_cache::CredentialCache;
use crate::db::Db;
use crate::email::MailKind;
use crate::levels::PlatformSpend;
use crate::metrics::name as metric;
use crate::metrics::Metrics;
use crate::seal::Sealer;
use crate::spend_signal::{SpendSignal, SpendSignals};
use crate::Clock;
use alert::Alert;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

/// How long the watcher gathers signals before it reads the budgets they touched.
const COALESCE: std::time::Duration = std::time::Duration::from_millis(200);

/// Budget alerts and team webhooks (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct BudgetAlerts {
    db: Db,
    clock: Clock,
    cache: CredentialCache,
    sealer: Sealer,
    metrics: Metrics,
    spend: Arc<PlatformSpend>,
    email: AccountEmail,
    config: Arc<AlertConfig>,
    thresholds: Arc<Vec<u32>>,
    /// Teams whose budget use this node exports (at most `config.team_gauges`).
    gauged: Arc<Mutex<HashSet<String>>>,
    /// Wakes the delivery task when this node queued a delivery.
    queued: Arc<Notify>,
}

/// The alerts' background tasks; they stop when this is dropped.
#[derive(Debug, Default)]
pub struct AlertTasks {
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for AlertTasks {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl BudgetAlerts {
    /// Alerts on `ctx`'s database, e-mailed through `email`, as `config` says.
    ///
    /// # Errors
    /// A message naming the `[alerts]` setting that is wrong.
    pub fn new(
        ctx: &ServiceContext,
        email: AccountEmail,
        config: AlertConfig,
    ) -> Result<Self, String> {
        let thresholds = config.checked_thresholds()?;
        Ok(Self {
            db: ctx.db.clone(),
            clock: ctx.clock.clone(),
            cache: ctx.cache.clone(),
            sealer: ctx.sealer.clone(),
            metrics: ctx.metrics.clone(),
            spend: ctx.spend.clone(),
            email,
            config: Arc::new(config),
            thresholds: Arc::new(thresholds),
            gauged: Arc::default(),
            queued: Arc::default(),
        })
    }

    /// Starts watching `signals` (the usage recorder's and spend governance's) and delivering
    /// webhooks, on the current tokio runtime; nothing when `alerts.enabled` is false.
    ///
    /// # Errors
    /// A message when the webhook client cannot be built.
    pub fn start(&self, signals: &SpendSignals) -> Result<AlertTasks, String> {
        let mut tasks = AlertTasks::default();
        if !self.config.enabled {
            return Ok(tasks);
        }
        if let Some(receiver) = signals.listen() {
            let alerts = self.clone();
            tasks.tasks.push(tokio::spawn(async move { alerts.watch(receiver).await }));
        }
        let deliveries = deliver::Deliveries::new(
            deliver::Ground {
                db: self.db.clone(),
                clock: self.clock.clone(),
                sealer: self.sealer.clone(),
                metrics: self.metrics.clone(),
            },
            &self.config,
            self.queued.clone(),
        )?;
        tasks.tasks.push(tokio::spawn(async move { deliveries.run().await }));
        Ok(tasks)
    }

    /// Turns signals into alerts until the senders are gone, the signals of [`COALESCE`] at
    /// a time (each budget they touch is read once however many flushes touched it); a
    /// batch's failure is logged and the next signal of the same budget tries again.
    async fn watch(&self, mut receiver: mpsc::Receiver<Vec<SpendSignal>>) {
        while let Some(mut batch) = receiver.recv().await {
            tokio::time::sleep(COALESCE).await;
            while let Ok(more) = receiver.try_recv() {
                batch.extend(more);
            }
            if let Err(e) = self.evaluate(&batch).await {
                tracing::warn!(error = %e, "budget alerts not evaluated");
            }
        }
    }

    /// Evaluates the budgets `signals` touched, then sends what this node claimed.
    async fn evaluate(&self, signals: &[SpendSignal]) -> Result<(), crate::error::ServiceError> {
        let subjects = watch::subjects_of(signals);
        let now = self.clock.now();
        let (thresholds, platform) = (self.thresholds.clone(), self.spend.clone());
        let found = self
            .db
            .run(move |conn| {
                let mut found = Vec::new();
                for (subject, refused) in &subjects {
                    found.push(watch::evaluate(
                        conn,
                        subject,
                        *refused,
                        (now, &thresholds, &platform),
                    )?);
                }
                Ok(found)
            })
            .await?;
        for evaluated in found {
            if let Some((team_id, ratio)) = evaluated.team_use {
                self.gauge(&team_id, ratio);
            }
            for alert in evaluated.alerts {
                self.announce(&alert);
            }
        }
        Ok(())
    }

    /// E-mails `alert` to its recipients and counts it.
    fn announce(&self, alert: &Alert) {
        let threshold = alert.row.threshold.to_string();
        self.metrics.count(
            metric::BUDGET_ALERTS_TOTAL,
            &[("scope", alert.row.scope.as_str()), ("threshold", threshold.as_str())],
        );
        tracing::info!(
            event = "budget_alert",
            counter = %alert.row.counter,
            threshold = alert.row.threshold,
            reason = alert.reason,
            "budget alert"
        );
        if alert.row.team_id.is_some() {
            self.queued.notify_one();
        }
        let link = self.email.page_link(match &alert.row.team_id {
            Some(_) => "/teams",
            None => "/usage",
        });
        for (email, name) in &alert.recipients {
            self.email.send_mail(
                MailKind::BudgetAlert,
                email,
                alert.mail_values(name, link.clone()),
            );
        }
    }

    /// Sets team `team_id`'s budget use gauge, unless `alerts.team_gauges` teams have one.
    fn gauge(&self, team_id: &str, ratio: f64) {
        let mut gauged = self.gauged.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !gauged.contains(team_id) {
            if gauged.len() >= self.config.team_gauges {
                return;
            }
            gauged.insert(team_id.to_owned());
        }
        self.metrics.gauge(metric::TEAM_BUDGET_USED_RATIO, &[("team_id", team_id)], ratio);
    }
}
