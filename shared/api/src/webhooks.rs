//! Webhooks as the API shows them: a webhook (never its secret, but once
//! when it is made or rotated), its delivery log, and the bodies that
//! create and change one.

use mapi_domain::{DeliveryId, ProjectId, TenantId, Timestamp, UserId, WebhookId};
use mapi_webhooks::EventType;
use serde::{Deserialize, Serialize};

/// A webhook of a project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookView {
    pub id: WebhookId,
    pub tenant: TenantId,
    pub project: ProjectId,
    /// Where deliveries are POSTed.
    pub url: String,
    /// What it hears of.
    pub events: Vec<EventType>,
    pub description: String,
    /// A disabled webhook is sent nothing (replays excepted).
    pub enabled: bool,
    pub created_at: Timestamp,
    pub created_by: UserId,
    pub updated_at: Timestamp,
    /// After a rotation, until when the previous secret still signs.
    pub previous_secret_valid_until: Option<Timestamp>,
}

/// A webhook just made, with its signing secret: shown this once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookCreated {
    #[serde(flatten)]
    pub webhook: WebhookView,
    /// `whsec_…`: verify each delivery's `webhook-signature` with it.
    pub secret: String,
}

/// The webhooks of a project, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookPage {
    pub webhooks: Vec<WebhookView>,
}

/// A new webhook.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewWebhook {
    /// An `https` URL of a public address (at most 2,048 characters).
    #[schema(pattern = "^https://", max_length = 2048)]
    pub url: String,
    /// At least one event type.
    #[schema(min_items = 1)]
    pub events: Vec<EventType>,
    /// At most 200 characters.
    #[serde(default)]
    #[schema(max_length = 200)]
    pub description: Option<String>,
}

/// A change to a webhook: each field given replaces the webhook's.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WebhookChange {
    #[schema(pattern = "^https://", max_length = 2048)]
    pub url: Option<String>,
    #[schema(min_items = 1)]
    pub events: Option<Vec<EventType>>,
    #[schema(max_length = 200)]
    pub description: Option<String>,
    pub enabled: Option<bool>,
}

/// A rotated secret: the new one, shown this once, and until when the
/// previous one still signs (deliveries carry both signatures meanwhile).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecretRotated {
    pub secret: String,
    pub previous_valid_until: Timestamp,
}

/// One attempt to deliver a message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryAttempt {
    /// 1 for the first scheduled attempt; a replay's number counts its replays.
    pub attempt: u32,
    pub at: Timestamp,
    /// The HTTP status answered, if one was.
    pub status: Option<u16>,
    /// From sending the request to the answer.
    pub latency_ms: u64,
    /// The first 512 bytes of the answer's body.
    pub response_excerpt: String,
    /// Why no answer was read, or why the target was refused.
    pub error: Option<String>,
    /// Asked for by a replay, not by the schedule.
    pub replay: bool,
}

/// One message to a webhook and its attempts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryView {
    /// The `webhook-id` header: the same on every attempt and replay.
    pub id: DeliveryId,
    pub webhook: WebhookId,
    #[schema(value_type = String)]
    pub event: EventType,
    /// What the event is about, e.g. `runs/run_…`.
    pub subject: String,
    pub created_at: Timestamp,
    /// `pending`, `delivered` or `failed`.
    pub state: String,
    /// When the next attempt is due, while one is.
    pub next_at: Option<Timestamp>,
    pub attempts: Vec<DeliveryAttempt>,
    /// The body every attempt sends.
    pub payload: serde_json::Value,
}

/// A page of a webhook's messages, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryView>,
    pub next_page_token: Option<String>,
}
