//! Retention of model versions' bytes and of runs themselves, swept by the
//! run housekeeper after it forgot executions.
//!
//! A model version whose tenant's model-version retention
//! (`model_version_retention_days` of its quota policy, else
//! `MAPI_MODEL_VERSION_RETENTION_DAYS`, which keeps them by default) has
//! passed since it was sealed, and that no endpoint of its tenant uses
//! ([`EndpointDoc::versions_in_use`]), expires in two steps:
//! 1. its record is marked `expired_at`, with the audit entry
//!    `model_version.expire`, in one commit: from then on deploying,
//!    promoting, reading or downloading it answers `410 GONE`;
//! 2. at least [`EXPIRY_GRACE`] later, if still no endpoint uses it (a
//!    deploy that had read it before the mark has committed by then), the
//!    objects of the attempt it seals and its bundle are deleted, then its
//!    `bytes_since` is removed, which takes it out of the query. An endpoint
//!    found using it at step 2 lifts the mark instead.
//!
//! The record stays: its run still names it and the list shows it expired.
//!
//! A run whose tenant's run record retention (`run_record_retention_days`,
//! else `MAPI_RUN_RECORD_RETENTION_DAYS`, kept by default) has passed since
//! its executions were forgotten goes with everything of it: first its
//! version's bytes (the same two steps, whatever the version retention),
//! then every object under the run's prefix, its attempts, progress, events
//! seen and tracked log, and last, in one commit, its version's record, the
//! run document and the audit entry `run.expire`. Its ledger entries stay
//! (they are the bill). A run whose version an endpoint uses is kept.
//!
//! Both are found through [`Retention::expired`] (the versions by
//! `bytes_since`, the runs by `leftovers_forgotten_at`), a bounded number a
//! call.
//!
//! Architecture invariant: a version's bytes are deleted only after it was
//! marked expired for [`EXPIRY_GRACE`] and while no endpoint of its tenant
//! uses it; the document a sweep finds its work by (the version's
//! `bytes_since`, the run) changes last, so a call that dies halfway is
//! taken up by the next.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use mapi_domain::{ModelVersionId, TenantId};
use mapi_endpoints::EndpointDoc;
use mapi_identity::Audit;
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{
    AttemptDoc, Doc, EventSeenDoc, ModelVersionDoc, ProgressDoc, RunLogDoc, layout, tx_create, tx_get, tx_put,
};
use mapi_store::{Op, Query, transact};

use crate::removal::{delete_prefix, delete_where};
use crate::retention::{Policies, Retention, aged};

/// How long a version stays marked expired before its bytes go: longer
/// than any request that read it before the mark takes to commit.
pub const EXPIRY_GRACE: Duration = Duration::from_secs(3_600);

/// Versions looked at per call.
const VERSIONS_PER_CALL: u32 = 50;

/// Runs looked at per call (each is several commits and an object listing).
const RUNS_PER_CALL: u32 = 20;

/// What one sweep did.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct VersionsHousekept {
    /// Versions marked expired (step 1), their bytes kept for the grace.
    pub expiring_versions: u32,
    /// Versions whose bytes were deleted (step 2).
    pub expired_versions: u32,
    /// Runs deleted with their documents and objects.
    pub deleted_runs: u32,
    /// Objects deleted, of versions and of runs.
    pub deleted_objects: u64,
    /// Versions past their retention (or of runs past theirs) that an endpoint uses: kept.
    pub kept_in_use: u32,
}

/// Where one version's expiry stands after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    /// An endpoint uses it: kept (a mark it had is lifted).
    InUse,
    /// Marked expired now, or earlier and within the grace.
    Marked,
    /// Its bytes are gone.
    Gone,
}

/// The versions each tenant's endpoints use, read once per tenant a call.
#[derive(Default)]
struct InUse(HashMap<TenantId, HashSet<ModelVersionId>>);

impl InUse {
    async fn of(
        &mut self,
        state: &AppState,
        tenant: &TenantId,
    ) -> Result<&HashSet<ModelVersionId>, ApiError> {
        if !self.0.contains_key(tenant) {
            let q = Query::new(EndpointDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str());
            let mut used = HashSet::new();
            for d in state.store.query(&q, None).await? {
                used.extend(d.decode::<EndpointDoc>()?.versions_in_use().cloned());
            }
            self.0.insert(tenant.clone(), used);
        }
        Ok(&self.0[tenant])
    }
}

/// Sweeps the versions and then the runs past their retention, a bounded number of each.
pub async fn sweep(state: &AppState, policies: &Policies) -> Result<VersionsHousekept, ApiError> {
    let now = state.clock.now();
    let mut out = VersionsHousekept::default();
    let mut in_use = InUse::default();
    let version_own = policies.own(|p| p.model_version_retention_days);
    let versions = Retention { own: &version_own, default: state.config.model_version_retention, now };
    for d in
        versions.expired(state, VERSIONS_PER_CALL, aged(ModelVersionDoc::COLLECTION, "bytes_since")).await?
    {
        let version: ModelVersionDoc = d.decode()?;
        let days = days(version_own.get(&version.tenant).copied().or(versions.default));
        let why = format!("past its model-version retention of {days} days, serving no endpoint");
        expire(state, &mut in_use, &version, &why, &mut out).await?;
    }
    let run_own = policies.own(|p| p.run_record_retention_days);
    let runs = Retention { own: &run_own, default: state.config.run_record_retention, now };
    let forgotten = aged(RunDoc::COLLECTION, "leftovers_forgotten_at");
    for d in runs.expired(state, RUNS_PER_CALL, forgotten).await? {
        let run: RunDoc = d.decode()?;
        let days = days(run_own.get(run.tenant()).copied().or(runs.default));
        remove_run(state, &mut in_use, &run, days, &mut out).await?;
    }
    if out != VersionsHousekept::default() {
        tracing::info!(
            expiring = out.expiring_versions,
            expired = out.expired_versions,
            runs = out.deleted_runs,
            objects = out.deleted_objects,
            kept = out.kept_in_use,
            "model versions and runs past their retention"
        );
    }
    Ok(out)
}

