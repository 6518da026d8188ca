//! The routes the queues and the scheduler call back (internal token or
//! Cloud Tasks' ID token): a run's dispatch, an item job's fan-out steps
//! and items, the job and run housekeepers, webhook deliveries, a tenant's export and its purge. Nothing here imports the tenant API
//! (the `api` tree).

pub mod dispatch;
pub mod export;
pub mod fanout;
pub mod housekeep;
pub mod housekeep_runs;
pub mod item;
pub mod purge;
pub mod tenant_data;
pub mod webhook;

use axum::Router;
use axum::routing::post;
use mapi_platform::AppState;

/// The task routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route(mapi_schema::tasks::DISPATCH_PATH, post(dispatch::handle))
        .route(mapi_jobs::tasks::FANOUT_PATH, post(fanout::handle))
        .route(mapi_jobs::tasks::ITEM_PATH, post(item::handle))
        .route(housekeep::HOUSEKEEP_PATH, post(housekeep::handle))
        .route(housekeep_runs::HOUSEKEEP_RUNS_PATH, post(housekeep_runs::handle))
        .route(mapi_schema::tasks::DELIVER_PATH, post(webhook::handle))
        .route(mapi_schema::tasks::EXPORT_PATH, post(export::handle))
        .route(mapi_schema::tasks::PURGE_PATH, post(purge::handle))
}

#[cfg(test)]
mod tests {
    /// The two trees stay apart: no file of one names the other.
    #[test]
    fn the_api_and_the_task_routes_do_not_import_each_other() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
        for (tree, other) in [("api", "tasks"), ("tasks", "api")] {
            let dir = std::fs::read_dir(format!("{root}/{tree}")).expect("the tree");
            let mut files = 0;
            for entry in dir {
                let path = entry.expect("entry").path();
                let text = std::fs::read_to_string(&path).expect("source");
                for needle in [format!("crate::{other}"), format!("super::{other}")] {
                    assert!(!text.contains(&needle), "{} names `{needle}`", path.display());
                }
                files += 1;
            }
            assert!(files >= 4, "{tree} has its files");
        }
    }
}
