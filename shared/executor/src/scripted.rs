//! An executor that starts nothing: it takes every attempt and reports each
//! execution as running until the caller says otherwise, counting the
//! status reads and listings it answers. The suites drive a platform with
//! it in virtual time, and `mapi bench tick` measures a sweep over
//! thousands of runs with it, with no processes and no cloud.
//!
//! An execution stays running until the suite ends it with
//! [`ScriptedExecutor::finish`]; only then can it be forgotten, and a
//! forgotten one is unknown (`NotFound`) from then on.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;
use mapi_domain::{AttemptNo, ExecutionStatus, ResourceClass, RunId, Timestamp};

use crate::{
    AttemptSubmit, Capabilities, ExecutionHandle, ExecutionInfo, Executor, ExecutorError, Forgot, Isolation,
    SubmitError,
};

/// Takes every attempt, starts nothing, and reports each execution as
/// running: the suite says how it ended by finalizing it.
#[derive(Debug, Default)]
pub struct ScriptedExecutor {
    submitted: Mutex<Vec<(AttemptSubmit, ExecutionHandle)>>,
    cancelled: Mutex<Vec<ExecutionHandle>>,
    /// Executions the suite ended, with how.
    ended: Mutex<HashMap<ExecutionHandle, ExecutionStatus>>,
    forgotten: Mutex<Vec<ExecutionHandle>>,
    /// `status` calls, and listings (`running_among`, `list_recent`).
    statuses: std::sync::atomic::AtomicUsize,
    listings: std::sync::atomic::AtomicUsize,
    /// The regions it reports; one in each area unless set.
    regions: Option<Vec<String>>,
}

impl ScriptedExecutor {
    /// An executor that reports running in `regions` only.
    pub fn in_regions(regions: &[&str]) -> ScriptedExecutor {
        ScriptedExecutor {
            regions: Some(regions.iter().map(|r| (*r).to_owned()).collect()),
            ..ScriptedExecutor::default()
        }
    }

    /// The handles the platform asked to cancel.
    pub fn cancelled(&self) -> Vec<ExecutionHandle> {
        self.cancelled.lock().expect("lock").clone()
    }

    /// Ends the execution `handle` as `status`: it is reported so from now on, and may be
    /// forgotten.
    pub fn finish(&self, handle: &ExecutionHandle, status: ExecutionStatus) {
        self.ended.lock().expect("lock").insert(handle.clone(), status);
    }

    /// The handles the platform forgot, oldest first.
    pub fn forgotten(&self) -> Vec<ExecutionHandle> {
        self.forgotten.lock().expect("lock").clone()
    }

    /// How many attempts were submitted.
    pub fn submitted(&self) -> usize {
        self.submitted.lock().expect("lock").len()
    }

    /// How many `status` reads and how many listings were asked for.
    pub fn reads(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.statuses.load(Relaxed), self.listings.load(Relaxed))
    }
}

/// The handle a scripted execution of `run`'s `attempt` gets.
pub fn handle_of(run: &RunId, attempt: AttemptNo) -> ExecutionHandle {
    ExecutionHandle(format!("scripted/{run}/{attempt}"))
}

#[async_trait]
impl Executor for ScriptedExecutor {
    fn backstop_margin(&self) -> std::time::Duration {
        std::time::Duration::from_secs(10)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            executor: "scripted".to_owned(),
            isolation: Isolation::MicroVm,
            classes: ResourceClass::ALL.to_vec(),
            enforces_memory_limit: true,
            egress_enforced: true,
            dns_enforced: true,
            remote_control_api: true,
            max_task_count: 10_000,
            regions: match &self.regions {
                Some(regions) => regions.clone(),
                None => crate::EVERY_AREA.map(str::to_owned).to_vec(),
            },
            gpus: 1,
        }
    }

    fn check_placement(&self, _class: ResourceClass, _method: &str) -> Result<(), String> {
        Ok(())
    }

    async fn submit(&self, attempt: &AttemptSubmit) -> Result<ExecutionHandle, SubmitError> {
        let handle = handle_of(&attempt.run, attempt.attempt);
        self.submitted.lock().expect("lock").push((attempt.clone(), handle.clone()));
        Ok(handle)
    }

    async fn status(&self, handle: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError> {
        self.statuses.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let submitted = self.submitted.lock().expect("lock");
        let Some((a, h)) = submitted.iter().find(|(_, h)| h == handle) else {
            return Ok(ExecutionInfo {
                handle: handle.clone(),
                nonce: None,
                run: None,
                created: Timestamp::from_secs(0),
                started: None,
                finished: None,
                task_count: 0,
                status: ExecutionStatus::NotFound,
            });
        };
        Ok(self.info(a, h))
    }

    /// A scripted execution prints nothing.
    async fn logs(
        &self,
        _: &ExecutionHandle,
        cursor: Option<&str>,
        _: usize,
    ) -> Result<crate::LogPage, ExecutorError> {
        Ok(crate::LogPage { lines: Vec::new(), cursor: cursor.unwrap_or("").to_owned(), more: false })
    }

    async fn list_recent(&self, _since: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        self.listings.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(self.submitted.lock().expect("lock").iter().map(|(a, h)| self.info(a, h)).collect())
    }

    /// One listing, as Cloud Run lists a Job's executions.
    async fn running_among(
        &self,
        handles: &[ExecutionHandle],
        since: Timestamp,
    ) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        let wanted: std::collections::HashSet<&ExecutionHandle> = handles.iter().collect();
        let listed = self.list_recent(since).await?;
        Ok(listed
            .into_iter()
            .filter(|i| i.status == ExecutionStatus::Running && wanted.contains(&i.handle))
            .collect())
    }

    async fn cancel(&self, handle: &ExecutionHandle) -> Result<(), ExecutorError> {
        self.cancelled.lock().expect("lock").push(handle.clone());
        Ok(())
    }

    /// Kept while running (not ended by the suite); an ended one is removed.
    async fn forget(&self, handle: &ExecutionHandle) -> Result<Forgot, ExecutorError> {
        let mut submitted = self.submitted.lock().expect("lock");
        if !submitted.iter().any(|(_, h)| h == handle) {
            return Ok(Forgot::Gone);
        }
        if self.ended.lock().expect("lock").remove(handle).is_none() {
            return Ok(Forgot::Kept);
        }
        submitted.retain(|(_, h)| h != handle);
        self.forgotten.lock().expect("lock").push(handle.clone());
        Ok(Forgot::Gone)
    }
}

impl ScriptedExecutor {
    /// What the executor reports of a submitted execution: running, or as the suite ended it.
    fn info(&self, a: &AttemptSubmit, h: &ExecutionHandle) -> ExecutionInfo {
        let mut info = running(a, h);
        if let Some(status) = self.ended.lock().expect("lock").get(h) {
            info.status = status.clone();
            info.started = Some(info.created);
            info.finished = Some(info.created);
        }
        info
    }
}

fn running(a: &AttemptSubmit, h: &ExecutionHandle) -> ExecutionInfo {
    ExecutionInfo {
        handle: h.clone(),
        nonce: Some(a.nonce.clone()),
        run: Some(a.run.clone()),
        created: Timestamp::from_secs(0),
        started: None,
        finished: None,
        task_count: a.task_count,
        status: ExecutionStatus::Running,
    }
}
