//! An alert: which budget ([`Subject`]), what its row records, and what its e-mail and
//! webhook payload say.

use aigw_domain::usage::micros_to_usd;
use aigw_domain::{BudgetPeriod, CounterSubject, LimitScope};
use aigw_persistence::budget_alerts::BudgetAlertRow;
use aigw_persistence::webhooks::DeliveryRow;
use chrono::{DateTime, Utc};

/// The event type of a budget alert (the webhook payload's `type`).
pub const BUDGET_EVENT: &str = "budget.threshold_reached";

/// A budget a signal touched.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Subject {
    /// A key's own budget.
    Key(String),
    /// A member's budget in a team.
    Member { team_id: String, user_id: String },
    /// A team's budget.
    Team(String),
    /// A user's budget across all their keys.
    User(String),
}

impl Subject {
    pub(super) fn counter(&self) -> CounterSubject<'_> {
        match self {
            Subject::Key(id) => CounterSubject::Key(id),
            Subject::Member { team_id, user_id } => CounterSubject::Member { team_id, user_id },
            Subject::Team(id) => CounterSubject::Team(id),
            Subject::User(id) => CounterSubject::User(id),
        }
    }

    pub(super) fn scope(&self) -> LimitScope {
        match self {
            Subject::Key(_) => LimitScope::Key,
            Subject::Member { .. } => LimitScope::Member,
            Subject::Team(_) => LimitScope::Team,
            Subject::User(_) => LimitScope::User,
        }
    }
}

/// An alert this node claimed, with what its messages say.
#[derive(Debug, Clone)]
pub(super) struct Alert {
    pub(super) subject: Subject,
    pub(super) row: BudgetAlertRow,
    /// `spent` (the spend reached the threshold) or `refused` (the budget refused a call).
    pub(super) reason: &'static str,
    /// For a refusal: what the budget held then, spent and reserved, micro-USD.
    pub(super) held_micros: Option<i64>,
    pub(super) budget_period: BudgetPeriod,
    pub(super) what: String,
    pub(super) recipients: Vec<(String, String)>,
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
    pub(super) fn delivery(&self, team_id: &str, now: DateTime<Utc>) -> DeliveryRow {
        let id = uuid::Uuid::now_v7().to_string();
        DeliveryRow {
            payload: self.payload(&id).to_string(),
            id,
            team_id: aigw_domain::TeamId::from(team_id),
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
    pub(super) fn mail_values(&self, name: &str, link: String) -> serde_json::Value {
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
