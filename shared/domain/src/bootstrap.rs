//! The bootstrap object: everything one task of one attempt needs, written
//! by the dispatcher to `bootstrap/<nonce>` and read-then-deleted by the
//! worker, so a duplicate execution finds nothing and does no work.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{AttemptNo, PluginBoot, ProjectId, RunId, TenantId};

/// The format version this build writes and reads.
pub const BOOTSTRAP_VERSION: u32 = 1;

/// One task's instructions. URLs are signed and expire; the event key is the
/// attempt's HMAC key, known only to the platform and this bootstrap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Bootstrap {
    pub v: u32,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub run: RunId,
    pub attempt: AttemptNo,
    pub task: u32,
    pub task_count: u32,
    pub method: String,
    pub params: BTreeMap<String, serde_json::Value>,
    /// The run's timeout: the worker stops itself (and flushes) at this point.
    pub timeout_s: u32,
    /// Signed GET of the dataset.
    pub dataset_url: String,
    /// Output file name → signed create-only PUT.
    pub outputs: BTreeMap<String, String>,
    /// Signed PUT (overwrite) of this attempt's checkpoint.
    pub checkpoint_url: String,
    /// Signed GET of the checkpoint an earlier attempt flushed, to resume from.
    pub resume_url: Option<String>,
    /// The attempt's event-signing key, 64 hex characters.
    pub event_key: String,
    /// The tenant code to run in place of a built-in method, for a run of a
    /// plugin method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<PluginBoot>,
    /// For a child of a fan-out parent that succeeded before: the results
    /// it wrote then, which the task writes again as its outputs instead of
    /// running the method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse: Option<Reuse>,
}

/// An earlier attempt's results of one child of a fan-out parent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reuse {
    /// Where they come from, in words (`run r-… attempt 1`).
    pub from: String,
    /// Output file name → signed GET of what the child wrote.
    pub outputs: BTreeMap<String, String>,
}
