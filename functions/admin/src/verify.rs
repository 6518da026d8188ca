//! `POST /v1/admin/executors/{name}/verify`: runs the executor conformance
//! suite and the security suite through this deployment's own executor and
//! ports (attempts prepared as the platform prepares a run's, under
//! `t/dev/p/suites/`), and records both reports as the executor's evidence
//! (operators only; audited as `executor.verify`). The shared-tier gate then
//! opens only if both passed for the caps the executor reports now: a
//! report from a suite that ran is the only way it opens besides `PUT
//! …/evidence`.
//!
//! On an executor of this machine (local-process, gvisor) the probes aim at
//! this process, its `MAPI_HOME` (store, keys, secrets) and its executions
//! directory. Elsewhere (cloudrun-jobs) the probes of this machine's files do
//! not run; the network probes aim at listeners on this machine's loopback,
//! which an execution in a real project cannot reach, so there the egress
//! witness is the operator's (see the runbook in the README).

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, State};
use mapi_access::{Action, Resource};
use mapi_domain::{ResourceClass, RunId};
use mapi_executor::conformance::ports::{PortsHarness, SuiteLedger};
use mapi_executor::evidence::{ConformanceReport, Evidence, EvidenceTarget, SecurityReport};
use mapi_executor::security::suite::Targets;
use mapi_identity::{Caller, authorize_operator};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::SuiteRunDoc;
use serde::{Deserialize, Serialize};

use crate::executors::{ExecutorView, known, save_evidence, view};

/// What a verification found and recorded.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Verified {
    /// The executor as it stands after the reports were recorded (the gate's decision in it).
    pub executor: ExecutorView,
    pub conformance: ConformanceReport,
    pub security: SecurityReport,
}

/// Notes the suites' runs in the store, so their executions' events are acknowledged as the
/// suites' (push-events), not counted as sandbox violations.
struct Ledger {
    state: AppState,
    executor: String,
}

#[async_trait::async_trait]
impl SuiteLedger for Ledger {
    async fn note(&self, run: &RunId) {
        let doc = SuiteRunDoc {
            run: run.clone(),
            executor: self.executor.clone(),
            created_at: self.state.clock.now(),
        };
        if let Err(e) = mapi_schema::put(&*self.state.store, &doc).await {
            panic!("the suite's run {run} could not be noted: {e}");
        }
    }
}

/// The platforms (by home) whose executor the suites are running through. One run at a time per
/// platform: each runs a fork bomb and a memory bomb through the executor, and two at once would
/// judge each other's load. The suites' task holds the mark, so a client that stops waiting does not
/// clear it early.
static RUNNING: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<PathBuf>>> =
    std::sync::LazyLock::new(Default::default);

/// The mark of one run of the suites; cleared when dropped.
struct Running(PathBuf);

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.0);
    }
}

fn one_at_a_time(state: &AppState) -> Result<Running, ApiError> {
    let home = state.config.home.clone();
    if RUNNING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(home.clone()) {
        Ok(Running(home))
    } else {
        Err(ApiError::precondition(
            "the suites are running through this executor already: wait for them (about a minute) and see GET /v1/admin/executors",
        ))
    }
}

/// The suites' harness on this deployment's ports.
fn harness(state: &AppState) -> PortsHarness {
    let class_s_mib = state
        .config
        .local_memory_mib
        .get(&ResourceClass::S)
        .copied()
        .unwrap_or(u64::from(ResourceClass::S.memory_gib()) * 1024);
    PortsHarness {
        executor: state.executor.clone(),
        data: state.objects.clone(),
        bootstrap: state.bootstrap.clone(),
        clock: state.clock.clone(),
        class_s_mib,
        ledger: Some(Arc::new(Ledger {
            state: state.clone(),
            executor: state.executor.capabilities().executor,
        })),
    }
}

/// The probes' targets: this machine's, when the executor runs here.
fn targets(state: &AppState) -> Targets {
    if !state.config.executor.is_local() {
        return Targets::default();
    }
    let home = &state.config.home;
    let mut files: Vec<PathBuf> = std::fs::read_dir(home)
        .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).collect())
        .unwrap_or_default();
    if let mapi_platform::config::SignerConfig::Local { key_file, .. } = &state.config.signer {
        files.push(key_file.clone());
    }
    files.sort();
    files.dedup();
    Targets {
        platform_files: files,
        executions_dir: Some(home.join("executions")),
        host_pid: Some(std::process::id()),
        write_dir: Some(home.clone()),
        same_machine: true,
    }
}

/// Run the conformance and security suites through the executor and record their reports
/// (operators; audited). Takes tens of seconds: every case runs executions.
#[utoipa::path(post, path = "/v1/admin/executors/{name}/verify", tag = "admin",
    responses((status = 200, body = Verified), (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem),
        (status = 503, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn verify(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<Verified>, ApiError> {
    let (conformance, security) = run_suites(&state, &caller, &name, |h, targets| async move {
        let conformance = mapi_executor::conformance::run_all(&h, || h.clock.now()).await;
        (conformance, mapi_executor::security::suite::run(&h, &targets).await)
    })
    .await?;
    let caps = state.executor.capabilities();
    let evidence = Evidence {
        target: EvidenceTarget {
            executor: name.clone(),
            remote_control_api: caps.remote_control_api,
            enforces_memory_limit: caps.enforces_memory_limit,
            caps,
        },
        conformance: conformance.clone(),
        security: security.clone(),
    };
    let doc = save_evidence(&state, &caller, &name, &evidence, "executor.verify").await?;
    Ok(Json(Verified { executor: view(&state, doc).await?, conformance, security }))
}

/// The security suite's report (the shape evidence records) and whether it would count.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecurityVerdict {
    /// The required probes ran and were stopped, and no probe that ran got through.
    pub passed: bool,
    #[serde(flatten)]
    pub report: SecurityReport,
}

/// Run the security suite alone through the executor and answer its report (operators). It
/// records nothing: evidence is both suites' reports (`…/verify`).
#[utoipa::path(post, path = "/v1/admin/executors/{name}/security", tag = "admin",
    responses((status = 200, body = SecurityVerdict), (status = 404, body = mapi_problem::Problem),
        (status = 409, body = mapi_problem::Problem),
        (status = 503, body = mapi_problem::Problem)), security(("session" = [])))]
pub async fn security(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<SecurityVerdict>, ApiError> {
    let report = run_suites(&state, &caller, &name, |h, targets| async move {
        mapi_executor::security::suite::run(&h, &targets).await
    })
    .await?;
    Ok(Json(SecurityVerdict { passed: report.passed(), report }))
}

/// Runs `suites` (given the harness on this deployment's ports and the probes' targets)
/// as an operator through executor `name`, one run at a time per platform, on a task of their own
/// (a client that stops waiting does not stop them).
async fn run_suites<F, Fut, T>(
    state: &AppState,
    caller: &Caller,
    name: &str,
    suites: F,
) -> Result<T, ApiError>
where
    F: FnOnce(PortsHarness, Targets) -> Fut,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    authorize_operator(state, caller, Resource::Executor, Action::Update, "executors").await?;
    known(state, name)?;
    let running = one_at_a_time(state)?;
    let run = suites(harness(state), targets(state));
    tokio::spawn(async move {
        let _running = running;
        run.await
    })
    .await
    .map_err(|e| {
        ApiError::unavailable(
            format!("the suites could not run through executor `{name}`: {e}; retry when it is healthy"),
            60,
        )
    })
}
