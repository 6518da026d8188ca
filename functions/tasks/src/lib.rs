//! `tasks`: the routes the queues and the scheduler call back (internal
//! token or Cloud Tasks' ID token), deployed as the `submit-tasks` service:
//! a run's dispatch, an item job's fan-out steps and items, the job and run
//! housekeepers, webhook deliveries, a tenant's export and its purge.
//!
//! Routes: `POST /internal/tasks/dispatch`, `/internal/tasks/jobs/fanout`,
//! `/internal/tasks/jobs/item`, `/internal/tasks/jobs/housekeep`,
//! `/internal/tasks/runs/housekeep`, `/internal/tasks/webhooks/deliver`,
//! `/internal/tasks/tenants/export`, `/internal/tasks/tenants/purge`.
//!
//! Architecture invariant: the tenant API (`mapi-submit`) and this crate do
//! not depend on each other; what both need is a shared crate
//! (`mapi-admission`, `mapi-jobstore`).

pub mod dispatch;
pub mod export;
pub mod fanout;
pub mod housekeep;
pub mod housekeep_records;
pub mod housekeep_runs;
pub mod housekeep_versions;
pub mod item;
pub mod purge;
pub mod removal;
pub mod retention;
pub mod reuse;
pub mod tenant_data;
pub mod webhook;

use axum::Router;
use axum::routing::post;
use mapi_platform::AppState;

/// The task routes.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route(mapi_schema::tasks::DISPATCH_PATH, post(dispatch::handle))
        .route(mapi_jobs::tasks::FANOUT_PATH, post(fanout::handle))
        .route(mapi_jobs::tasks::ITEM_PATH, post(item::handle))
        .route(housekeep::HOUSEKEEP_PATH, post(housekeep::handle))
        .route(housekeep_runs::HOUSEKEEP_RUNS_PATH, post(housekeep_runs::handle))
        .route(mapi_schema::tasks::DELIVER_PATH, post(webhook::handle))
        .route(mapi_schema::tasks::EXPORT_PATH, post(export::handle))
        .route(mapi_schema::tasks::PURGE_PATH, post(purge::handle))
        .with_state(state)
}
