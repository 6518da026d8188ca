//! The [`Deliverer`]: POSTs due tasks of a [`SqliteQueue`] to our own
//! service, as Cloud Tasks would, and records the outcomes.
//!
//! [`Deliverer::step`] delivers everything due now and waits for the
//! outcomes, so tests advance a virtual clock and step. [`Deliverer::run`]
//! is the production loop: it leases whenever a task is created, a delivery
//! finishes or a short poll interval passes, with deliveries running
//! concurrently; on shutdown it abandons the deliveries in flight and gives
//! their leases back.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use mapi_domain::Timestamp;
use mapi_metrics::{Metrics, QueueLabels};
use reqwest::StatusCode;
use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};
use tokio::task::{Id, JoinError, JoinSet};

use super::{Lease, LeaseKey, Outcome, SqliteQueue};
use crate::QueueError;

/// How often [`Deliverer::run`] looks for due tasks when nothing wakes it.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// Delivers a queue's tasks over HTTP. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Deliverer {
    shared: Arc<Shared>,
}

struct Shared {
    queue: SqliteQueue,
    client: reqwest::Client,
    target: String,
    auth: Option<String>,
    metrics: Metrics,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deliverer")
            .field("target", &self.target)
            .field("auth", &self.auth.as_ref().map(|_| "<redacted>"))
            .finish_non_exhaustive()
    }
}

impl Deliverer {
    /// A deliverer POSTing to `target` (a base URL such as
    /// `http://127.0.0.1:8080`) followed by each task's path, with
    /// `Authorization: Bearer <auth>` when `auth` is set.
    pub fn new(
        queue: SqliteQueue,
        client: reqwest::Client,
        target: impl Into<String>,
        auth: Option<String>,
        metrics: Metrics,
    ) -> Deliverer {
        let target = target.into().trim_end_matches('/').to_owned();
        Deliverer { shared: Arc::new(Shared { queue, client, target, auth, metrics }) }
    }

    /// Leases every due task (within each queue's concurrency limit),
    /// delivers them concurrently and records the outcomes. Returns how
    /// many deliveries were attempted.
    pub async fn step(&self) -> Result<usize, QueueError> {
        let leases = self.shared.queue.lease_due().await?;
        let attempted = leases.len();
        let mut deliveries = JoinSet::new();
        for lease in leases {
            deliveries.spawn(attempt(self.shared.clone(), lease));
        }
        let mut first_error = None;
        while let Some(done) = deliveries.join_next().await {
            let result =
                done.map_err(|e| QueueError::Internal(mapi_domain::Cause::new("delivery task failed", e)));
            if let Err(e) = result.and_then(|r| r) {
                first_error.get_or_insert(e);
            }
        }
        self.publish_depths().await?;
        first_error.map_or(Ok(attempted), Err)
    }

    /// Delivers until `shutdown` resolves. Deliveries still in flight then
    /// are abandoned and their tasks made due again (they may have reached
    /// the target: delivery is at least once).
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let mut shutdown = std::pin::pin!(shutdown);
        let mut in_flight = JoinSet::new();
        let mut leases: HashMap<Id, LeaseKey> = HashMap::new();
        loop {
            match self.shared.queue.lease_due().await {
                Ok(due) => {
                    for lease in due {
                        let key = LeaseKey {
                            queue: lease.queue.clone(),
                            name: lease.name.clone(),
                            token: lease.token,
                        };
                        let handle = in_flight.spawn(attempt(self.shared.clone(), lease));
                        leases.insert(handle.id(), key);
                    }
                }
                Err(e) => tracing::warn!(error = %e, "leasing due tasks failed"),
            }
            if let Err(e) = self.publish_depths().await {
                tracing::warn!(error = %e, "reading queue depths failed");
            }
            tokio::select! {
                () = &mut shutdown => break,
                () = self.shared.queue.created() => {}
                () = tokio::time::sleep(POLL_INTERVAL) => {}
                Some(done) = in_flight.join_next_with_id(), if !in_flight.is_empty() => {
                    settle(&mut leases, done);
                }
            }
            while let Some(done) = in_flight.try_join_next_with_id() {
                settle(&mut leases, done);
            }
        }
        in_flight.abort_all();
        let mut abandoned = Vec::new();
        while let Some(done) = in_flight.join_next_with_id().await {
            match done {
                Err(e) if e.is_cancelled() => abandoned.extend(leases.remove(&e.id())),
                other => settle(&mut leases, other),
            }
        }
        if !abandoned.is_empty()
            && let Err(e) = self.shared.queue.release(abandoned).await
        {
            tracing::warn!(error = %e, "giving back abandoned leases failed; they will expire");
        }
    }

    /// Sets the depth gauge of every configured queue.
    async fn publish_depths(&self) -> Result<(), QueueError> {
        for (queue, depth) in self.shared.queue.depths().await? {
            self.shared
                .metrics
                .queue_depth
                .get_or_create(&QueueLabels { queue: queue.to_string() })
                .set(i64::try_from(depth).unwrap_or(i64::MAX));
        }
        Ok(())
    }
}

