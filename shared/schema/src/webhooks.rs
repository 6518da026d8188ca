//! Webhooks: a project's endpoints that hear of events, and each message
//! sent to one (its attempts are the delivery log).
//!
//! A webhook's secret is stored so deliveries can be signed; it is shown to
//! its creator once (at creation and at each rotation) and never read back
//! through the API. The webhook also carries the emission sweep's place
//! (`cursor`, and the messages made in its look-back window), so the sweep
//! that turns run transitions into messages needs no other record.

use mapi_domain::{DeliveryId, ProjectId, TenantId, Timestamp, UserId, WebhookId};
use mapi_webhooks::EventType;
use serde::{Deserialize, Serialize};

use crate::Doc;

pub use mapi_api::webhooks::DeliveryAttempt;

/// A webhook endpoint of a project.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WebhookDoc {
    pub id: WebhookId,
    pub tenant: TenantId,
    pub project: ProjectId,
    /// Where deliveries are POSTed (checked against the address rules at
    /// creation, and its resolved addresses at every delivery).
    pub url: String,
    pub events: Vec<EventType>,
    pub description: String,
    pub enabled: bool,
    /// The current signing secret (`whsec_…`).
    pub secret: String,
    /// The secret before the last rotation, still signing until its time.
    pub previous_secret: Option<RetiredSecret>,
    pub created_at: Timestamp,
    pub created_by: UserId,
    pub updated_at: Timestamp,
    /// Runs of the project changed at or after this (less the sweep's
    /// look-back) have not all been looked at yet.
    pub cursor: Timestamp,
    /// Messages the sweep made within its look-back window, so looking at a
    /// run again does not read their records again.
    #[serde(default)]
    pub recent: Vec<Seen>,
    /// The sweep's failures in a row, while they last; the next sweep that
    /// commits clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failing: Option<SweepFailing>,
    /// Where the receiver's paced first attempts leave off: the next
    /// message's first attempt is due no earlier (`mapi_webhooks::pace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paced_until: Option<Timestamp>,
}

/// A webhook whose sweep has failed tick after tick: since when, how many
/// times in a row, and the last error (for operators' logs, never shown to
/// the tenant).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SweepFailing {
    pub since: Timestamp,
    pub count: u32,
    pub error: String,
}

/// A secret replaced by a rotation, valid until `valid_until`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetiredSecret {
    pub secret: String,
    pub valid_until: Timestamp,
}

/// A message the sweep made, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub id: DeliveryId,
    pub at: Timestamp,
}

impl Doc for WebhookDoc {
    const COLLECTION: &'static str = "webhooks";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

mapi_domain::wire_enum!(
    /// Where a message is: being delivered (perhaps waiting for its next
    /// attempt), delivered (a 2xx answer), or failed (the receiver answered
    /// 410, or no attempt succeeded within the delivery window).
    DeliveryState {
        Pending => "pending",
        Delivered => "delivered",
        Failed => "failed",
    }
);

/// One message to a webhook: what it says, and every attempt to deliver it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DeliveryDoc {
    pub id: DeliveryId,
    pub webhook: WebhookId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub event: EventType,
    /// What the event is about, e.g. `runs/run_…`.
    pub subject: String,
    pub created_at: Timestamp,
    /// The body, exactly as signed and sent on every attempt.
    pub payload: String,
    pub state: DeliveryState,
    /// The attempts, oldest first (at most [`MAX_LOGGED_ATTEMPTS`] kept).
    pub attempts: Vec<DeliveryAttempt>,
    /// When the next attempt is due, while one is.
    pub next_at: Option<Timestamp>,
    /// Replays asked for so far (each one more attempt).
    #[serde(default)]
    pub replays: u32,
}

/// The attempts a delivery log keeps: every scheduled one and a few replays.
pub const MAX_LOGGED_ATTEMPTS: usize = 40;

impl Doc for DeliveryDoc {
    const COLLECTION: &'static str = "webhook_deliveries";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}
