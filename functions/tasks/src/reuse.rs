//! A fan-out parent's children are not run twice: when an attempt follows
//! one whose children partly succeeded (an out-of-memory or infrastructure
//! retry of the same run), or is the first of a run asked as the retry of an
//! ended one with the same method, params, dataset and children, each child
//! that completed there is handed the results it wrote (signed GETs) in its
//! bootstrap. Its task writes them again as its outputs and completes
//! without running the method, so the attempt's directory holds every
//! child's results, verified and folded as usual.

use std::collections::BTreeMap;
use std::time::Duration;

use mapi_domain::{AttemptNo, Reuse};
use mapi_lifecycle::RunDoc;
use mapi_objects::{ObjectKey, SignedMethod};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AttemptDoc, ProgressDoc, layout};

/// The attempt whose completed children a new attempt takes over.
#[derive(Debug)]
pub struct Earlier {
    run: RunDoc,
    attempt: AttemptNo,
    tasks: u32,
    /// Whether each child completed there, by index.
    complete: Vec<bool>,
}

/// The attempt before `attempt` of `run` (or the last of the run it
/// retries), when `run` is a fan-out parent and that attempt was heard from.
pub async fn earlier(
    state: &AppState,
    run: &RunDoc,
    attempt: AttemptNo,
) -> Result<Option<Earlier>, ApiError> {
    if mapi_methods::fan_out(run.method()).is_none() {
        return Ok(None);
    }
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
    let Some(progress) = mapi_schema::get::<ProgressDoc>(&*state.store, &id).await? else { return Ok(None) };
    let complete = progress.progress.tasks().map(|(_, done)| done).collect();
    Ok(Some(Earlier { run: source, attempt: at, tasks: row.task_count, complete }))
}

/// What child `task` wrote in `earlier`, when it completed there and its
/// result is stored: each output with a signed GET valid for `ttl`.
pub async fn results(
    state: &AppState,
    earlier: &Earlier,
    task: u32,
    ttl: Duration,
) -> Result<Option<Reuse>, ApiError> {
    let Some(fan) = mapi_methods::fan_out(earlier.run.method()) else { return Ok(None) };
    if !earlier.complete.get(task as usize).copied().unwrap_or(false) {
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
    if !outputs.contains_key(fan.result) {
        return Ok(None);
    }
    Ok(Some(Reuse { from: format!("run {} attempt {}", run.id(), earlier.attempt), outputs }))
}
