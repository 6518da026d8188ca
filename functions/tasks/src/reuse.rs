//! A fan-out parent's children are not run twice: when an attempt follows
//! one whose children partly succeeded (an out-of-memory or infrastructure
//! retry of the same run), or is the first of a run asked as the retry of an
//! ended one with the same method, params, dataset and children, each child
//! that stored every output there is handed them (signed GETs) in its
//! bootstrap. What is stored decides, not the child's `complete` event: a
//! child writes its outputs create-only before it completes, and an attempt
//! that failed is finalized without waiting for its other children's last
//! events. Its task writes them again as its outputs and completes
//! without running the method, so the attempt's directory holds every
//! child's results, verified and folded as usual.

use std::collections::BTreeMap;
use std::time::Duration;

use mapi_domain::{AttemptNo, Reuse};
use mapi_lifecycle::RunDoc;
use mapi_objects::{ObjectKey, SignedMethod};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AttemptDoc, layout};

/// The attempt whose completed children a new attempt takes over.
#[derive(Debug)]
pub struct Earlier {
    run: RunDoc,
    attempt: AttemptNo,
    tasks: u32,
}

/// The attempt before `attempt` of `run` (or the last of the run it
/// retries, when it asked the same of the same data), when that attempt
/// was made: a fan-out parent's children take what it stored, and every
/// task resumes from the checkpoint it flushed.
pub async fn earlier(
    state: &AppState,
    run: &RunDoc,
    attempt: AttemptNo,
) -> Result<Option<Earlier>, ApiError> {
    let (source, at) = if attempt.0 > 1 {
        (run.clone(), AttemptNo(attempt.0 - 1))
    } else if let Some(of) = run.retry_of() {
        let Some(old) = mapi_schema::get::<RunDoc>(&*state.store, of.as_str()).await? else {
            return Ok(None);
        };
        let same = (old.tenant(), old.project(), old.method(), old.params(), old.dataset(), old.task_count())
            == (run.tenant(), run.project(), run.method(), run.params(), run.dataset(), run.task_count());
        if !same {
            return Ok(None);
        }
        let at = old.attempt();
        (old, at)
    } else {
        return Ok(None);
    };
    let id = AttemptDoc::id_of(source.id(), at);
    let Some(row) = mapi_schema::get::<AttemptDoc>(&*state.store, &id).await? else { return Ok(None) };
    Ok(Some(Earlier { run: source, attempt: at, tasks: row.task_count }))
}

impl Earlier {
    /// Where task `task` of the earlier attempt flushed its checkpoint, when
    /// that attempt had the same tasks as `tasks`.
    pub fn checkpoint(&self, task: u32, tasks: u32) -> Option<String> {
        let run = &self.run;
        let dir = layout::task_dir(run.tenant(), run.project(), run.id(), self.attempt, task, self.tasks);
        (self.tasks == tasks).then(|| layout::checkpoint(&dir))
    }
}

/// What child `task` wrote in `earlier`, when every output of its method is
/// stored there: each with a signed GET valid for `ttl`.
pub async fn results(
    state: &AppState,
    earlier: &Earlier,
    task: u32,
    ttl: Duration,
) -> Result<Option<Reuse>, ApiError> {
    let Some(spec) = mapi_methods::find(earlier.run.method()).filter(|m| m.fan_out.is_some()) else {
        return Ok(None);
    };
    if task >= earlier.tasks {
        return Ok(None);
    }
    let run = &earlier.run;
    let dir = layout::task_dir(run.tenant(), run.project(), run.id(), earlier.attempt, task, earlier.tasks);
    let prefix = layout::output(&dir, "");
    let page = state.objects.list(&prefix, None, 100).await?;
    let mut outputs = BTreeMap::new();
    for meta in page.objects {
        let Some(name) = meta.key.as_str().strip_prefix(&prefix) else { continue };
        let key = ObjectKey::parse(meta.key.as_str())?;
        outputs.insert(name.to_owned(), state.objects.signed_url(SignedMethod::Get, &key, ttl).await?);
    }
    if !spec.outputs.iter().all(|o| outputs.contains_key(o.name)) {
        return Ok(None);
    }
    Ok(Some(Reuse { from: format!("run {} attempt {}", run.id(), earlier.attempt), outputs }))
}