/// Forgets a finished delivery, logging why it could not record its outcome.
fn settle(leases: &mut HashMap<Id, LeaseKey>, done: Result<(Id, Result<(), QueueError>), JoinError>) {
    let (id, result) = match done {
        Ok((id, result)) => (id, result.map_err(|e| e.to_string())),
        Err(e) => (e.id(), Err(e.to_string())),
    };
    let key = leases.remove(&id);
    if let Err(e) = result {
        tracing::warn!(lease = ?key, error = %e, "recording a delivery failed; its lease will expire");
    }
}

/// One delivery: count it, POST it, record the outcome.
async fn attempt(shared: Arc<Shared>, lease: Lease) -> Result<(), QueueError> {
    shared.metrics.queue_deliveries.get_or_create(&QueueLabels { queue: lease.queue.to_string() }).inc();
    let outcome = post(&shared, &lease).await;
    shared.queue.finish(lease, outcome).await
}

/// Cloud Tasks' `X-CloudTasks-TaskETA`: seconds since the epoch, as a decimal.
fn eta_header(t: Timestamp) -> String {
    let us = t.as_micros();
    format!("{}.{:06}", us.div_euclid(1_000_000), us.rem_euclid(1_000_000))
}

async fn post(shared: &Shared, lease: &Lease) -> Outcome {
    let url = format!("{}{}", shared.target, lease.path);
    let count = lease.previous_attempts.to_string();
    let mut request = shared
        .client
        .post(url)
        .timeout(lease.deadline)
        .header(CONTENT_TYPE, "application/json")
        .header("X-CloudTasks-QueueName", lease.queue.as_str())
        .header("X-CloudTasks-TaskName", lease.name.as_str())
        .header("X-CloudTasks-TaskRetryCount", &count)
        .header("X-CloudTasks-TaskExecutionCount", &count)
        .header("X-CloudTasks-TaskETA", eta_header(lease.eta))
        .body(lease.body.clone());
    if let Some(token) = &shared.auth {
        request = request.bearer_auth(token);
    }
    match request.send().await {
        Ok(response) if response.status().is_success() => Outcome::Delivered,
        Ok(response) => {
            let status = response.status();
            let retry_after =
                if status == StatusCode::TOO_MANY_REQUESTS || status == StatusCode::SERVICE_UNAVAILABLE {
                    response
                        .headers()
                        .get(RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs)
                } else {
                    None
                };
            Outcome::Failed { status: format!("HTTP {}", status.as_u16()), retry_after }
        }
        Err(e) if e.is_timeout() => {
            Outcome::Failed { status: "dispatch deadline exceeded".to_owned(), retry_after: None }
        }
        Err(e) => Outcome::Failed { status: format!("request failed: {e}"), retry_after: None },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eta_is_decimal_seconds() {
        assert_eq!(eta_header(Timestamp::from_micros(1_800_000_000_000_042)), "1800000000.000042");
        assert_eq!(eta_header(Timestamp::from_secs(5)), "5.000000");
    }
}
