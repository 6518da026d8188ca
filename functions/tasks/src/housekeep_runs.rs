//! The run housekeeper: once a run has been over for its tenant's run
//! retention (`run_retention_days` of the tenant's quota policy, else the
//! platform's `MAPI_RUN_RETENTION_DAYS`), it has the executor forget each
//! of the run's executions ([`mapi_executor::Executor::forget`]: the local
//! executor's directories, Cloud Run's execution resources, and the logs
//! read through them), then records on the run that they are gone
//! ([`mapi_lifecycle::commands::leftovers_forgotten`]). The run document,
//! its ledger entries and its output objects stay; its logs answer `410
//! GONE` from then on. Each call then sweeps model versions' bytes and runs
//! past their own retentions ([`crate::housekeep_versions`]). Called by the
//! scheduler (`mapi dev`'s tick loop locally), beside the jobs housekeeper.
//!
//! The runs are found by `leftovers_since` (set when a run ends, removed
//! when its leftovers are forgotten), oldest first, through the declared
//! indexes: one query per tenant whose policy sets its own retention, then
//! one for every other tenant under the platform's. A recorded run leaves
//! both queries, so each call looks only at runs with something left. An
//! execution the executor keeps (still running, or its events not all
//! forwarded yet) leaves its run to a later call; so does an executor that
//! cannot answer now.
//!
//! Architecture invariant: a run is recorded as forgotten only after the
//! executor answered [`mapi_executor::Forgot::Gone`] for every attempt's
//! execution, and never before it ended.

use axum::extract::State;
use mapi_domain::AttemptNo;
use mapi_executor::Forgot;
use mapi_identity::InternalCaller;
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::{AttemptDoc, Doc, tx_get};
use mapi_store::transact;

use crate::retention::{Retention, aged};

/// The run housekeeper's route.
pub const HOUSEKEEP_RUNS_PATH: &str = "/internal/tasks/runs/housekeep";

/// Runs looked at per call, in all: a bounded amount of work per request.
const RUNS_PER_CALL: u32 = 50;

/// What one call did.
#[derive(Debug, Default, serde::Serialize)]
pub struct RunsHousekept {
    /// Runs whose executions were all forgotten, and so recorded.
    pub forgotten_runs: u32,
    /// Executions the executor removed (or found gone already).
    pub forgotten_executions: u32,
    /// Runs left for a later call: an execution still running or not fully forwarded, or an
    /// executor that could not answer.
    pub kept_runs: u32,
    /// Model versions' bytes and runs past their retention.
    #[serde(flatten)]
    pub versions: crate::housekeep_versions::VersionsHousekept,
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
) -> Result<Json<RunsHousekept>, ApiError> {
    let policies = crate::retention::Policies::read(&state).await?;
    let own = policies.own(|p| p.run_retention_days);
    let retention =
        Retention { own: &own, default: Some(state.config.run_retention), now: state.clock.now() };
    let mut out = RunsHousekept::default();
    for d in retention.expired(&state, RUNS_PER_CALL, aged(RunDoc::COLLECTION, "leftovers_since")).await? {
        housekeep(&state, &d.decode()?, &mut out).await?;
    }
    out.versions = crate::housekeep_versions::sweep(&state, &policies).await?;
    if out.forgotten_runs > 0 || out.kept_runs > 0 {
        tracing::info!(
            runs = out.forgotten_runs,
            executions = out.forgotten_executions,
            kept = out.kept_runs,
            "executions of runs past their retention forgotten"
        );
    }
    Ok(Json(out))
}

/// Has every execution of `run` forgotten, then records the run; a run with an execution kept
/// is left as it is.
async fn housekeep(state: &AppState, run: &RunDoc, out: &mut RunsHousekept) -> Result<(), ApiError> {
    let mut forgotten = 0;
    for n in 1..=run.attempt().0 {
        let id = AttemptDoc::id_of(run.id(), AttemptNo(n));
        let Some(handle) = mapi_schema::get::<AttemptDoc>(&*state.store, &id).await?.and_then(|a| a.handle)
        else {
            continue;
        };
        match state.executor.forget(&handle).await {
            Ok(Forgot::Gone) => forgotten += 1,
            Ok(Forgot::Kept) => {
                out.kept_runs += 1;
                return Ok(());
            }
            Err(e) => {
                tracing::warn!(run = %run.id(), execution = %handle, error = %e, "forgetting an execution failed; a later call tries again");
                out.kept_runs += 1;
                return Ok(());
            }
        }
    }
    let (id, now) = (run.id().as_str(), state.clock.now());
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(r) = tx_get::<RunDoc>(&mut tx, id).await? {
            mapi_lifecycle::commands::leftovers_forgotten(r, now).write(&mut tx)?;
        }
        Ok(tx.finish(()))
    })
    .await?;
    out.forgotten_runs += 1;
    out.forgotten_executions += forgotten;
    Ok(())
}
