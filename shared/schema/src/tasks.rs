//! The queue tasks the functions push to each other, and their names.
//!
//! Names are deterministic, so a task pushed twice (a retried handler, a
//! reconciler that re-pushes) is refused by the queue as already existing
//! instead of running twice. A re-push that must not be refused carries a
//! `round`: the reconciler uses the minute it acts in, so it re-pushes at
//! most once a minute.

use mapi_domain::{AttemptNo, RunId, TenantId, Timestamp};
use mapi_executor::ExecutionInfo;
use mapi_queue::{NewTask, QueueError, QueueName, TaskName, TaskQueue};
use serde::{Deserialize, Serialize};

/// `submit` handles this: start attempt `attempt` of `run`.
pub const DISPATCH_PATH: &str = "/internal/tasks/dispatch";
/// `meter` handles this: meter and finalize attempt `attempt` of `run`.
pub const FINALIZE_PATH: &str = "/internal/tasks/finalize";
/// `submit` handles this: one attempt to deliver a webhook message.
pub const DELIVER_PATH: &str = "/internal/tasks/webhooks/deliver";

/// `reconcile-tick` handles this: one reconcile tick (Cloud Scheduler's, or
/// a follow-up through [`TICK_QUEUE`]).
pub const TICK_PATH: &str = "/internal/tick";
/// The queue of follow-up ticks (handled by `reconcile-tick`).
pub const TICK_QUEUE: &str = "tick";

/// The queue of tenant exports (handled by `submit-tasks`).
pub const EXPORT_QUEUE: &str = "tenant-export";
/// The queue of tenant purges (handled by `submit-tasks`).
pub const PURGE_QUEUE: &str = "tenant-purge";
/// `submit-tasks` handles this: build export `export` of `tenant`.
pub const EXPORT_PATH: &str = "/internal/tasks/tenants/export";
/// `submit-tasks` handles this: go on with the purge of `tenant`.
pub const PURGE_PATH: &str = "/internal/tasks/tenants/purge";

/// The queue that advances workflow runs (handled by `submit`).
pub const WORKFLOWS_QUEUE: &str = "workflows";
/// `submit` handles this: move workflow run `workflow_run` as far as it
/// can go now (it acts as the tenant API does: admits child runs, submits
/// validations, promotes).
pub const ADVANCE_PATH: &str = "/internal/tasks/workflows/advance";

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvanceTask {
    pub workflow_run: String,
}

