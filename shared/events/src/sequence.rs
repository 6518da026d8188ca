//! Sequence numbers and the worker's [`EventSequencer`].
//!
//! Every task of an attempt numbers its own events, so sequence numbers carry
//! the task index in their high bits: `task_seq(task, n) = task << 40 | n`.
//! Task indexes are capped at [`MAX_TASK`] (2^23 - 1) so every sequence number
//! is below 2^63 and fits a signed 64-bit store integer; `n` is capped at
//! [`MAX_SEQ_N`] (2^40 - 1). Both saturate rather than wrap, so within those
//! bounds (Cloud Run allows 10,000 tasks) no two events of an attempt share a
//! sequence number.

use mapi_domain::{AttemptNo, RunId, Timestamp};

use crate::{AttemptKey, Event, EventBody, SignedEvent, VERSION, sign};

/// How many low bits of a sequence number count a task's events.
pub const SEQ_BITS: u32 = 40;
/// The largest per-task event number.
pub const MAX_SEQ_N: u64 = (1 << SEQ_BITS) - 1;
/// The largest task index with its own sequence range.
pub const MAX_TASK: u32 = (1 << 23) - 1;

/// The sequence number of the `n`-th event (from 0) of task `task`.
pub fn task_seq(task: u32, n: u64) -> u64 {
    (u64::from(task.min(MAX_TASK)) << SEQ_BITS) | n.min(MAX_SEQ_N)
}

/// Numbers and signs one task's events: `task_seq(task, 0)`, `task_seq(task, 1)`, ...
#[derive(Debug)]
pub struct EventSequencer {
    run: RunId,
    attempt: AttemptNo,
    task: u32,
    key: AttemptKey,
    n: u64,
}

impl EventSequencer {
    pub fn new(run: RunId, attempt: AttemptNo, task: u32, key: AttemptKey) -> Self {
        EventSequencer { run, attempt, task, key, n: 0 }
    }

    /// The next event, signed.
    pub fn next(&mut self, at: Timestamp, body: EventBody) -> SignedEvent {
        let seq = task_seq(self.task, self.n);
        self.n = self.n.saturating_add(1);
        let event = Event {
            v: VERSION,
            run: self.run.clone(),
            attempt: self.attempt,
            task: self.task,
            seq,
            at,
            body,
        };
        sign(event, &self.key)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::{fixtures, verify};

    #[test]
    fn tasks_never_collide() {
        let ns = [0, 1, 2, 1 << 20, MAX_SEQ_N - 1, MAX_SEQ_N];
        let tasks = [0, 1, 2, 3, 255, 9_999, 10_000, MAX_TASK - 1, MAX_TASK];
        let mut seen = BTreeSet::new();
        for task in tasks {
            for n in ns {
                let seq = task_seq(task, n);
                assert!(seen.insert(seq), "task {task} n {n} collides");
                assert_eq!(seq >> SEQ_BITS, u64::from(task));
                assert_eq!(seq & MAX_SEQ_N, n);
                assert!(seq < 1 << 63);
            }
        }
        // Ranges are ordered by task: the last of task i is below the first of task i + 1.
        assert!(task_seq(4, MAX_SEQ_N) < task_seq(5, 0));
        assert_eq!(task_seq(2, 7), 2_199_023_255_559);
    }

    #[test]
    fn out_of_range_inputs_saturate() {
        assert_eq!(task_seq(0, u64::MAX), MAX_SEQ_N);
        assert_eq!(task_seq(0, 1 << SEQ_BITS), MAX_SEQ_N);
        assert_eq!(task_seq(u32::MAX, 0), task_seq(MAX_TASK, 0));
        assert!(task_seq(u32::MAX, u64::MAX) < 1 << 63);
    }

    #[test]
    fn sequencer_numbers_from_task_seq_0_strictly_increasing_and_signs() {
        let key = fixtures::key();
        let mut seq = EventSequencer::new(fixtures::run(), AttemptNo(3), 5, key.clone());
        let mut last = None;
        for i in 0..100u64 {
            let signed = seq.next(fixtures::at(), EventBody::Started);
            assert_eq!(signed.event.seq, task_seq(5, i));
            assert!(last.is_none_or(|l| signed.event.seq > l));
            last = Some(signed.event.seq);
            assert_eq!((signed.event.task, signed.event.attempt), (5, AttemptNo(3)));
            let raw = serde_json::to_value(&signed).expect("serializes");
            assert_eq!(verify(&raw, &key), Ok(signed.event));
        }
        assert_eq!(format!("{seq:?}").matches("AttemptKey(..)").count(), 1);
    }
}
