//! `submit`: the tenant-facing API for datasets and runs, and the dispatch
//! task handler that the queue calls back to start each attempt.
//!
//! Routes:
//! - `POST /v1/tenants/{tenant}/projects/{project}/datasets` (CSV upload),
//!   `GET` the same path to list;
//! - `POST /v1/tenants/{tenant}/projects/{project}/runs` (submit, with
//!   `Idempotency-Key`), `GET` to list;
//! - `GET /v1/runs/{id}`, `POST /v1/runs/{id}/cancel`;
//! - model versions: `GET /v1/tenants/{tenant}/projects/{project}/model-versions`,
//!   `GET /v1/model-versions/{id}`, `POST /v1/model-versions/{id}/urls`;
//! - item jobs: `POST /v1/tenants/{tenant}/projects/{project}/jobs`,
//!   `GET /v1/jobs/{id}`, `GET /v1/jobs/{id}/items`,
//!   `GET /v1/jobs/{id}/items/{idx}/log`, `POST /v1/jobs/{id}/cancel`,
//!   `POST /v1/jobs/{id}/retry-failed`; `GET /v1/usage`, `GET /manifest`;
//! - task routes (queue and scheduler callbacks, internal token):
//!   `POST /internal/tasks/dispatch`, `/internal/tasks/jobs/fanout`,
//!   `/internal/tasks/jobs/item`, `/internal/tasks/jobs/housekeep`.
//!
//! `MAPI_ROUTES` chooses which of the two sets a process serves, so the
//! task routes can be a second deployment of the same function.

mod datasets;
mod dispatch;
pub mod jobs;
mod model_versions;
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
        datasets::upload, datasets::list, runs::submit, runs::list, runs::get_run, runs::cancel,
        jobs::api::submit, jobs::api::get_job, jobs::api::list_items, jobs::api::item_log,
        jobs::api::cancel, jobs::api::retry_failed, jobs::docs::usage, jobs::docs::manifest,
        model_versions::list, model_versions::get_version, model_versions::urls
    ),
    components(schemas(
        mapi_problem::Problem,
        mapi_domain::RunSpecInput,
        mapi_api::views::RunView,
        mapi_api::views::RunPage,
        mapi_api::views::DatasetView,
        mapi_api::views::DatasetPage,
        mapi_api::views::ModelVersionView,
        mapi_api::views::ModelVersionSummary,
        mapi_api::views::ModelVersionPage,
        mapi_api::views::ArtifactView,
        mapi_api::views::ArtifactUrl,
        mapi_api::views::ArtifactUrls,
        jobs::api::JobSpec,
        jobs::api::JobOptions,
        jobs::api::JobView,
        jobs::api::JobCost,
        jobs::api::ItemView,
        jobs::api::ItemPage,
        jobs::docs::Manifest,
        mapi_jobs::Counts,
        mapi_jobs::JobState,
        mapi_jobs::ItemOutcome,
        mapi_jobs::ItemFailure
    )),
    tags(
        (name = "runs", description = "Submit, watch and cancel runs"),
        (name = "datasets", description = "Upload datasets"),
        (name = "model-versions", description = "Succeeded runs' outputs as signed bundles, verified before every download"),
        (name = "jobs", description = "Item jobs: a method on every item of a list")
    )
)]
pub struct ApiDoc;

/// The function's routes: the API, the task routes, or both (`MAPI_ROUTES`).
pub fn router(state: AppState) -> Router {
    let json_limit = state.config.max_json_bytes;
    let dataset_limit = state.config.max_dataset_bytes;
    let job_limit = state.config.jobs.max_body_bytes;
    let mut app = Router::new();
    if state.config.routes.serves_api() {
        app = app
            .route(
                "/v1/tenants/{tenant}/projects/{project}/datasets",
                post(datasets::upload).layer(DefaultBodyLimit::max(dataset_limit)).get(datasets::list),
            )
            .route("/v1/tenants/{tenant}/projects/{project}/runs", post(runs::submit).get(runs::list))
            .route("/v1/runs/{id}", get(runs::get_run))
            .route("/v1/runs/{id}/cancel", post(runs::cancel))
            .route("/v1/tenants/{tenant}/projects/{project}/model-versions", get(model_versions::list))
            .route("/v1/model-versions/{id}", get(model_versions::get_version))
            .route("/v1/model-versions/{id}/urls", post(model_versions::urls))
            .route(
                "/v1/tenants/{tenant}/projects/{project}/jobs",
                post(jobs::api::submit).layer(DefaultBodyLimit::max(job_limit)),
            )
            .route("/v1/jobs/{id}", get(jobs::api::get_job))
            .route("/v1/jobs/{id}/items", get(jobs::api::list_items))
            .route("/v1/jobs/{id}/items/{idx}/log", get(jobs::api::item_log))
            .route("/v1/jobs/{id}/cancel", post(jobs::api::cancel))
            .route("/v1/jobs/{id}/retry-failed", post(jobs::api::retry_failed))
            .route("/v1/usage", get(jobs::docs::usage));
    }
    if state.config.routes.serves_tasks() {
        app = app
            .route(mapi_runs::tasks::DISPATCH_PATH, post(dispatch::handle))
            .route(mapi_jobs::tasks::FANOUT_PATH, post(jobs::fanout::handle))
            .route(mapi_jobs::tasks::ITEM_PATH, post(jobs::item::handle))
            .route(jobs::housekeep::HOUSEKEEP_PATH, post(jobs::housekeep::handle));
    }
    app.route("/manifest", get(jobs::docs::manifest))
        .layer(DefaultBodyLimit::max(json_limit))
        .with_state(state)
}
