//! The order-independent merge of verified events into one run attempt's
//! progress.
//!
//! Pub/Sub delivers at least once, late and out of order, so [`Progress`] is
//! built only from commutative pieces: "latest" values are kept with the
//! sequence number that set them and replaced only by a higher one (ties,
//! which deduplication rules out, fall back to comparing the values); per-task
//! fractions are maxima; flags are ORs; the event count is a sum. Applying the
//! same set of distinct events in any order gives an equal `Progress`.

use std::cmp::Ordering;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Event, EventBody};

/// A value and the sequence number of the event that set it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Stamped<T> {
    seq: u64,
    value: T,
}

/// Whether an event `(seq, value)` replaces the current stamped value.
fn replaces<T>(current: Option<&Stamped<T>>, seq: u64, value: &T, cmp: fn(&T, &T) -> Ordering) -> bool {
    current.is_none_or(|c| seq.cmp(&c.seq).then_with(|| cmp(value, &c.value)) == Ordering::Greater)
}

/// One task's share.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
struct TaskProgress {
    /// The highest fraction reported, clamped to [0, 1].
    fraction: f64,
    /// The task sent `Complete`.
    complete: bool,
    /// How many outputs its `Complete` said it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    outputs: Option<u32>,
}

/// The merged progress of one run attempt; stored as a document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Progress {
    tasks: Vec<TaskProgress>,
    started: bool,
    events: u64,
    message: Option<Stamped<String>>,
    error: Option<Stamped<String>>,
    metrics: BTreeMap<String, Stamped<f64>>,
    outputs: BTreeMap<String, Stamped<u64>>,
    /// Every output by the name a run's view shows (`{name}` for one task,
    /// `{task}/{name}` for a fan-out), with the generation it was written at.
    #[serde(default)]
    written: BTreeMap<String, Stamped<Written>>,
    checkpoint: Option<Stamped<i64>>,
}

/// One output as its task reported writing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Written {
    pub size: u64,
    /// The object generation the write was answered with; `None` when the
    /// reporting try found the output written by an earlier try.
    pub generation: Option<i64>,
}

impl Progress {
    /// Nothing reported yet, for an execution of `task_count` tasks (at least 1).
    pub fn new(task_count: u32) -> Progress {
        let tasks = usize::try_from(task_count.max(1)).unwrap_or(usize::MAX);
        Progress {
            tasks: vec![TaskProgress::default(); tasks],
            started: false,
            events: 0,
            message: None,
            error: None,
            metrics: BTreeMap::new(),
            outputs: BTreeMap::new(),
            written: BTreeMap::new(),
            checkpoint: None,
        }
    }

    /// Merges a verified event. The caller drops duplicates on
    /// (run, attempt, seq). Per-task parts of an event whose task is not below
    /// `task_count` are ignored; non-finite numbers (which `verify` refuses)
    /// are ignored.
    pub fn apply(&mut self, e: &Event) {
        self.events = self.events.saturating_add(1);
        let seq = e.seq;
        let task = usize::try_from(e.task).ok().and_then(|i| self.tasks.get_mut(i));
        if !matches!(e.body, EventBody::Error { .. }) {
            self.started = true;
        }
        match &e.body {
            EventBody::Started => {}
            EventBody::Progress { fraction, message } => {
                if let Some(t) = task
                    && fraction.is_finite()
                {
                    t.fraction = t.fraction.max(fraction.clamp(0.0, 1.0));
                }
                if replaces(self.message.as_ref(), seq, message, Ord::cmp) {
                    self.message = Some(Stamped { seq, value: message.clone() });
                }
            }
            EventBody::Metric { name, value } => {
                if value.is_finite() && replaces(self.metrics.get(name), seq, value, f64::total_cmp) {
                    self.metrics.insert(name.clone(), Stamped { seq, value: *value });
                }
            }
            EventBody::Checkpoint { generation } => {
                if replaces(self.checkpoint.as_ref(), seq, generation, Ord::cmp) {
                    self.checkpoint = Some(Stamped { seq, value: *generation });
                }
            }
            EventBody::Output { name, size, generation } => {
                if replaces(self.outputs.get(name), seq, size, Ord::cmp) {
                    self.outputs.insert(name.clone(), Stamped { seq, value: *size });
                }
                if task.is_some() {
                    let key = if self.tasks.len() > 1 { format!("{}/{name}", e.task) } else { name.clone() };
                    let value = Written { size: *size, generation: *generation };
                    // A report that knows its generation outranks one that
                    // does not (a later try that found the output written);
                    // between equals the higher seq wins.
                    let rank = |s: &Stamped<Written>| (s.value.generation.is_some(), s.seq, s.value);
                    let new = Stamped { seq, value };
                    if self.written.get(&key).is_none_or(|c| rank(&new) > rank(c)) {
                        self.written.insert(key, new);
                    }
                }
            }
            EventBody::Complete { outputs } => {
                if let Some(t) = task {
                    t.complete = true;
                    t.outputs = t.outputs.max(*outputs);
                }
            }
            EventBody::Error { message } => {
                if replaces(self.error.as_ref(), seq, message, Ord::cmp) {
                    self.error = Some(Stamped { seq, value: message.clone() });
                }
            }
        }
    }

