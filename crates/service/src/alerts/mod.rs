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

mod config;
mod deliver;
mod signature;
mod watch;
mod webhook_url;
mod webhooks;

pub use config::AlertConfig;
pub use signature::{sign, SECRET_PREFIX};
pub use webhooks::{CreatedWebhook, DeliveryView, WebhookView};

use crate::account_email::AccountEmail;
use crate::context::ServiceContext;
use crate::email::MailKind;
use crate::metrics::name as metric;
use crate::spend_signal::{SpendSignal, SpendSignals};
use aigw_domain::usage::micros_to_usd;
use aigw_domain::BudgetPeriod;
use aigw_persistence::budget_alerts::BudgetAlertRow;
use aigw_persistence::webhooks::DeliveryRow;
use chrono::{DateTime, Utc};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use watch::Subject;

/// The event type of a budget alert (the webhook payload's `type`).
pub const BUDGET_EVENT: &str = "budget.threshold_reached";

/// An alert this node claimed, with what its messages say.
#[derive(Debug, Clone)]
struct Alert {
    subject: Subject,
    row: BudgetAlertRow,
    /// `spent` (the spend reached the threshold) or `refused` (the budget refused a call).
    reason: &'static str,
    /// For a refusal: what the budget held then, spent and reserved, micro-USD.
    held_micros: Option<i64>,
    budget_period: BudgetPeriod,
    what: String,
    recipients: Vec<(String, String)>,
}

fn usd(micros: i64) -> f64 {
    micros_to_usd(u64::try_from(micros).unwrap_or(0))
}

impl Alert {
    /// When the budget's period ends (`None` for `total`).
    fn reset_at(&self) -> Option<DateTime<Utc>> {
        self.budget_period.reset_at(self.row.created_at)
    }

    /// The webhook payload (JSON, docs/alerts.md).
    fn payload(&self, id: &str) -> serde_json::Value {
        let (key_id, user_id) = match &self.subject {
            Subject::Key(id) => (Some(id.as_str()), None),
            Subject::Member { user_id, .. } | Subject::User(user_id) => {
                (None, Some(user_id.as_str()))
            }
            Subject::Team(_) => (None, None),
        };
        serde_json::json!({
            "type": BUDGET_EVENT,
            "id": id,
            "created_at": aigw_domain::time::format_timestamp(self.row.created_at),
            "data": {
                "scope": self.row.scope,
                "team_id": self.row.team_id,
                "api_key_id": key_id,
                "user_id": user_id,
                "threshold_percent": self.row.threshold,
                "reason": self.reason,
                "spent_usd": usd(self.row.spent_micros),
                "held_usd": self.held_micros.map(usd),
                "limit_usd": usd(self.row.limit_micros),
                "budget_period": self.budget_period.as_str(),
                "period_start": self.row.period,
                "reset_at": self.reset_at().map(aigw_domain::time::format_timestamp),
            },
        })
    }

    /// The webhook delivery of this alert to team `team_id`'s webhook, due at `now`.
    fn delivery(&self, team_id: &str, now: DateTime<Utc>) -> DeliveryRow {
        let id = uuid::Uuid::now_v7().to_string();
        DeliveryRow {
            payload: self.payload(&id).to_string(),
            id,
            team_id: team_id.to_owned(),
            event: BUDGET_EVENT.to_owned(),
            status: aigw_persistence::webhooks::PENDING.to_owned(),
            attempts: 0,
            next_attempt_at: now,
            last_status: None,
            last_error: None,
            created_at: now,
            delivered_at: None,
        }
    }

    /// The e-mail's values for recipient `name`.
    fn mail_values(&self, name: &str, link: String) -> serde_json::Value {
        let reset = self.reset_at().map_or_else(
            || "never: the budget is for the whole life of what it limits".to_owned(),
            aigw_domain::time::format_timestamp,
        );
        serde_json::json!({
            "name": name,
            "what": self.what,
            "threshold": self.row.threshold,
            "refused": self.reason == "refused",
            "spent": format!("{:.2}", usd(self.row.spent_micros)),
            "held": format!("{:.2}", usd(self.held_micros.unwrap_or(self.row.spent_micros))),
            "limit": format!("{:.2}", usd(self.row.limit_micros)),
            "period": self.budget_period.as_str(),
            "reset": reset,
            "link": link,
        })
    }
}

/// Budget alerts and team webhooks (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct BudgetAlerts {
    ctx: ServiceContext,
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
        ctx: ServiceContext,
        email: AccountEmail,
        config: AlertConfig,
    ) -> Result<Self, String> {
        let thresholds = config.checked_thresholds()?;
        Ok(Self {
            ctx,
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
        let deliveries =
            deliver::Deliveries::new(self.ctx.clone(), &self.config, self.queued.clone())?;
        tasks.tasks.push(tokio::spawn(async move { deliveries.run().await }));
        Ok(tasks)
    }

    /// Turns signals into alerts until the senders are gone; a batch's failure is logged and
    /// the next signal of the same budget tries again.
    async fn watch(&self, mut receiver: mpsc::Receiver<Vec<SpendSignal>>) {
        while let Some(mut batch) = receiver.recv().await {
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
        let now = self.ctx.clock.now();
        let (thresholds, platform) = (self.thresholds.clone(), self.ctx.spend.clone());
        let found = self
            .ctx
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
        self.ctx.metrics.count(
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
        self.ctx.metrics.gauge(metric::TEAM_BUDGET_USED_RATIO, &[("team_id", team_id)], ratio);
    }
}
