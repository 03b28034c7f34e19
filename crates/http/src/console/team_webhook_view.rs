//! What the team page's webhook section shows (owners and admins): the team's webhook and its
//! latest deliveries with their status (docs/alerts.md).

use super::view::when;
use crate::state::AppState;
use aigw_domain::access::op;
use aigw_domain::TeamId;
use aigw_service::alerts::{DeliveryView, WebhookView};
use aigw_service::{Authorized, PageRequest, ServiceError};
use minijinja::{context, Value};

/// Deliveries shown on the team page.
const SHOWN: &str = "20";

/// Team `id`'s webhook, if it has one, and its latest deliveries (for its managers).
///
/// # Errors
/// As [`aigw_service::alerts::BudgetAlerts::team_webhook`] but for a team without a webhook.
pub(super) async fn read(
    state: &AppState,
    reader: &Authorized<op::ReadAccount>,
    id: &TeamId,
) -> Result<(Option<WebhookView>, Vec<DeliveryView>), ServiceError> {
    let webhook = match state.alerts.team_webhook(reader, id).await {
        Ok(webhook) => Some(webhook),
        Err(ServiceError::NotFound { resource: "webhook", .. }) => None,
        Err(e) => return Err(e),
    };
    let page = PageRequest { limit: Some(SHOWN.to_owned()), cursor: None };
    let deliveries = state.alerts.list_webhook_deliveries(reader, id, &page).await?.items;
    Ok((webhook, deliveries))
}

/// The webhook as the page shows it.
pub(super) fn webhook_row(webhook: &WebhookView) -> Value {
    context! { url => webhook.url, updated => when(&webhook.updated_at) }
}

/// A delivery as the page shows it.
pub(super) fn delivery_row(delivery: &DeliveryView) -> Value {
    let threshold = delivery.payload["data"]["threshold_percent"].as_u64();
    let scope = delivery.payload["data"]["scope"].as_str().map(str::to_owned);
    context! {
        id => delivery.id,
        created => when(&delivery.created_at),
        what => match (scope, threshold) {
            (Some(scope), Some(t)) => format!("{scope} budget at {t} %"),
            _ => delivery.event.clone(),
        },
        status => delivery.status,
        attempts => delivery.attempts,
        last => delivery.last_error.clone().or_else(|| delivery.last_status.map(|s| s.to_string())),
        next => delivery.next_attempt_at.as_ref().map(when),
    }
}
