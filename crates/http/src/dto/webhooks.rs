//! Bodies of `/api/v1/teams/{id}/webhook…` (docs/alerts.md).

use aigw_domain::time::format_timestamp;
use aigw_service::alerts::{CreatedWebhook, DeliveryView, WebhookView};
use aigw_service::Page;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `PUT /teams/{id}/webhook` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SetWebhookRequest {
    /// Where the team's budget alerts are POSTed: an absolute `https://` URL of a public
    /// address, at most 2048 bytes, without a user or password (`http://` and private addresses
    /// only with `alerts.webhook_allow_private`).
    #[schema(example = "https://hooks.example.com/aigw", max_length = 2048)]
    pub(crate) url: String,
}

/// A team's webhook (never its secret).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebhookDto {
    /// The team.
    pub(crate) team_id: String,
    /// Where budget alerts are POSTed.
    pub(crate) url: String,
    /// Who set it last.
    pub(crate) created_by: String,
    /// When it was first set, RFC 3339 UTC.
    pub(crate) created_at: String,
    /// When it was last set (and its secret made), RFC 3339 UTC.
    pub(crate) updated_at: String,
}

impl From<WebhookView> for WebhookDto {
    fn from(w: WebhookView) -> Self {
        Self {
            team_id: w.team_id,
            url: w.url,
            created_by: w.created_by,
            created_at: format_timestamp(w.created_at),
            updated_at: format_timestamp(w.updated_at),
        }
    }
}

/// `PUT /teams/{id}/webhook` answer: the webhook with its signing secret, shown only here.
#[derive(Serialize, ToSchema)]
pub(crate) struct CreatedWebhookDto {
    /// The signing secret (`whsec_` and 44 base64 characters; Standard Webhooks). Store it now:
    /// it is never shown again; setting the webhook again makes a new one.
    pub(crate) secret: String,
    /// The webhook.
    #[serde(flatten)]
    pub(crate) webhook: WebhookDto,
}

impl From<CreatedWebhook> for CreatedWebhookDto {
    fn from(c: CreatedWebhook) -> Self {
        Self { secret: c.secret, webhook: c.webhook.into() }
    }
}

/// A delivery of an event to the team's webhook.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebhookDeliveryDto {
    /// UUIDv7: the `webhook-id` header, the same on every attempt (the receiver's idempotency
    /// key).
    pub(crate) id: String,
    /// The event type (`budget.threshold_reached`).
    pub(crate) event: String,
    /// `pending` (not yet taken; tried again at `next_attempt_at`), `delivered` (a 2xx) or
    /// `failed` (every attempt failed).
    #[schema(example = "delivered")]
    pub(crate) status: String,
    /// Attempts made.
    pub(crate) attempts: u32,
    /// When the next attempt is due, RFC 3339 UTC; null unless pending.
    pub(crate) next_attempt_at: Option<String>,
    /// The HTTP status of the last attempt; null when the receiver did not answer (or none was
    /// made).
    pub(crate) last_status: Option<u16>,
    /// Why the last attempt failed; null after a success.
    pub(crate) last_error: Option<String>,
    /// RFC 3339 UTC.
    pub(crate) created_at: String,
    /// When the receiver took it, RFC 3339 UTC; null until then.
    pub(crate) delivered_at: Option<String>,
    /// The JSON body sent (docs/alerts.md).
    #[schema(value_type = Object)]
    pub(crate) payload: serde_json::Value,
}

impl From<DeliveryView> for WebhookDeliveryDto {
    fn from(d: DeliveryView) -> Self {
        Self {
            id: d.id,
            event: d.event,
            status: d.status,
            attempts: d.attempts,
            next_attempt_at: d.next_attempt_at.map(format_timestamp),
            last_status: d.last_status,
            last_error: d.last_error,
            created_at: format_timestamp(d.created_at),
            delivered_at: d.delivered_at.map(format_timestamp),
            payload: d.payload,
        }
    }
}

/// `GET /teams/{id}/webhook/deliveries` answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebhookDeliveryListData {
    /// Deliveries, newest first.
    pub(crate) deliveries: Vec<WebhookDeliveryDto>,
    /// Cursor of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

impl From<Page<DeliveryView>> for WebhookDeliveryListData {
    fn from(p: Page<DeliveryView>) -> Self {
        Self {
            deliveries: p.items.into_iter().map(Into::into).collect(),
            next_cursor: p.next_cursor,
        }
    }
}
