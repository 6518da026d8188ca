//! The queue tasks of item jobs, their routes and their names.
//!
//! Names are hashed from the job, the step or item index and the round
//! (Cloud Tasks advises against sequential names, which crowd one key
//! range), so the same work always has the same name and a second enqueue
//! of it is refused as already existing.

use mapi_domain::JobId;
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
