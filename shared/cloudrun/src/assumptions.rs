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
