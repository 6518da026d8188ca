//! The files of one local execution, shared by the executor (which writes
//! the spec and reads the status) and the host process (which reads the
//! spec and writes the status). Every file is written to a temporary name
//! and renamed, so a reader sees a whole file or none.
//!
//! ```text
//! $MAPI_HOME/executions/<handle>/
//!   spec.json          what to run (written before the host starts)
//!   host.json          the host's pid and start time, written by the executor
//!                      when it starts the host (liveness across restarts)
//!   cancel             present once a cancel was asked for
//!   status.json        the outcome (written once, by the host, at the end)
//!   tasks/<i>/stdout.log, stderr.log
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use mapi_domain::{AttemptNo, ExecutionStatus, Nonce, ResourceClass, RunId, Timestamp};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A program and its leading arguments.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub program: PathBuf,
    pub args: Vec<String>,
}

/// What the host runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecSpec {
    pub handle: String,
    pub job: String,
    pub run: RunId,
    pub attempt: AttemptNo,
    pub nonce: Nonce,
    pub class: ResourceClass,
    pub task_count: u32,
    pub created: Timestamp,
    /// The backstop: the run's timeout plus the executor's margin.
    pub task_timeout_ms: u64,
    /// SIGTERM to SIGKILL.
    pub grace_ms: u64,
    /// Memory limit of each task's process group.
    pub memory_limit_mib: u64,
    /// The task program (the worker).
    pub task: Command,
    /// The tasks' whole environment (they inherit nothing else).
    pub env: BTreeMap<String, String>,
    /// Run each task in a gVisor sandbox (the gvisor executor); `None`: as a host process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::gvisor::task::SandboxSpec>,
}

/// Why the host stopped a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    MemoryLimit,
    Timeout,
    Cancelled,
}

/// How one task ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    pub index: u32,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub stopped: Option<StopReason>,
    pub started: Timestamp,
    pub finished: Timestamp,
}

/// The host's liveness record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostRecord {
    pub pid: i32,
    /// The process start time in clock ticks since boot (`/proc/<pid>/stat`
    /// field 22): a reused pid has another.
    pub start_ticks: u64,
}

/// The outcome of a finished execution.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatusFile {
    pub started: Timestamp,
    pub finished: Timestamp,
    pub status: ExecutionStatus,
    pub tasks: Vec<TaskResult>,
}

pub const SPEC: &str = "spec.json";
pub const HOST: &str = "host.json";
pub const STATUS: &str = "status.json";
pub const CANCEL: &str = "cancel";

pub fn task_dir(exec_dir: &Path, index: u32) -> PathBuf {
    exec_dir.join("tasks").join(index.to_string())
}

/// Writes `value` as JSON to `dir/name` atomically (temp file, fsync, rename).
pub fn write_json<T: Serialize>(dir: &Path, name: &str, value: &T) -> std::io::Result<()> {
    use std::io::Write;
    // A writer-specific temporary name: two processes may write one file.
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?)?;
    f.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    if let Ok(d) = std::fs::File::open(dir) {
        d.sync_all()?;
    }
    Ok(())
}

/// Reads `dir/name`; `Ok(None)` when it does not exist.
pub fn read_json<T: DeserializeOwned>(dir: &Path, name: &str) -> std::io::Result<Option<T>> {
    match std::fs::read(dir.join(name)) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(std::io::Error::other),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
