//! One attempt to deliver a webhook message (`POST
//! /internal/tasks/webhooks/deliver`).
//!
//! The attempt checks the target again (the URL, and every address its
//! host resolves to: a name that now points into a private network is
//! refused), connects only to the addresses it checked, follows no
//! redirect, signs the body with the webhook's current secret (and the
//! previous one during its grace period), and records the answer's status,
//! latency and the start of its body in the message's log. A 2xx answer
//! delivers the message; a 410 or a refused target fails it; anything else
//! is tried again after the back-off, as a task of its own, until the
//! delivery window ends and the message fails. A replay is one more
//! attempt, asked for by a person, whatever the message's state.
//!
//! The queue may deliver one attempt twice: an attempt already in the log
//! is not sent again. An attempt sent whose record was lost (a crash
//! between the two) is sent again: receivers deduplicate on `webhook-id`.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use axum::extract::State;
use mapi_domain::Timestamp;
use mapi_identity::InternalCaller;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::tasks::{DeliverTask, push_deliver};
use mapi_schema::{
    DeliveryAttempt, DeliveryDoc, DeliveryState, MAX_LOGGED_ATTEMPTS, WebhookDoc, tx_get, tx_put,
};
use mapi_store::transact;
use mapi_webhooks::{Host, Outcome, Secret, TargetUrl};
use serde::Serialize;

/// How long an attempt waits for the answer's head and its first bytes.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(10);

/// What the handler did, for the queue's logs and the tests.
#[derive(Debug, Serialize)]
pub struct Handled {
    pub outcome: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
    Json(task): Json<DeliverTask>,
) -> Result<Json<Handled>, ApiError> {
    let Some(message) = mapi_schema::get::<DeliveryDoc>(&*state.store, task.delivery.as_str()).await? else {
        return Ok(Json(Handled { outcome: "no such message", status: None }));
    };
    if let Some(why) = already(&message, &task) {
        return Ok(Json(Handled { outcome: why, status: None }));
    }
    let hook = mapi_schema::get::<WebhookDoc>(&*state.store, message.webhook.as_str()).await?;
    let now = state.clock.now();
    let tried = match &hook {
        None => Tried::refused("the webhook was deleted"),
        Some(h) if !h.enabled && !task.replay => Tried::refused("the webhook is disabled"),
        Some(h) => send(&state, h, &message, now).await,
    };
    let status = tried.status;
    let next = record(&state, &task, tried, now).await?;
    if let Some(at) = next {
        let again = DeliverTask { delivery: task.delivery.clone(), attempt: task.attempt + 1, replay: false };
        if let Err(e) = push_deliver(&*state.queue, &again, Some(at), None).await {
            tracing::warn!(delivery = %task.delivery, error = %e, "pushing a webhook retry failed; the sweep re-pushes it");
        }
    }
    Ok(Json(Handled { outcome: "attempted", status }))
}

/// Why this task's attempt is not made, if it is not: it is in the log
/// already, or the message ended and this is not a replay.
fn already(message: &DeliveryDoc, task: &DeliverTask) -> Option<&'static str> {
    if message.attempts.iter().any(|a| a.replay == task.replay && a.attempt == task.attempt) {
        return Some("attempted already");
    }
    (!task.replay && message.state != DeliveryState::Pending).then_some("the message ended")
}

/// An attempt's result, before it is recorded.
#[derive(Debug)]
struct Tried {
    status: Option<u16>,
    latency_ms: u64,
    excerpt: String,
    error: Option<String>,
    /// The target was refused: no later attempt can do better.
    refused: bool,
}

impl Tried {
    fn refused(why: impl Into<String>) -> Tried {
        Tried { status: None, latency_ms: 0, excerpt: String::new(), error: Some(why.into()), refused: true }
    }

    fn unanswered(why: impl Into<String>, latency_ms: u64) -> Tried {
        Tried { status: None, latency_ms, excerpt: String::new(), error: Some(why.into()), refused: false }
    }
}

/// Sends the message to the webhook's URL once.
async fn send(state: &AppState, hook: &WebhookDoc, message: &DeliveryDoc, now: Timestamp) -> Tried {
    let policy = state.config.webhooks;
    let target = match TargetUrl::parse(&hook.url, &policy) {
        Ok(t) => t,
        Err(e) => return Tried::refused(e.to_string()),
    };
    let addrs = match resolve(&target).await {
        Ok(a) => a,
        Err(why) => return Tried::unanswered(why, 0),
    };
    let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
    if let Err(e) = mapi_webhooks::check_resolved(&ips, &policy) {
        return Tried::refused(e.to_string());
    }
    let secrets = match signing_keys(hook, now) {
        Ok(s) => s,
        Err(why) => return Tried::refused(why),
    };
    let keys: Vec<&Secret> = secrets.iter().collect();
    let headers = mapi_webhooks::sign(&keys, message.id.as_str(), now.as_secs(), message.payload.as_bytes());
    let client = match client_for(&target, &addrs) {
        Ok(c) => c,
        Err(e) => return Tried::unanswered(format!("cannot build the request: {e}"), 0),
    };
    let mut request = client
        .post(target.as_str())
        .header("content-type", "application/json")
        .header("user-agent", concat!("mapi-webhooks/", env!("CARGO_PKG_VERSION")))
        .body(message.payload.clone());
    for (name, value) in headers.pairs() {
        request = request.header(name, value);
    }
    let started = Instant::now();
    let answer = request.send().await;
    let latency_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match answer {
        Ok(response) => {
            let status = response.status().as_u16();
            let excerpt = mapi_webhooks::excerpt(&first_bytes(response).await);
            Tried { status: Some(status), latency_ms, excerpt, error: None, refused: false }
        }
        Err(e) if e.is_timeout() => Tried::unanswered("no answer within 10 s", latency_ms),
        Err(e) => Tried::unanswered(format!("no answer: {}", error_chain(&e)), latency_ms),
    }
}

