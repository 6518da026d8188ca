//! What an execution does, played by the world at its start and its end,
//! as `mapi-worker` does it: each task takes its bootstrap (read, then
//! deleted pinned to the generation read, so a duplicate execution finds
//! nothing and exits 0), prints a signed `started`, runs the method
//! in-process on the dataset, and at its end uploads the outputs create-only
//! and prints `output` and `complete` (or `error`). An execution killed for
//! memory, by a signal, by a crash or by its timeout prints nothing more.
//!
//! Every printed event becomes a Pub/Sub push of its log entry, delivered
//! after a delay (long ones arrive after the execution ended), sometimes
//! twice.

use std::time::Duration;

use bytes::Bytes;
use mapi_domain::outcome::exit;
use mapi_domain::{Bootstrap, ExecutionStatus, Timestamp};
use mapi_events::{AttemptKey, EventBody, EventSequencer, pubsub};
use mapi_objects::{IfGeneration, ObjectError, ObjectKey, ObjectStore};
use serde_json::json;

use crate::executor::{Execution, Fate};
use crate::faults::Fault;
use crate::objects::key_of_url;
use crate::world::{Action, World};

/// A push waiting for its delivery.
#[derive(Debug, Clone)]
pub struct Push {
    pub body: Bytes,
    pub label: String,
    pub deliveries: u32,
}

/// One task's work, done at its start, printed and uploaded at its end.
#[derive(Debug)]
pub struct TaskEnd {
    seq: EventSequencer,
    outputs: Vec<(ObjectKey, Bytes, String)>,
    error: Option<String>,
}

/// The method's view of the platform: its events are kept for the pushes.
struct Printed(Vec<EventBody>);

impl mapi_methods::Context for Printed {
    fn progress(&mut self, fraction: f64, message: &str) {
        if self.0.len() < 4 {
            self.0.push(EventBody::Progress { fraction, message: message.to_owned() });
        }
    }

    fn metric(&mut self, name: &str, value: f64) {
        self.0.push(EventBody::Metric { name: name.to_owned(), value });
    }

    fn checkpoint(&mut self, _: &serde_json::Value) -> Result<(), String> {
        Err("checkpoints are not simulated".to_owned())
    }

    fn resume_from(&self) -> Option<serde_json::Value> {
        None
    }

    fn stop_requested(&self) -> bool {
        false
    }
}

/// Takes the bootstrap of `task`, as the worker does; `None` when another
/// execution took it (or it never existed).
fn take_bootstrap(world: &World, e: &Execution, task: u32) -> Option<Bootstrap> {
    let key = ObjectKey::parse(e.submit.nonce.for_task(task).as_str()).ok()?;
    let boot = world.boot.inner.clone();
    world
        .drive(async move {
            let (meta, bytes) = boot.get(&key, None).await.ok()?;
            boot.delete(&key, IfGeneration::Match(meta.generation)).await.ok()?;
            serde_json::from_slice::<Bootstrap>(&bytes).ok()
        })
        .ok()
        .flatten()
}

/// The execution `handle` starts.
pub fn start(world: &mut World, handle: &str) {
    let Some(e) = world.executor.get(handle) else { return };
    let now = world.now();
    if e.cancel_at.is_some() && e.end().0 <= now {
        // Cancelled before it began: it never ran.
        return;
    }
    let mut ends = Vec::new();
    let mut took = Vec::new();
    let mut failed = false;
    for task in 0..e.submit.task_count {
        let Some(boot) = take_bootstrap(world, &e, task) else { continue };
        took.push(task);
        let Ok(key) = AttemptKey::from_hex(&boot.event_key) else { continue };
        let mut seq = EventSequencer::new(boot.run.clone(), boot.attempt, task, key);
        emit(world, &e, &mut seq, EventBody::Started, now);
        let mut end = TaskEnd { seq, outputs: Vec::new(), error: None };
        if e.fate == Fate::Work {
            let mut printed = Printed(Vec::new());
            match run_method(world, &boot, &mut printed) {
                Ok(outputs) => end.outputs = outputs,
                Err(message) => {
                    end.error = Some(message);
                    failed = true;
                }
            }
            for body in printed.0 {
                emit(world, &e, &mut end.seq, body, now);
            }
        }
        ends.push(end);
    }
    let failed_with = |code: Option<i32>, signal: Option<i32>| ExecutionStatus::Failed {
        exit_code: code,
        signal,
        message: String::new(),
    };
    let result = match e.fate {
        _ if ends.is_empty() => ExecutionStatus::Succeeded,
        Fate::Work if failed => failed_with(Some(exit::METHOD_ERROR), None),
        Fate::Work | Fate::Vanish => ExecutionStatus::Succeeded,
        Fate::Oom137 => failed_with(Some(exit::OOM), None),
        Fate::Signal9 => failed_with(None, Some(exit::SIGNAL_KILL)),
        Fate::Crashed => failed_with(Some(70), None),
        Fate::TimedOut => failed_with(Some(exit::SIGTERM), None),
    };
    // A duplicate that found no bootstrap exits at once, having done nothing.
    // A start the clock jumped past runs now, and ends no sooner.
    let ends_at = if ends.is_empty() {
        now + Duration::from_secs(1)
    } else {
        e.ends_at.max(now + Duration::from_secs(1))
    };
    world.executor.update(handle, |x| {
        x.result = result;
        x.took = took;
        x.ends_at = ends_at;
    });
    world.note(format!("exec {handle} starts: {} task(s) took a bootstrap, fate {:?}", ends.len(), e.fate));
    world.running.insert(handle.to_owned(), ends);
    world.at(ends_at, Action::ExecEnd(handle.to_owned()));
}