/// Pushes the advance of a workflow run; `tag` names why (`start`, a
/// validation decided, the tick's second), so one reason is one task.
pub async fn push_advance(queue: &dyn TaskQueue, workflow_run: &str, tag: &str) -> Result<(), QueueError> {
    let payload = AdvanceTask { workflow_run: workflow_run.to_owned() };
    let t = NewTask::new(QueueName::new(WORKFLOWS_QUEUE)?, ADVANCE_PATH, body(&payload)?)
        .named(TaskName::new(format!("advance-{workflow_run}-{tag}"))?);
    push(queue, t).await
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExportTask {
    pub tenant: TenantId,
    pub export: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PurgeTask {
    pub tenant: TenantId,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchTask {
    pub run: RunId,
    pub attempt: AttemptNo,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FinalizeTask {
    pub run: RunId,
    pub attempt: AttemptNo,
    /// What the reconciler observed: the executor's report of the execution.
    pub execution: ExecutionInfo,
}

/// A task's name: `{kind}-{run}-a{attempt}` or, for a re-push, `…-r{round}`.
fn name(kind: &str, run: &RunId, attempt: AttemptNo, round: Option<i64>) -> Result<TaskName, QueueError> {
    let base = format!("{kind}-{run}-a{attempt}");
    TaskName::new(match round {
        Some(r) => format!("{base}-r{r}"),
        None => base,
    })
}

/// The round of a re-push made at `now`: the minute since the epoch.
pub fn round_of(now: Timestamp) -> i64 {
    now.as_secs().div_euclid(60)
}

/// Pushes a task; a task of the same name already pushed counts as pushed.
async fn push(queue: &dyn TaskQueue, task: NewTask) -> Result<(), QueueError> {
    match queue.create(task).await {
        Ok(_) | Err(QueueError::AlreadyExists(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Asks for a reconcile tick at `at` (a follow-up, see `reconcile-tick`'s
/// module doc), named by its second: asks for one second collapse into one
/// task, and a tick already running when it comes answers `busy`.
///
/// # Errors
///
/// The queue's, except that a tick already asked for that second is not one.
pub async fn push_tick(queue: &dyn TaskQueue, at: Timestamp) -> Result<(), QueueError> {
    let name = TaskName::new(format!("tick-{}", at.as_secs()))?;
    push(queue, NewTask::new(QueueName::new(TICK_QUEUE)?, TICK_PATH, &b"{}"[..]).named(name).at(at)).await
}

fn body<T: Serialize>(v: &T) -> Result<Vec<u8>, QueueError> {
    serde_json::to_vec(v).map_err(|e| QueueError::InvalidArgument(e.to_string()))
}

/// Pushes the dispatch of `attempt` of `run`, optionally as re-push `round`
/// and not before `at`.
pub async fn push_dispatch(
    queue: &dyn TaskQueue,
    run: &RunId,
    attempt: AttemptNo,
    round: Option<i64>,
    at: Option<Timestamp>,
) -> Result<(), QueueError> {
    let payload = DispatchTask { run: run.clone(), attempt };
    let mut task = NewTask::new(QueueName::new(super::DISPATCH_QUEUE)?, DISPATCH_PATH, body(&payload)?)
        .named(name("dispatch", run, attempt, round)?);
    if let Some(at) = at {
        task = task.at(at);
    }
    push(queue, task).await
}

/// Pushes the finalization of an attempt whose execution ended. Its name
/// ends with the execution's own name: repeated pushes for one execution
/// are one task, and an attempt that moved to the execution that did its
/// work (see the meter) gets that execution's finalization pushed too.
pub async fn push_finalize(queue: &dyn TaskQueue, task: &FinalizeTask) -> Result<(), QueueError> {
    let t = NewTask::new(QueueName::new(super::FINALIZE_QUEUE)?, FINALIZE_PATH, body(task)?)
        .named(finalize_name(task)?);
    push(queue, t).await
}

fn finalize_name(task: &FinalizeTask) -> Result<TaskName, QueueError> {
    let handle = &task.execution.handle.0;
    let last = handle.rsplit('/').next().unwrap_or(handle);
    let execution: String =
        last.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').take(120).collect();
    let base = name("finalize", &task.run, task.attempt, None)?;
    TaskName::new(format!("{}-{execution}", base.as_str()))
}

/// One attempt to deliver message `delivery`: scheduled attempt `attempt`
/// (1, 2, …), or a replay when `replay` is set.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverTask {
    pub delivery: mapi_domain::DeliveryId,
    pub attempt: u32,
    #[serde(default)]
    pub replay: bool,
}

/// Pushes an attempt of a webhook message, due at `at` (now when `None`).
/// Its name is the message's and the attempt's (`…-a3`, or `…-replay2`),
/// so a repeated push of one attempt is one task; a re-push of a lost one
/// carries a `round` (`…-a3-r{round}`).
pub async fn push_deliver(
    queue: &dyn TaskQueue,
    task: &DeliverTask,
    at: Option<Timestamp>,
    round: Option<i64>,
) -> Result<(), QueueError> {
    let kind = if task.replay { "replay" } else { "a" };
    let mut name = format!("deliver-{}-{kind}{}", task.delivery, task.attempt);
    if let Some(r) = round {
        name = format!("{name}-r{r}");
    }
    let named = TaskName::new(name)?;
    let mut t = NewTask::new(QueueName::new(super::WEBHOOKS_QUEUE)?, DELIVER_PATH, body(task)?).named(named);
    if let Some(at) = at {
        t = t.at(at);
    }
    push(queue, t).await
}

/// Pushes the build of an export, optionally as re-push `round`.
pub async fn push_export(
    queue: &dyn TaskQueue,
    task: &ExportTask,
    round: Option<i64>,
) -> Result<(), QueueError> {
    let base = format!("export-{}", task.export);
    let name = match round {
        Some(r) => format!("{base}-r{r}"),
        None => base,
    };
    let t = NewTask::new(QueueName::new(EXPORT_QUEUE)?, EXPORT_PATH, body(task)?).named(TaskName::new(name)?);
    push(queue, t).await
}

/// Pushes a delivery of `tenant`'s purge named `purge-{tenant}-{tag}`: the
/// tick's re-push of a minute (`r{round}`), an operator's request, or the
/// purge's own continuation after `n` deliveries (`n{n}`), so each is one task.
pub async fn push_purge(queue: &dyn TaskQueue, tenant: &TenantId, tag: &str) -> Result<(), QueueError> {
    let payload = PurgeTask { tenant: tenant.clone() };
    let t = NewTask::new(QueueName::new(PURGE_QUEUE)?, PURGE_PATH, body(&payload)?)
        .named(TaskName::new(format!("purge-{tenant}-{tag}"))?);
    push(queue, t).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_deterministic_and_valid() {
        let run = RunId::generate(Timestamp::from_secs(5), [3; 10]);
        let a = name("dispatch", &run, AttemptNo(2), None).expect("name");
        assert_eq!(a, name("dispatch", &run, AttemptNo(2), None).expect("name"));
        let r =
            name("dispatch", &run, AttemptNo(2), Some(round_of(Timestamp::from_secs(125)))).expect("name");
        assert!(r.as_str().ends_with("-a2-r2"), "{r}");
        assert_ne!(a, r);
    }

    #[test]
    fn a_finalization_is_named_after_its_execution() {
        let run = RunId::generate(Timestamp::from_secs(5), [3; 10]);
        let task = |handle: &str| FinalizeTask {
            run: run.clone(),
            attempt: AttemptNo(1),
            execution: ExecutionInfo {
                handle: mapi_executor::ExecutionHandle(handle.to_owned()),
                nonce: None,
                run: None,
                created: Timestamp::from_secs(5),
                started: None,
                finished: None,
                task_count: 1,
                status: mapi_domain::ExecutionStatus::Running,
            },
        };
        let long = "projects/p/locations/europe-west1/jobs/mapi-run-m/executions/mapi-run-m-7xk2q";
        let a = finalize_name(&task(long)).expect("name");
        assert!(a.as_str().ends_with("-a1-mapi-run-m-7xk2q"), "{a}");
        assert_eq!(a, finalize_name(&task(long)).expect("name"));
        let b = finalize_name(&task("executions/local.00002")).expect("name");
        assert!(b.as_str().ends_with("-a1-local00002"), "{b}");
        assert_ne!(a, b);
    }
}
