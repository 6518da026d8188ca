//! `submit`: the tenant-facing API for datasets and runs, and the dispatch
//! task handler that the queue calls back to start each attempt.
//!
//! Routes:
//! - `POST /v1/tenants/{tenant}/projects/{project}/datasets` (CSV upload),
//!   `GET` the same path to list;
//! - `POST /v1/tenants/{tenant}/projects/{project}/runs` (submit, with
//!   `Idempotency-Key`), `GET` to list;
//! - `GET /v1/runs/{id}`, `POST /v1/runs/{id}/cancel`;
//! - `POST /internal/tasks/dispatch` (queue callback, internal token).

mod datasets;
mod dispatch;
mod quota;
mod runs;
mod view;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use mapi_platform::AppState;
use utoipa::OpenApi;

/// The OpenAPI description of this function's public routes.
#[derive(Debug, OpenApi)]
#[openapi(
    paths(
        datasets::upload, datasets::list, runs::submit, runs::list, runs::get_run, runs::cancel
    ),
    components(schemas(
        mapi_problem::Problem,
        mapi_domain::RunSpecInput,
        mapi_runs::views::RunView,
        mapi_runs::views::RunPage,
        mapi_runs::views::DatasetView,
        mapi_runs::views::DatasetPage
    )),
    tags((name = "runs", description = "Submit, watch and cancel runs"), (name = "datasets", description = "Upload datasets"))
)]
pub struct ApiDoc;

/// The function's routes.
pub fn router(state: AppState) -> Router {
    let json_limit = state.config.max_json_bytes;
    let dataset_limit = state.config.max_dataset_bytes;
    Router::new()
        .route(
            "/v1/tenants/{tenant}/projects/{project}/datasets",
            post(datasets::upload).layer(DefaultBodyLimit::max(dataset_limit)).get(datasets::list),
        )
        .route("/v1/tenants/{tenant}/projects/{project}/runs", post(runs::submit).get(runs::list))
        .route("/v1/runs/{id}", get(runs::get_run))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route(mapi_runs::tasks::DISPATCH_PATH, post(dispatch::handle))
        .layer(DefaultBodyLimit::max(json_limit))
        .with_state(state)
}
