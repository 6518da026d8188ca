//! A job's state, derived from its counts: never stored.

use serde::{Deserialize, Serialize};

mapi_domain::wire_enum!(
    /// Where a job is.
    JobState {
        /// The fan-out has not given every item its task yet.
        Enqueuing => "enqueuing",
        /// Every item has its task (or the job was cancelled); some are not finished.
        Running => "running",
        /// Every item succeeded.
        Succeeded => "succeeded",
        /// Finished: some items succeeded, some failed or were cancelled.
        CompletedWithErrors => "completed_with_errors",
        /// Finished: no item succeeded.
        Failed => "failed",
    }
);

/// A job's item counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Counts {
    pub total: u64,
    /// Items given their task by the fan-out.
    pub enqueued: u64,
    pub succeeded: u64,
    pub failed: u64,
    /// Enqueued and not finished.
    pub running: u64,
    /// Not enqueued yet.
    pub pending: u64,
    /// Never enqueued: the job was cancelled, or its fan-out stopped on an
    /// error (the job's `error` says which).
    pub cancelled: u64,
}

/// The state and counts of a job of `total` items whose fan-out has
/// enqueued `enqueued` (and `fanout_done` says whether it finished), with
/// `succeeded` and `failed` items finished. `cancelled`: no more items will
/// be enqueued (a cancel, or a fan-out stopped on an error).
pub fn derive(
    total: u64,
    enqueued: u64,
    fanout_done: bool,
    cancelled: bool,
    succeeded: u64,
    failed: u64,
) -> (JobState, Counts) {
    let done = succeeded + failed;
    let running = enqueued.saturating_sub(done);
    let (pending, never) =
        if cancelled { (0, total.saturating_sub(enqueued)) } else { (total - enqueued.min(total), 0) };
    let counts = Counts { total, enqueued, succeeded, failed, running, pending, cancelled: never };
    let state = if !fanout_done && !cancelled {
        JobState::Enqueuing
    } else if running > 0 || pending > 0 {
        JobState::Running
    } else if failed == 0 && never == 0 {
        JobState::Succeeded
    } else if succeeded == 0 {
        JobState::Failed
    } else {
        JobState::CompletedWithErrors
    };
    (state, counts)
}

impl JobState {
    pub fn is_final(self) -> bool {
        matches!(self, JobState::Succeeded | JobState::CompletedWithErrors | JobState::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_follow_the_counts() {
        use JobState::*;
        let cases = [
            // total, enqueued, fanout done, cancelled, succeeded, failed → state
            ((10, 0, false, false, 0, 0), Enqueuing),
            ((10, 5, false, false, 5, 0), Enqueuing),
            ((10, 10, true, false, 4, 0), Running),
            ((10, 10, true, false, 10, 0), Succeeded),
            ((10, 10, true, false, 7, 3), CompletedWithErrors),
            ((10, 10, true, false, 0, 10), Failed),
            ((10, 4, false, true, 2, 0), Running),
            ((10, 4, false, true, 4, 0), CompletedWithErrors),
            ((10, 0, false, true, 0, 0), Failed),
            ((0, 0, true, false, 0, 0), Succeeded),
        ];
        for ((t, e, d, c, s, f), want) in cases {
            assert_eq!(derive(t, e, d, c, s, f).0, want, "{:?}", (t, e, d, c, s, f));
        }
        let (_, counts) = derive(10, 4, false, true, 2, 1);
        assert_eq!((counts.running, counts.pending, counts.cancelled), (1, 0, 6));
    }
}