fn run_method(
    world: &World,
    boot: &Bootstrap,
    printed: &mut Printed,
) -> Result<Vec<(ObjectKey, Bytes, String)>, String> {
    let dataset_key = key_of_url(&boot.dataset_url).ok_or("the dataset URL names no object")?;
    let data = world.data.inner.clone();
    let dataset = world
        .drive(async move { data.get(&dataset_key, None).await.map(|(_, b)| b) })
        .map_err(|_| "the worker died".to_owned())?
        .map_err(|e| format!("the dataset: {e}"))?;
    let spec = mapi_methods::find(&boot.method).ok_or_else(|| format!("unknown method `{}`", boot.method))?;
    let params = mapi_methods::validate(spec, &boot.params).map_err(|e| e.to_string())?;
    let outputs = mapi_methods::run(&boot.method, &params, &dataset, printed).map_err(|e| e.to_string())?;
    outputs
        .into_iter()
        .map(|o| {
            let url = boot.outputs.get(o.name).ok_or_else(|| format!("no upload URL for {}", o.name))?;
            let key = key_of_url(url).ok_or("an upload URL names no object")?;
            Ok((key, Bytes::from(o.bytes), o.name.to_owned()))
        })
        .collect()
}

/// The execution `handle` reaches its end.
pub fn end(world: &mut World, handle: &str) {
    let Some(e) = world.executor.get(handle) else { return };
    let ends = world.running.remove(handle).unwrap_or_default();
    let (at, status) = e.end();
    if at < e.ends_at {
        // Stopped by a cancel before it ended: the worker printed nothing more.
        return;
    }
    if e.fate != Fate::Work || !matches!(status, ExecutionStatus::Succeeded | ExecutionStatus::Failed { .. })
    {
        world.note(format!("exec {handle} ends: {status:?}"));
        return;
    }
    let now = world.now();
    for mut end in ends {
        if let Some(message) = end.error.take() {
            emit(world, &e, &mut end.seq, EventBody::Error { message }, now);
            continue;
        }
        let outputs = u32::try_from(end.outputs.len()).ok();
        for (key, bytes, name) in end.outputs.drain(..) {
            let data = world.data.inner.clone();
            let size = bytes.len() as u64;
            let put = world
                .drive(async move { data.put(&key, bytes, "application/json", IfGeneration::ABSENT).await });
            let generation = match put {
                Ok(Ok(meta)) => Some(meta.generation.0),
                Ok(Err(ObjectError::PreconditionFailed(_))) => None,
                other => {
                    world.note(format!("exec {handle}: upload of {name} failed: {other:?}"));
                    None
                }
            };
            emit(world, &e, &mut end.seq, EventBody::Output { name, size, generation }, now);
        }
        emit(world, &e, &mut end.seq, EventBody::Complete { outputs }, now);
    }
    world.note(format!("exec {handle} ends: {status:?}"));
}

/// Prints one event of `e` at `at`: its push is delivered after a delay,
/// sometimes late, sometimes twice.
fn emit(world: &mut World, e: &Execution, seq: &mut EventSequencer, body: EventBody, at: Timestamp) {
    let signed = seq.next(at, body);
    let label = format!("{}:{}:{}", signed.event.run, signed.event.attempt, signed.event.seq);
    let payload = json!({ "mapi_event": signed });
    let entry =
        pubsub::log_entry(&payload, &e.handle.0, "sim-job", "sim", at, &format!("{}-{label}", e.handle.0));
    let envelope = pubsub::envelope(&entry, "projects/sim/subscriptions/events", &label, at);
    let body = Bytes::from(serde_json::to_vec(&envelope).expect("json"));
    let delay = if world.faults.roll(Fault::PushDelayed) {
        world.rng.with(|r| r.between(30, 1800))
    } else {
        world.rng.with(|r| r.below(4))
    };
    let push = Push { body, label, deliveries: 0 };
    if world.faults.roll(Fault::PushDuplicated) {
        let again = world.rng.with(|r| r.between(1, 300));
        world.at(at + Duration::from_secs(delay + again), Action::Push(push.clone()));
    }
    world.at(at + Duration::from_secs(delay), Action::Push(push));
}
