//! The documents of item jobs.

use std::collections::BTreeMap;

use mapi_domain::{JobId, ProjectId, TenantId, Timestamp, UserId};
use mapi_schema::{Doc, JOB_SHARDS};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How far the fan-out has got. `reserved` items took slots of the
/// tenant's concurrent-items counter; `enqueued` items have their tasks.
/// `step` numbers the fan-out tasks: the task of step `s` acts only while
/// the cursor is at `s`, so a redelivered or stale task does nothing twice.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fanout {
    pub step: u64,
    pub reserved: u64,
    pub enqueued: u64,
    /// When every item had its task (or the job was cancelled, or the
    /// fan-out stopped on an error).
    pub finished_at: Option<Timestamp>,
    /// Why the fan-out stopped before every item had its task: its manifest
    /// could not be read, which no redelivery changes. The items it never
    /// gave a task count as cancelled; those it did still run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An item job. Id: the job id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobDoc {
    pub id: JobId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub method: String,
    /// The method's validated params, for every item.
    pub params: BTreeMap<String, Value>,
    /// How many items the manifest holds.
    pub items: u64,
    /// Items per manifest chunk object.
    pub chunk_items: u32,
    /// The tenant's concurrent-items limit when the job was submitted.
    pub window: u32,
    pub created_at: Timestamp,
    pub created_by: UserId,
    /// The public id of the API token it was submitted with.
    pub token: Option<String>,
    pub fanout: Fanout,
    /// 0 for the first pass; each `retry-failed` starts the next round.
    pub round: u32,
    pub cancel_requested_at: Option<Timestamp>,
    /// Items of the current round may still finish: the tick's job sweep
    /// looks at the job until it finds them all finished. Set at submit and
    /// by `retry-failed` (jobs stored before this was recorded carry
    /// `false` and are never swept).
    #[serde(default)]
    pub open: bool,
    /// How the current round ended, as the job sweep first found it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished: Option<JobFinished>,
}

/// The end of a job's round: when the job sweep found every item finished,
/// and the state and counts it found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct JobFinished {
    pub at: Timestamp,
    pub round: u32,
    pub state: crate::JobState,
    pub counts: crate::Counts,
}

impl JobDoc {
    /// The state and counts of this job with `counts` (its shards' sum).
    pub fn derive(&self, counts: &JobCountsDoc) -> (crate::JobState, crate::Counts) {
        crate::derive(
            self.items,
            self.fanout.enqueued,
            self.fanout.finished_at.is_some(),
            self.cancel_requested_at.is_some() || self.fanout.error.is_some(),
            u64::try_from(counts.succeeded).unwrap_or(0),
            u64::try_from(counts.failed).unwrap_or(0),
        )
    }
}

impl Doc for JobDoc {
    const COLLECTION: &'static str = "jobs";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

mapi_domain::wire_enum!(
    /// How an item ended.
    ItemOutcome {
        Succeeded => "succeeded",
        Failed => "failed",
    }
);

/// The marker of a finished item: created once (must not exist), with the
/// job's counts, the tenant's concurrent items, the usage counters and the
/// item's charge (added to its minute's `mapi_schema::ItemLedgerMinute`)
/// moved in the same commit. It holds the item's end itself when that is small (at most
/// [`crate::layout::INLINE_END_MAX`] bytes of JSON): one document, no
/// object. A larger end is an object written before the marker, and `end`
/// is absent. Id: `{job}:{idx}` (see [`JobItemDoc::id_of`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobItemDoc {
    pub job: JobId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub idx: u64,
    pub outcome: ItemOutcome,
    pub round: u32,
    /// Deliveries that ran the method in this round.
    pub attempts: u32,
    pub duration_ms: u64,
    pub cost_micros: i64,
    pub at: Timestamp,
    /// How the item ended, when it is small enough to live here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end: Option<InlineEnd>,
}

/// An end held in its item's marker: what the marker does not already say
/// (the end's round, outcome and usage are the marker's own fields).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InlineEnd {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemFailure>,
    /// The log lines of the deliveries this end holds, oldest first.
    pub log: Vec<Value>,
}

impl From<&ItemEnd> for InlineEnd {
    fn from(end: &ItemEnd) -> Self {
        InlineEnd { result: end.result.clone(), error: end.error.clone(), log: end.log.clone() }
    }
}

