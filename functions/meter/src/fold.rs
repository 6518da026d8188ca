//! Folding a fan-out parent's children into the run's own outputs.
//!
//! A run of a fan-out parent (`ts.backtest`, `sbc`: the registry's
//! `FanOut`) is the tasks of one execution, its children. The finalization
//! that would make it `succeeded` first reads the result each child wrote,
//! folds them ([`mapi_methods::fold`]) and stores the parent's own outputs
//! under the run's `aggregate/` prefix, outside any transaction (object I/O)
//! and create-only, so a redelivered finalization finds its own bytes there.
//! Only then does the commit make the run `succeeded`, recording the fold's
//! metrics and outputs with it. Results that cannot be folded fail the run
//! with the reason; a store that cannot be reached answers 503 and the queue
//! delivers the finalization again.

use bytes::Bytes;
use mapi_api::views::Aggregate;
use mapi_domain::AttemptNo;
use mapi_lifecycle::RunDoc;
use mapi_objects::{ObjectError, ObjectKey};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::layout;

/// Whether `run` is folded when it succeeds: its method is a fan-out parent.
pub fn needed(run: &RunDoc) -> bool {
    mapi_methods::fan_out(run.method()).is_some()
}

/// Reads the children's results of `attempt`, folds them and stores the
/// parent's outputs. `Ok(Err(why))`: the results cannot be folded (the run
/// fails saying so).
pub async fn fold(
    state: &AppState,
    run: &RunDoc,
    attempt: AttemptNo,
) -> Result<Result<Aggregate, String>, ApiError> {
    let fan = mapi_methods::fan_out(run.method())
        .ok_or_else(|| ApiError::internal("a fold was asked for a method that is no fan-out parent"))?;
    let tasks = run.task_count();
    let mut results = Vec::new();
    for task in 0..tasks {
        let dir = layout::task_dir(run.tenant(), run.project(), run.id(), attempt, task, tasks);
        let key = ObjectKey::parse(&layout::output(&dir, fan.result))?;
        match state.objects.get(&key, None).await {
            Ok((_, bytes)) => results.push(bytes.to_vec()),
            Err(ObjectError::NotFound(_)) => return Ok(Err(format!("child {task} wrote no {}", fan.result))),
            Err(e) => return Err(e.into()),
        }
    }
    let folded = match mapi_methods::fold::fold(&fan, &results) {
        Ok(f) => f,
        Err(e) => return Ok(Err(e.0)),
    };
    let mut outputs = Vec::new();
    for file in folded.files {
        let key = ObjectKey::parse(&layout::aggregate(run.tenant(), run.project(), run.id(), file.name))?;
        mapi_bundles::put_once(&*state.objects, &key, Bytes::from(file.bytes), file.media_type)
            .await
            .map_err(|e| {
                ApiError::unavailable_because("the run's aggregate could not be stored: retry shortly", 5, &e)
            })?;
        outputs.push(file.name.to_owned());
    }
    Ok(Ok(Aggregate { metrics: folded.metrics, outputs }))
}
