//! Every behaviour of Cloud Run this executor relies on that has not yet
//! been confirmed against a real Cloud Run project: each is one constant
//! here, so that checking them in a real project means reading one file. Each is exercised by the fake in
//! `mapi-tests` exactly as stated, so a wrong assumption shows up as a
//! difference between this file and a real project, not as scattered code.

/// `jobs.run` calls a minute a project and region allows. The bucket's
/// ceiling (`MAPI_CLOUDRUN_SUBMITS_PER_MINUTE` may not exceed it).
pub const JOBS_RUN_QUOTA_PER_MINUTE: u32 = 180;

/// Adoption finds an execution's nonce in its template: the `MAPI_NONCE`
/// container override of `jobs.run` appears among
/// `Execution.template.containers[].env`.
pub const NONCE_IN_EXECUTION_TEMPLATE: &str = "MAPI_NONCE";

/// The run id is found the same way, for the executors view.
pub const RUN_ID_IN_EXECUTION_TEMPLATE: &str = "MAPI_RUN_ID";

/// `executions.list` answers newest first, so paging can stop at the first
/// execution older than the lookback.
pub const EXECUTIONS_LISTED_NEWEST_FIRST: bool = true;

/// A task killed for memory is reported with exit code 137, or with
/// `term_signal` 9 and no exit code, or only with a status message that
/// contains this text.
pub const MEMORY_LIMIT_MESSAGE: &str = "memory limit";

/// A task stopped at its timeout is reported with exit code 143 (the
/// supervisor's own answer to SIGTERM); when Cloud Run kills it without an
/// exit code, its status message contains this text.
pub const TIMEOUT_MESSAGE: &str = "timed out";

/// A 429 from `jobs.run` means Cloud Run made nothing, so the same nonce
/// may be submitted again without adopting first.
pub const THROTTLED_MADE_NOTHING: bool = true;

/// The monitored resource of the entries Cloud Logging keeps for what a
/// Job's task prints (`resource.type`).
pub const LOG_RESOURCE_TYPE: &str = "cloud_run_job";

/// The entry label Cloud Run sets to the execution's short name.
pub const LOG_EXECUTION_LABEL: &str = "run.googleapis.com/execution_name";

/// The entry label Cloud Run sets to the task's index (`"0"`, `"1"`…).
pub const LOG_TASK_LABEL: &str = "run.googleapis.com/task_index";

/// The log ids (URL-encoded, as in `logName`) of a task's stdout and stderr.
pub const LOG_STDOUT: &str = "run.googleapis.com%2Fstdout";
pub const LOG_STDERR: &str = "run.googleapis.com%2Fstderr";

/// No entry of an execution is timestamped more than this many seconds
/// before the execution's `createTime` (clock skew between Cloud Run's
/// control plane and the instance): the lower bound `logs` reads from.
pub const LOG_SKEW_BEFORE_CREATION_S: u64 = 60;

/// `entries.list` with `orderBy = "timestamp asc"` lists entries of equal
/// timestamps in the byte order of their `insertId` (as the API reference
/// states), so a reader that remembers the last (timestamp, insertId) it
/// returned can skip exactly what it already returned.
pub const LOG_EQUAL_TIMESTAMPS_BY_INSERT_ID: bool = true;

/// `executions.delete` of an execution that has not completed is not
/// refused (the API reference documents no refusal): Cloud Run is taken to
/// stop it and delete it. The executor therefore reads the execution first
/// and never asks to delete one without a `completionTime`.
pub const DELETE_REFUSES_A_RUNNING_EXECUTION: bool = false;
