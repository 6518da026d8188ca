//! The retention housekeeper: deletes jobs older than their tenant's
//! retention (`job_retention_days` of the tenant's quota policy, else the
//! platform's `MAPI_JOB_RETENTION_DAYS`), objects first (everything under the job's
//! prefix), then markers, history and counts, the job document last, so a
//! housekeeper that dies halfway finds the job again next time. Called by
//! the scheduler (`mapi dev`'s tick loop locally). Each call also deletes
//! the audit entries and webhook messages past their retention
//! ([`crate::housekeep_records`]).

use axum::extract::State;
use mapi_identity::InternalCaller;
use mapi_jobs::{JobCountsDoc, JobDoc, JobItemDoc, JobItemHistoryDoc};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_quota::counters::{self, field};
use mapi_schema::Doc;
use mapi_store::transact;

use mapi_jobstore::{base, derived};

/// The housekeeper's route.
pub const HOUSEKEEP_PATH: &str = "/internal/tasks/jobs/housekeep";

/// Jobs deleted per call: a bounded amount of work per request.
const JOBS_PER_CALL: u32 = 20;

#[derive(Debug, serde::Serialize)]
pub struct Housekept {
    pub deleted_jobs: u32,
    pub deleted_objects: u64,
    /// Audit entries and webhook messages past their retention.
    #[serde(flatten)]
    pub records: crate::housekeep_records::RecordsHousekept,
}

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
) -> Result<Json<Housekept>, ApiError> {
    let now = state.clock.now();
    let policies = crate::retention::Policies::read(&state).await?;
    let own = policies.own(|p| p.job_retention_days);
    let retention =
        crate::retention::Retention { own: &own, default: Some(state.config.jobs.retention), now };
    let expired = retention
        .expired(&state, JOBS_PER_CALL, crate::retention::aged(JobDoc::COLLECTION, "created_at"))
        .await?;
    let records = crate::housekeep_records::sweep(&state, &policies).await?;
    let mut out = Housekept { deleted_jobs: 0, deleted_objects: 0, records };
    for d in expired {
        out.deleted_objects += delete_job(&state, &d.decode()?).await?;
        out.deleted_jobs += 1;
    }
    if out.deleted_jobs > 0 {
        tracing::info!(jobs = out.deleted_jobs, objects = out.deleted_objects, "expired jobs deleted");
    }
    Ok(Json(out))
}

async fn delete_job(state: &AppState, job: &JobDoc) -> Result<u64, ApiError> {
    let deleted = crate::removal::delete_prefix(state, &base(job)).await?;
    for collection in [JobItemDoc::COLLECTION, JobItemHistoryDoc::COLLECTION] {
        crate::removal::delete_where(state, collection, "job", job.id.as_str()).await?;
    }
    // Items still counted as in flight give their window slots back.
    let (_, counts, _) = derived(state, job).await?;
    let running = i64::try_from(counts.running).unwrap_or(0);
    let tenant = counters::tenant(&job.tenant);
    let (id, tenant) =
        (&job.id, counters::shard_id(&tenant, counters::pick(job.id.as_str(), counters::shards_of(&tenant))));
    let tenant = &tenant;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        for shard in JobCountsDoc::shard_ids(id) {
            tx.delete(&mapi_schema::key::<JobCountsDoc>(&shard)?);
        }
        tx.delete(&mapi_schema::key::<JobDoc>(id.as_str())?);
        if running > 0 {
            tx.increment(
                &mapi_schema::key::<counters::CounterDoc>(tenant)?,
                field::ACTIVE_ITEMS,
                -running,
                None,
            );
        }
        Ok(tx.finish(()))
    })
    .await?;
    Ok(deleted)
}
