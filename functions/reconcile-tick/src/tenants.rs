//! The tick's sweep of tenants' ends: each deletion whose grace period is
//! over and not yet purged gets a purge delivery pushed (at most one a
//! minute: the task is named by the minute), which starts the purge or
//! goes on with one whose deliveries stopped (a crash, a lost task); and
//! each export still building after a minute has its build pushed again.

use std::time::Duration;

use mapi_domain::TenantId;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::tasks::{ExportTask, push_export, push_purge, round_of};
use mapi_schema::{DeletionDoc, DeletionState, Doc, ExportDoc, ExportState};
use mapi_store::{Op, Query};

/// The most deletions and exports one tick looks at, each.
const PAGE: u32 = 100;

/// How long an export builds before its build is pushed again.
const EXPORT_PATIENCE: Duration = Duration::from_secs(60);

/// Pushes what is due; answers (pushed, failed).
pub async fn sweep(state: &AppState) -> Result<(u32, u32), ApiError> {
    let now = state.clock.now();
    let round = round_of(now);
    let mut due: Vec<TenantId> = Vec::new();
    let open = serde_json::json!([DeletionState::Scheduled.as_str(), DeletionState::Purging.as_str()]);
    let q = Query::new(DeletionDoc::COLLECTION).filter("state", Op::In, open).limit(PAGE);
    for doc in state.store.query(&q, None).await? {
        let d: DeletionDoc = doc.decode()?;
        if d.state == DeletionState::Purging || d.purge_after <= now {
            due.push(d.tenant);
        }
    }
    let (mut pushed, mut failed) = (0, 0);
    for tenant in due {
        match push_purge(&*state.queue, &tenant, &format!("r{round}")).await {
            Ok(()) => pushed += 1,
            Err(e) => {
                failed += 1;
                tracing::warn!(tenant = %tenant, error = %e, "pushing a purge failed; the next tick retries");
            }
        }
    }
    let q =
        Query::new(ExportDoc::COLLECTION).filter("state", Op::Eq, ExportState::Building.as_str()).limit(PAGE);
    for doc in state.store.query(&q, None).await? {
        let e: ExportDoc = doc.decode()?;
        if e.requested_at + EXPORT_PATIENCE > now {
            continue;
        }
        let task = ExportTask { tenant: e.tenant.clone(), export: e.id.clone() };
        match push_export(&*state.queue, &task, Some(round)).await {
            Ok(()) => pushed += 1,
            Err(err) => {
                failed += 1;
                tracing::warn!(export = %e.id, error = %err, "re-pushing an export failed; the next tick retries");
            }
        }
    }
    Ok((pushed, failed))
}