fn days(kept: Option<Duration>) -> u64 {
    kept.unwrap_or_default().as_secs() / 86_400
}

/// Takes `version` one step towards expiry (see the module's two steps).
async fn expire(
    state: &AppState,
    in_use: &mut InUse,
    version: &ModelVersionDoc,
    why: &str,
    out: &mut VersionsHousekept,
) -> Result<Expiry, ApiError> {
    let now = state.clock.now();
    if in_use.of(state, &version.tenant).await?.contains(&version.id) {
        out.kept_in_use += 1;
        if version.expired_at.is_some() {
            tracing::warn!(model_version = %version.id, "an endpoint took up a version marked expired before the mark: its bytes stay");
            update(state, version, |v| v.expired_at = None, None).await?;
        }
        return Ok(Expiry::InUse);
    }
    match version.expired_at {
        None => {
            let record = Audit::internal(
                "model_version.expire",
                format!("{}/{}", ModelVersionDoc::COLLECTION, version.id),
            )
            .tenant(&version.tenant)
            .project(&version.project)
            .detail(format!(
                "{} of run {}, {why}: its bytes go after {} s",
                version.id,
                version.run,
                EXPIRY_GRACE.as_secs()
            ))
            .into_doc(now, &*state.entropy);
            update(state, version, |v| v.expired_at = Some(now), Some(&record)).await?;
            out.expiring_versions += 1;
            Ok(Expiry::Marked)
        }
        Some(at) if now < at + EXPIRY_GRACE => Ok(Expiry::Marked),
        Some(_) => {
            let attempt =
                layout::attempt_dir(&version.tenant, &version.project, &version.run, version.attempt);
            out.deleted_objects += delete_prefix(state, &format!("{attempt}/")).await?;
            out.deleted_objects += delete_prefix(state, &format!("{}/", version.bundle)).await?;
            update(state, version, |v| v.bytes_since = None, None).await?;
            out.expired_versions += 1;
            Ok(Expiry::Gone)
        }
    }
}

/// Changes `version`'s record as it is now by `change`, with `record` (an audit entry) in the
/// same commit; a record gone meanwhile is left gone.
async fn update(
    state: &AppState,
    version: &ModelVersionDoc,
    change: impl Fn(&mut ModelVersionDoc) + Sync,
    record: Option<&mapi_schema::AuditDoc>,
) -> Result<(), ApiError> {
    let (id, change) = (version.id.as_str(), &change);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if let Some(mut v) = tx_get::<ModelVersionDoc>(&mut tx, id).await? {
            change(&mut v);
            tx_put(&mut tx, &v)?;
            if let Some(r) = record {
                tx_create(&mut tx, r)?;
            }
        }
        Ok(tx.finish(()))
    })
    .await
}

/// Removes `run` with everything of it once its version's bytes are gone (see the module).
async fn remove_run(
    state: &AppState,
    in_use: &mut InUse,
    run: &RunDoc,
    days: u64,
    out: &mut VersionsHousekept,
) -> Result<(), ApiError> {
    let version_id = ModelVersionId::of_run(run.id());
    let version = mapi_schema::get::<ModelVersionDoc>(&*state.store, version_id.as_str()).await?;
    // Unless its bytes are already gone (marked expired, then deleted), the version goes
    // through both steps first; a version sealed before `bytes_since` was kept has neither
    // field and takes them too.
    let bytes_gone = |v: &ModelVersionDoc| v.bytes_since.is_none() && v.expired_at.is_some();
    if let Some(v) = version.as_ref().filter(|v| !bytes_gone(v)) {
        let why = format!("its run is past its record retention of {days} days");
        if expire(state, in_use, v, &why, out).await? != Expiry::Gone {
            return Ok(());
        }
    }
    let prefix = layout::run_dir(run.tenant(), run.project(), run.id());
    out.deleted_objects += delete_prefix(state, &prefix).await?;
    for collection in
        [AttemptDoc::COLLECTION, ProgressDoc::COLLECTION, EventSeenDoc::COLLECTION, RunLogDoc::COLLECTION]
    {
        delete_where(state, collection, "run", run.id().as_str()).await?;
    }
    let record = Audit::internal("run.expire", format!("{}/{}", RunDoc::COLLECTION, run.id()))
        .tenant(run.tenant())
        .project(run.project())
        .detail(format!(
            "{} ({}, {}), past its record retention of {days} days after its logs went; its ledger entries stay",
            run.id(),
            run.method(),
            run.state()
        ))
        .into_doc(state.clock.now(), &*state.entropy);
    let (run_key, version_key, r) = (
        mapi_schema::key::<RunDoc>(run.id().as_str())?,
        mapi_schema::key::<ModelVersionDoc>(version_id.as_str())?,
        &record,
    );
    let (run_key, version_key) = (&run_key, &version_key);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx.delete(version_key);
        tx.delete(run_key);
        tx_create(&mut tx, r)?;
        Ok(tx.finish(()))
    })
    .await?;
    out.deleted_runs += 1;
    Ok(())
}