impl JobItemDoc {
    /// The whole end this marker holds, if it holds one.
    pub fn held_end(&self) -> Option<ItemEnd> {
        let end = self.end.as_ref()?;
        let usage = ItemUsage {
            idx: self.idx,
            round: self.round,
            attempts: self.attempts,
            duration_ms: self.duration_ms,
            cost_micros: self.cost_micros,
            outcome: self.outcome,
        };
        Some(ItemEnd {
            round: self.round,
            outcome: self.outcome,
            result: end.result.clone(),
            error: end.error.clone(),
            usage,
            log: end.log.clone(),
        })
    }

    /// Zero-padded so ids sort by index.
    pub fn id_of(job: &JobId, idx: u64) -> String {
        format!("{job}:{idx:09}")
    }
}

impl Doc for JobItemDoc {
    const COLLECTION: &'static str = "job_items";
    fn doc_id(&self) -> String {
        JobItemDoc::id_of(&self.job, self.idx)
    }
}

/// A failed item's marker kept when `retry-failed` reopens the item: the
/// ledger stays append-only. Id: `{job}:{idx}:r{round}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JobItemHistoryDoc(pub JobItemDoc);

impl JobItemHistoryDoc {
    /// The id of item `idx`'s marker of `round`, kept when it was reopened.
    pub fn id_of(job: &JobId, idx: u64, round: u32) -> String {
        format!("{}:r{round}", JobItemDoc::id_of(job, idx))
    }
}

impl Doc for JobItemHistoryDoc {
    const COLLECTION: &'static str = "job_item_history";
    fn doc_id(&self) -> String {
        JobItemHistoryDoc::id_of(&self.0.job, self.0.idx, self.0.round)
    }
}

/// One shard of a job's counts. Id: `{job}:{shard}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobCountsDoc {
    #[serde(default)]
    pub succeeded: i64,
    #[serde(default)]
    pub failed: i64,
    #[serde(default)]
    pub duration_ms: i64,
    #[serde(default)]
    pub cost_micros: i64,
}

impl JobCountsDoc {
    pub fn id_of(job: &JobId, idx: u64) -> String {
        format!("{job}:{}", idx % JOB_SHARDS)
    }

    /// The ids of every shard of `job`.
    pub fn shard_ids(job: &JobId) -> Vec<String> {
        (0..JOB_SHARDS).map(|s| format!("{job}:{s}")).collect()
    }

    /// The sum of shards.
    pub fn sum<'a>(shards: impl IntoIterator<Item = &'a JobCountsDoc>) -> JobCountsDoc {
        shards.into_iter().fold(JobCountsDoc::default(), |a, s| JobCountsDoc {
            succeeded: a.succeeded + s.succeeded,
            failed: a.failed + s.failed,
            duration_ms: a.duration_ms + s.duration_ms,
            cost_micros: a.cost_micros + s.cost_micros,
        })
    }
}

/// Counts are named by id; the document carries no id field of its own.
impl Doc for JobCountsDoc {
    const COLLECTION: &'static str = "job_counts";
    fn doc_id(&self) -> String {
        String::new()
    }
}

/// The fields of [`JobCountsDoc`].
pub mod count_field {
    pub const SUCCEEDED: &str = "succeeded";
    pub const FAILED: &str = "failed";
    pub const DURATION: &str = "duration_ms";
    pub const COST: &str = "cost_micros";
}

/// An item's usage in its end: the delivery that finished the item.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemUsage {
    pub idx: u64,
    pub round: u32,
    pub attempts: u32,
    /// The method's time in the delivery that finished the item.
    pub duration_ms: u64,
    pub cost_micros: i64,
    pub outcome: ItemOutcome,
}

/// Why an item failed, in its end.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemFailure {
    pub idx: u64,
    pub round: u32,
    #[serde(rename = "type")]
    pub kind: mapi_domain::ItemErrorKind,
    pub message: String,
    pub attempts: u32,
}

/// How an item ended in a round: in its marker when small, else the object
/// `ends/{idx}.json`, written create-only by the delivery that finished it
/// (either way a success replaces a failure of the same round: a result
/// beats an error).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ItemEnd {
    pub round: u32,
    pub outcome: ItemOutcome,
    /// The method's result, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ItemFailure>,
    pub usage: ItemUsage,
    /// The log lines of the deliveries this end holds, oldest first.
    pub log: Vec<serde_json::Value>,
}
