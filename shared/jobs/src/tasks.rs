//! The queue tasks of item jobs, their routes and their names.
//!
//! Names are hashed from the job, the step or item index and the round
//! (Cloud Tasks advises against sequential names, which crowd one key
//! range), so the same work always has the same name and a second enqueue
//! of it is refused as already existing.

use std::sync::Arc;

use mapi_domain::{JobId, Timestamp};
use mapi_queue::{NewTask, QueueError, QueueName, TaskName, TaskQueue};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The queue of fan-out steps.
pub const FANOUT_QUEUE: &str = "job-fanout";
/// The queue of item tasks.
pub const ITEMS_QUEUE: &str = "job-items";

pub const FANOUT_PATH: &str = "/internal/tasks/jobs/fanout";
pub const ITEM_PATH: &str = "/internal/tasks/jobs/item";

/// One step of a job's fan-out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FanoutTask {
    pub job: JobId,
    pub step: u64,
}

/// One item, in one round.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemTask {
    pub job: JobId,
    pub idx: u64,
    pub round: u32,
    pub item: Value,
}

fn body<T: Serialize>(v: &T) -> Result<Vec<u8>, QueueError> {
    serde_json::to_vec(v).map_err(|e| QueueError::InvalidArgument(e.to_string()))
}

/// Enqueues fan-out step `step` of `job`, at `at` (now when `None`). A
/// name already taken means this step was enqueued before: success.
pub async fn push_fanout(
    queue: &dyn TaskQueue,
    job: &JobId,
    step: u64,
    at: Option<Timestamp>,
) -> Result<(), QueueError> {
    let payload = body(&FanoutTask { job: job.clone(), step })?;
    let mut task = NewTask::new(QueueName::new(FANOUT_QUEUE)?, FANOUT_PATH, payload)
        .named(TaskName::new(fanout_name(job, step))?);
    task.schedule_time = at;
    match queue.create(task).await {
        Ok(_) | Err(QueueError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Enqueues the tasks of `items` (index, item) of `job` in `round`,
/// concurrently. Names already taken are success; the first other
/// failure is returned once every push has been tried.
pub async fn push_items(
    queue: &Arc<dyn TaskQueue>,
    job: &JobId,
    round: u32,
    items: Vec<(u64, Value)>,
) -> Result<(), QueueError> {
    let q = QueueName::new(ITEMS_QUEUE)?;
    let mut pushes = tokio::task::JoinSet::new();
    for (idx, item) in items {
        let name = TaskName::new(item_name(job, idx, round))?;
        let payload = body(&ItemTask { job: job.clone(), idx, round, item })?;
        let task = NewTask::new(q.clone(), ITEM_PATH, payload).named(name);
        let queue = queue.clone();
        pushes.spawn(async move { queue.create(task).await });
    }
    let mut first_error = None;
    while let Some(done) = pushes.join_next().await {
        match done {
            Ok(Ok(_) | Err(QueueError::AlreadyExists(_))) => {}
            Ok(Err(e)) => {
                tracing::warn!(%job, error = %e, "an item task could not be enqueued");
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error
                    .get_or_insert(QueueError::Internal(mapi_domain::Cause::new("an enqueue panicked", e)));
            }
        }
    }
    first_error.map_or(Ok(()), Err)
}

fn hashed(prefix: &str, parts: &str) -> String {
    let digest = Sha256::digest(parts.as_bytes());
    format!("{prefix}-{}", hex::encode(&digest[..16]))
}

/// The name of fan-out step `step` of `job`.
pub fn fanout_name(job: &JobId, step: u64) -> String {
    hashed("jf", &format!("{job}/fanout/{step}"))
}

/// The name of item `idx` of `job` in `round`.
pub fn item_name(job: &JobId, idx: u64, round: u32) -> String {
    hashed("ji", &format!("{job}/item/{idx}/{round}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_distinct_and_valid() {
        let job = JobId::generate(mapi_domain::Timestamp::from_secs(1_800_000_000), [7; 10]);
        assert_eq!(item_name(&job, 7, 0), item_name(&job, 7, 0));
        let names: std::collections::BTreeSet<_> = (0..1000)
            .map(|i| item_name(&job, i, 0))
            .chain([item_name(&job, 7, 1), fanout_name(&job, 7)])
            .collect();
        assert_eq!(names.len(), 1002);
        let n = item_name(&job, 1, 0);
        assert!(n.len() == 35 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'), "{n}");
        let in_order: Vec<_> = (0..100).map(|i| item_name(&job, i, 0)).collect();
        let mut sorted = in_order.clone();
        sorted.sort();
        assert_ne!(in_order, sorted, "hashed, not sequential");
    }
}