    /// Each task's highest fraction reported and whether it sent `Complete`, by index.
    pub fn tasks(&self) -> impl Iterator<Item = (f64, bool)> + '_ {
        self.tasks.iter().map(|t| (t.fraction, t.complete))
    }

    pub fn task_count(&self) -> u32 {
        u32::try_from(self.tasks.len()).unwrap_or(u32::MAX)
    }

    /// The mean over tasks of each task's highest fraction, a completed task
    /// counting as 1. Never decreases as events are applied.
    pub fn fraction(&self) -> f64 {
        if self.tasks.is_empty() {
            return 0.0;
        }
        let done = self.tasks_complete();
        let sum: f64 = self.tasks.iter().zip(done).map(|(t, done)| if done { 1.0 } else { t.fraction }).sum();
        sum / self.tasks.len() as f64
    }

    /// The message of the progress event with the highest seq.
    pub fn message(&self) -> Option<&str> {
        self.message.as_ref().map(|m| m.value.as_str())
    }

    /// Some task reported anything but an error: the method ran.
    pub fn started(&self) -> bool {
        self.started
    }

    /// Every task `0..task_count` sent `Complete`, and the output events of
    /// as many outputs as it said it wrote are merged.
    pub fn complete(&self) -> bool {
        !self.tasks.is_empty() && self.tasks_complete().iter().all(|c| *c)
    }

    /// Per task: it sent `Complete` and as many of its outputs are merged as it counted.
    fn tasks_complete(&self) -> Vec<bool> {
        let mut merged = vec![0u32; self.tasks.len()];
        if self.tasks.iter().any(|t| t.outputs.is_some_and(|n| n > 0)) {
            for key in self.written.keys() {
                let task = match key.split_once('/') {
                    _ if self.tasks.len() == 1 => Some(0),
                    Some((t, _)) => t.parse::<usize>().ok(),
                    None => None,
                };
                if let Some(n) = task.and_then(|t| merged.get_mut(t)) {
                    *n = n.saturating_add(1);
                }
            }
        }
        self.tasks.iter().zip(merged).map(|(t, m)| t.complete && t.outputs.is_none_or(|n| m >= n)).collect()
    }

    /// The message of the error event with the highest seq.
    pub fn error(&self) -> Option<&str> {
        self.error.as_ref().map(|m| m.value.as_str())
    }

    /// Per name, the value of the metric event with the highest seq.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        self.metrics.iter().map(|(k, s)| (k.clone(), s.value)).collect()
    }

    /// Every output written, name to size (for a name written twice, the size
    /// from the event with the highest seq).
    pub fn outputs(&self) -> BTreeMap<String, u64> {
        self.outputs.iter().map(|(k, s)| (k.clone(), s.value)).collect()
    }

    /// Every output its task reported writing, by the name a run's view
    /// shows (`{name}`, or `{task}/{name}` for a fan-out), with its size and
    /// the generation the write was answered with.
    pub fn written(&self) -> BTreeMap<String, Written> {
        self.written.iter().map(|(k, s)| (k.clone(), s.value)).collect()
    }

    /// The generation of the checkpoint event with the highest seq.
    pub fn checkpoint(&self) -> Option<i64> {
        self.checkpoint.as_ref().map(|c| c.value)
    }

    /// How many events were applied.
    pub fn events(&self) -> u64 {
        self.events
    }

    /// The read-only view an API returns.
    pub fn summary(&self) -> Summary {
        Summary {
            fraction: self.fraction(),
            message: self.message().map(str::to_owned),
            started: self.started(),
            complete: self.complete(),
            error: self.error().map(str::to_owned),
            metrics: self.metrics(),
            outputs: self.outputs(),
            checkpoint: self.checkpoint(),
            events: self.events(),
            task_count: self.task_count(),
        }
    }
}