/// The addresses the target's host stands for: its own, for an address.
async fn resolve(target: &TargetUrl) -> Result<Vec<SocketAddr>, String> {
    let port = target.port();
    match target.host() {
        Host::Ip(ip) => Ok(vec![SocketAddr::new(*ip, port)]),
        Host::Name(name) => match tokio::net::lookup_host((name.as_str(), port)).await {
            Ok(found) => Ok(found.collect()),
            Err(e) => Err(format!("cannot resolve {name}: {e}")),
        },
    }
}

/// A client that connects to exactly `addrs` for the target's host (not a
/// second lookup, which could answer differently) and follows no redirect.
fn client_for(target: &TargetUrl, addrs: &[SocketAddr]) -> Result<reqwest::Client, reqwest::Error> {
    let mut builder =
        reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).timeout(ATTEMPT_TIMEOUT);
    if let Host::Name(name) = target.host() {
        builder = builder.resolve_to_addrs(name, addrs);
    }
    builder.build()
}

/// The start of the answer's body, read no further than the log keeps.
async fn first_bytes(mut response: reqwest::Response) -> Vec<u8> {
    let mut kept = Vec::new();
    while kept.len() < mapi_webhooks::EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => kept.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    kept
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The secrets that sign now: the current one, and the previous one while
/// its grace period lasts.
fn signing_keys(hook: &WebhookDoc, now: Timestamp) -> Result<Vec<Secret>, String> {
    let unreadable = |e: mapi_webhooks::WebhookError| format!("the webhook's secret is unreadable: {e}");
    let current = Secret::parse(&hook.secret).map_err(unreadable)?;
    let previous = match &hook.previous_secret {
        Some(p) => Some((Secret::parse(&p.secret).map_err(unreadable)?, p.valid_until)),
        None => None,
    };
    let chosen = mapi_webhooks::signing_secrets(&current, previous.as_ref().map(|(s, t)| (s, *t)), now);
    Ok(chosen.into_iter().cloned().collect())
}

/// Records the attempt, counts the body's bytes as the tenant's egress, and
/// moves the message; when its next attempt is due, if one is.
async fn record(
    state: &AppState,
    task: &DeliverTask,
    tried: Tried,
    now: Timestamp,
) -> Result<Option<Timestamp>, ApiError> {
    let (task, tried) = (task, &tried);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(mut m) = tx_get::<DeliveryDoc>(&mut tx, task.delivery.as_str()).await? else {
            return Ok(tx.finish(None));
        };
        if already(&m, task).is_some() {
            return Ok(tx.finish(None));
        }
        let (next_state, next_at) = after(&m, task, tried, now);
        m.attempts.push(DeliveryAttempt {
            attempt: task.attempt,
            at: now,
            status: tried.status,
            latency_ms: tried.latency_ms,
            response_excerpt: tried.excerpt.clone(),
            error: tried.error.clone(),
            replay: task.replay,
        });
        let extra = m.attempts.len().saturating_sub(MAX_LOGGED_ATTEMPTS);
        m.attempts.drain(..extra);
        m.state = next_state;
        m.next_at = next_at;
        tx_put(&mut tx, &m)?;
        // A receiver that answered got the body: the tenant's egress
        // (counted, never refused: a message is the tenant's own notice,
        // and small).
        if tried.status.is_some() {
            let seed = format!("{}:{}", m.id, task.attempt);
            mapi_metering::egress(&m.tenant, m.payload.len() as u64, &seed, now).apply(&mut tx)?;
        }
        Ok(tx.finish(next_at))
    })
    .await
}

/// Where a message goes after an attempt: delivered on a 2xx; failed on a
/// 410 or a refused target; otherwise due again after the back-off, and
/// failed once the delivery window is spent. A replay schedules nothing: a
/// failed replay leaves the message as it was.
fn after(
    m: &DeliveryDoc,
    task: &DeliverTask,
    tried: &Tried,
    now: Timestamp,
) -> (DeliveryState, Option<Timestamp>) {
    let outcome = if tried.refused { Outcome::Failed } else { mapi_webhooks::classify(tried.status) };
    match (outcome, task.replay) {
        (Outcome::Delivered, _) => (DeliveryState::Delivered, None),
        (_, true) => (m.state, m.next_at),
        (Outcome::Failed, false) => (DeliveryState::Failed, None),
        (Outcome::Retry, false) => match mapi_webhooks::next_attempt_delay(task.attempt) {
            Some(wait) => (DeliveryState::Pending, Some(now + wait)),
            None => (DeliveryState::Failed, None),
        },
    }
}
