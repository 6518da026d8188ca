//! The tick's sweep of active workflow runs: each gets its advance pushed
//! (served by `submit`, which moves it), so a child run's end moves its
//! workflow run within a tick, and a workflow run whose advance was lost
//! (a process that died mid-pass, a push that failed) moves again. One
//! query of the active runs, at most [`PAGE`], oldest first.

use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{Doc, WorkflowRunDoc};
use mapi_store::{Direction, Op, Query};

/// The most active workflow runs one tick pushes.
pub const PAGE: u32 = 200;

/// Pushes the advance of every active workflow run; answers (pushed,
/// failed, whether one is driving: a run, grid or deploy node running,
/// which the next tick must follow; a run waiting only on people is moved
/// by their decision, or by the scheduler's tick).
pub async fn sweep(state: &AppState) -> Result<(u32, u32, bool), ApiError> {
    let q = Query::new(WorkflowRunDoc::COLLECTION)
        .filter("active", Op::Eq, true)
        .order_by("created_at", Direction::Asc)
        .limit(PAGE);
    let runs: Vec<WorkflowRunDoc> =
        state.store.query(&q, None).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
    let tag = format!("t{}", state.clock.now().as_micros());
    let (mut pushed, mut failed, mut driving) = (0, 0, false);
    for run in &runs {
        driving |= run.driving;
        match mapi_schema::tasks::push_advance(&*state.queue, &run.id, &tag).await {
            Ok(()) => pushed += 1,
            Err(e) => {
                failed += 1;
                tracing::warn!(workflow_run = %run.id, error = %e, "pushing an advance failed; the next tick retries");
            }
        }
    }
    Ok((pushed, failed, driving))
}