/// What [`Progress`] says, flattened for API responses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Summary {
    /// Mean over tasks of each task's highest reported fraction, in [0, 1].
    pub fraction: f64,
    /// The latest progress message.
    pub message: Option<String>,
    pub started: bool,
    /// Every task reported completion.
    pub complete: bool,
    /// The latest error message.
    pub error: Option<String>,
    /// Latest value per metric name.
    pub metrics: BTreeMap<String, f64>,
    /// Output file name to size in bytes.
    pub outputs: BTreeMap<String, u64>,
    /// Object generation of the latest checkpoint.
    pub checkpoint: Option<i64>,
    /// Events applied.
    pub events: u64,
    pub task_count: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{fixtures, task_seq};

    /// The workspace's SplitMix64, enough to shuffle deterministically.
    struct SplitMix64(mapi_entropy::SplitMix64);

    impl SplitMix64 {
        fn new(seed: u64) -> SplitMix64 {
            SplitMix64(mapi_entropy::SplitMix64::new(seed))
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.0.below(u64::try_from(n).expect("fits"))).expect("fits")
        }

        fn shuffle<T>(&mut self, items: &mut [T]) {
            for i in (1..items.len()).rev() {
                items.swap(i, self.below(i + 1));
            }
        }
    }

    fn ev(task: u32, n: u64, body: EventBody) -> Event {
        Event { task, seq: task_seq(task, n), body, ..fixtures::event() }
    }

    fn progress(task: u32, n: u64, fraction: f64) -> Event {
        ev(task, n, EventBody::Progress { fraction, message: format!("task {task} at {fraction}") })
    }

    /// A plausible run of 3 tasks whose length depends on `rng`.
    fn scenario(rng: &mut SplitMix64, with_error: bool) -> Vec<Event> {
        let mut events = Vec::new();
        for task in 0..3u32 {
            let mut n = 0;
            let mut push = |body: EventBody| {
                events.push(ev(task, n, body));
                n += 1;
            };
            push(EventBody::Started);
            let steps = 1 + rng.below(6);
            for step in 1..=steps {
                let fraction = step as f64 / (steps + 1) as f64;
                push(EventBody::Progress { fraction, message: format!("task {task} step {step}") });
                push(EventBody::Metric { name: "loss".into(), value: 1.0 / step as f64 + f64::from(task) });
                push(EventBody::Metric { name: format!("task{task}.steps"), value: step as f64 });
                if rng.below(2) == 0 {
                    push(EventBody::Checkpoint { generation: 1_000 * i64::from(task) + step as i64 });
                }
            }
            let generation = Some(7_000 + i64::from(task));
            push(EventBody::Output {
                name: format!("part-{task}.csv"),
                size: 100 + u64::from(task),
                generation,
            });
            let size = 10 * u64::from(task) + 1;
            push(EventBody::Output { name: "summary.json".into(), size, generation: None });
            if rng.below(2) == 0 {
                // An earlier try of the task had written it: the same object, reported with its generation.
                push(EventBody::Output {
                    name: "summary.json".into(),
                    size,
                    generation: Some(9_000 + i64::from(task)),
                });
            }
            if with_error && task == 1 {
                push(EventBody::Error { message: format!("task {task} failed") });
            } else {
                push(EventBody::Complete { outputs: None });
            }
        }
        events
    }

    fn merged(events: &[Event]) -> Progress {
        let mut p = Progress::new(3);
        for e in events {
            p.apply(e);
        }
        p
    }

    #[test]
    fn any_order_gives_the_same_progress() {
        for seed in 0..200u64 {
            let mut rng = SplitMix64::new(seed);
            let in_order = scenario(&mut rng, seed % 5 == 0);
            let expected = merged(&in_order);
            let mut shuffled = in_order.clone();
            rng.shuffle(&mut shuffled);
            assert_ne!(shuffled.len(), 0);
            let got = merged(&shuffled);
            assert_eq!(got, expected, "seed {seed}");
            assert_eq!(got.events(), u64::try_from(in_order.len()).expect("fits"));
            assert_eq!(got.complete(), seed % 5 != 0, "seed {seed}");
            // Task 2's last events have the highest seqs.
            assert_eq!(got.outputs()["summary.json"], 21);
            assert!(got.message().is_some_and(|m| m.starts_with("task 2 step")));
            assert_eq!(got.outputs().len(), 4);
            assert_eq!(got.written().len(), 6, "per task: {:?}", got.written());
            assert_eq!(got.written()["2/part-2.csv"], Written { size: 102, generation: Some(7_002) });
            assert!(got.started());
        }
    }

    #[test]
    fn fraction_never_moves_back() {
        for seed in 0..50u64 {
            let mut rng = SplitMix64::new(seed ^ 0xdead_beef);
            let mut events = scenario(&mut rng, false);
            rng.shuffle(&mut events);
            let mut p = Progress::new(3);
            let mut last = 0.0;
            for e in &events {
                p.apply(e);
                assert!(p.fraction() >= last, "seed {seed}");
                last = p.fraction();
            }
            assert_eq!(p.fraction(), 1.0);
        }
    }

    #[test]
    fn complete_before_progress_is_still_complete() {
        let mut p = Progress::new(1);
        p.apply(&ev(0, 5, EventBody::Complete { outputs: None }));
        p.apply(&progress(0, 2, 0.4));
        assert!(p.complete());
        assert_eq!(p.fraction(), 1.0);
        assert_eq!(p.message(), Some("task 0 at 0.4"));
    }

    #[test]
    fn late_lower_progress_does_not_move_fraction_back() {
        let mut p = Progress::new(1);
        p.apply(&progress(0, 3, 0.75));
        p.apply(&progress(0, 1, 0.25));
        assert_eq!(p.fraction(), 0.75);
        assert_eq!(p.message(), Some("task 0 at 0.75"), "the higher seq keeps the message");
    }

    #[test]
    fn fraction_is_the_mean_over_tasks_with_completed_tasks_as_one() {
        let mut p = Progress::new(4);
        p.apply(&progress(0, 0, 0.3));
        p.apply(&ev(0, 1, EventBody::Complete { outputs: None }));
        p.apply(&ev(1, 0, EventBody::Complete { outputs: None }));
        p.apply(&progress(2, 0, 0.5));
        assert_eq!(p.fraction(), 0.625);
        assert!(!p.complete());
        p.apply(&ev(3, 0, EventBody::Complete { outputs: None }));
        p.apply(&ev(2, 1, EventBody::Complete { outputs: None }));
        assert!(p.complete());
        assert_eq!(p.fraction(), 1.0);
    }

    #[test]
    fn fractions_are_clamped_and_non_finite_ignored() {
        let mut p = Progress::new(2);
        p.apply(&progress(0, 0, 7.0));
        p.apply(&progress(1, 0, -3.0));
        p.apply(&progress(1, 1, f64::NAN));
        assert_eq!(p.fraction(), 0.5);
        p.apply(&ev(1, 2, EventBody::Metric { name: "m".into(), value: f64::INFINITY }));
        assert!(p.metrics().is_empty());
    }

    #[test]
    fn error_keeps_the_highest_seq() {
        let mut p = Progress::new(2);
        p.apply(&ev(1, 0, EventBody::Error { message: "later task".into() }));
        p.apply(&ev(0, 9, EventBody::Error { message: "earlier task".into() }));
        assert_eq!(p.error(), Some("later task"));
        assert!(!p.started(), "an error alone does not show the method ran");
        p.apply(&ev(1, 1, EventBody::Error { message: "last".into() }));
        assert_eq!(p.error(), Some("last"));
    }

    #[test]
    fn latest_values_follow_the_highest_seq() {
        let mut p = Progress::new(2);
        p.apply(&ev(1, 0, EventBody::Metric { name: "loss".into(), value: 0.5 }));
        p.apply(&ev(0, 4, EventBody::Metric { name: "loss".into(), value: 0.1 }));
        p.apply(&ev(0, 5, EventBody::Checkpoint { generation: 9 }));
        p.apply(&ev(0, 2, EventBody::Checkpoint { generation: 11 }));
        p.apply(&ev(0, 1, EventBody::Output { name: "a".into(), size: 1, generation: Some(1) }));
        p.apply(&ev(1, 1, EventBody::Output { name: "a".into(), size: 2, generation: Some(2) }));
        p.apply(&ev(0, 3, EventBody::Output { name: "b".into(), size: 3, generation: None }));
        assert_eq!(p.metrics(), BTreeMap::from([("loss".to_owned(), 0.5)]));
        assert_eq!(p.checkpoint(), Some(9));
        assert_eq!(p.outputs(), BTreeMap::from([("a".to_owned(), 2), ("b".to_owned(), 3)]));
        assert_eq!(p.events(), 7);
        assert!(p.started());
    }

    #[test]
    fn outputs_are_written_per_task_at_their_generation() {
        let out = |size, generation| EventBody::Output { name: "m.json".into(), size, generation };
        let mut p = Progress::new(2);
        p.apply(&ev(0, 1, out(5, Some(11))));
        p.apply(&ev(1, 1, out(6, Some(12))));
        // A later try of task 0 found the output written: it does not know the generation.
        p.apply(&ev(0, 9, out(5, None)));
        p.apply(&ev(4, 1, out(7, Some(13))));
        let w = |size, generation| Written { size, generation };
        let want = BTreeMap::from([
            ("0/m.json".to_owned(), w(5, Some(11))),
            ("1/m.json".to_owned(), w(6, Some(12))),
        ]);
        assert_eq!(p.written(), want, "the generation is kept; a task out of range writes nothing");
        let mut one = Progress::new(1);
        one.apply(&ev(0, 2, out(5, None)));
        assert_eq!(one.written(), BTreeMap::from([("m.json".to_owned(), w(5, None))]));
        one.apply(&ev(0, 1, out(5, Some(3))));
        assert_eq!(one.written()["m.json"], w(5, Some(3)), "an earlier report with a generation outranks");
    }

    #[test]
    fn a_completion_waits_for_the_outputs_it_counts() {
        let out = |name: &str| EventBody::Output { name: name.into(), size: 1, generation: Some(1) };
        let mut p = Progress::new(2);
        p.apply(&ev(0, 3, EventBody::Complete { outputs: Some(2) }));
        p.apply(&ev(1, 1, EventBody::Complete { outputs: Some(0) }));
        p.apply(&ev(0, 1, out("a.json")));
        assert!(!p.complete(), "one of task 0's two outputs is still on its way");
        assert!(p.fraction() < 1.0);
        p.apply(&ev(0, 2, out("b.json")));
        assert!(p.complete());
        assert_eq!(p.fraction(), 1.0);
    }

    #[test]
    fn equal_seqs_still_commute() {
        let a = ev(0, 1, EventBody::Error { message: "a".into() });
        let b = ev(0, 1, EventBody::Error { message: "b".into() });
        assert_eq!(merged(&[a.clone(), b.clone()]), merged(&[b, a]));
    }

    #[test]
    fn out_of_range_tasks_do_not_count() {
        let mut p = Progress::new(1);
        p.apply(&ev(5, 0, EventBody::Complete { outputs: None }));
        assert!(!p.complete());
        assert_eq!(p.fraction(), 0.0);
        assert_eq!(Progress::new(0).task_count(), 1);
    }

    #[test]
    fn stored_document_round_trips() {
        let mut rng = SplitMix64::new(42);
        let p = merged(&scenario(&mut rng, true));
        let doc = serde_json::to_string(&p).expect("serializes");
        let back: Progress = serde_json::from_str(&doc).expect("deserializes");
        assert_eq!(back, p);
        let s = p.summary();
        assert_eq!(s.fraction, p.fraction());
        assert_eq!(s.error.as_deref(), Some("task 1 failed"));
        assert_eq!(s.task_count, 3);
        assert!(!s.complete);
    }
}
