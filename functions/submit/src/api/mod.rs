//! The tenant-facing routes: datasets, runs, experiments and saved views of
//! the runs table, model versions, endpoints,
//! item jobs, webhooks, governance, workflows and their runs' driver (the one
//! queue route this service serves: see [`workflow_driver`]) and the method
//! registry (its docs and `/v1/methods`). Nothing here imports the task routes (the `tasks` tree).

mod admitted;
pub mod children;
pub mod datasets;
pub mod docs;
mod egress;
mod endpoint_access;
mod endpoint_room;
mod endpoint_scale;
pub mod endpoints;
pub mod experiments;
mod idempotency;
mod job_body;
pub mod jobs;
pub mod labels;
pub mod logs;
pub mod methods;
mod metric_scan;
pub mod model_versions;
pub mod outputs;
pub mod plugins;
pub mod policies;
pub mod project_methods;
pub mod protocols;
mod run_filters;
pub mod run_views;
pub mod runs;
pub mod scoring;
pub mod tracking;
pub mod validations;
mod view;
pub mod webhooks;
pub mod workflow_driver;
pub mod workflow_runs;
pub mod workflows;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post, put};
use mapi_platform::AppState;

/// The tenant API's routes, with the body limits of uploads and job submits.
pub fn router(state: &AppState) -> Router<AppState> {
    let dataset_limit = state.config.max_dataset_bytes;
    let job_limit = state.config.jobs.max_body_bytes;
    // A package past the limit is refused by the package's own check, naming it.
    let plugin_limit = mapi_plugins::package::MAX_BYTES + 1;
    Router::new()
        .route(
            "/v1/tenants/{tenant}/projects/{project}/datasets",
            post(datasets::upload).layer(DefaultBodyLimit::max(dataset_limit)).get(datasets::list),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/datasets/{id}",
            get(datasets::get_dataset).delete(datasets::delete_dataset),
        )
        .route("/v1/tenants/{tenant}/projects/{project}/datasets/{id}/url", post(datasets::download_url))
        .route("/v1/tenants/{tenant}/projects/{project}/runs", post(runs::submit).get(runs::list))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/experiments",
            post(experiments::create).get(experiments::list),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/experiments/{name}",
            get(experiments::get_experiment).patch(experiments::update).delete(experiments::delete),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/plugins",
            post(plugins::publish).layer(DefaultBodyLimit::max(plugin_limit)).get(plugins::list),
        )
        .route("/v1/tenants/{tenant}/projects/{project}/plugins/{name}", get(plugins::get_plugin))
        .route("/v1/tenants/{tenant}/projects/{project}/plugins/{name}/{version}", delete(plugins::delete))
        .route("/v1/tenants/{tenant}/projects/{project}/run-views", get(run_views::list))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/run-views/{name}",
            put(run_views::save).get(run_views::get_view).delete(run_views::delete),
        )
        .route("/v1/runs/{id}", get(runs::get_run).patch(labels::update))
        .route("/v1/runs/{id}/cancel", post(runs::cancel))
        .route("/v1/runs/{id}/retry", post(runs::retry))
        .route("/v1/runs/{id}/log", post(tracking::log).get(tracking::read))
        .route(
            "/v1/runs/{id}/images/{name}",
            put(tracking::put_image).layer(DefaultBodyLimit::max(mapi_api::tracking::MAX_IMAGE_BYTES)),
        )
        .route("/v1/runs/{id}/images/{name}/url", post(tracking::image_url))
        .route("/v1/runs/{id}/logs", get(logs::run_logs))
        .route("/v1/runs/{id}/outputs/{*name}", get(outputs::download))
        .route("/v1/runs/{id}/children/{index}", get(runs::get_child))
        .route("/v1/tenants/{tenant}/projects/{project}/model-versions", get(model_versions::list))
        .route("/v1/model-versions/{id}", get(model_versions::get_version))
        .route("/v1/model-versions/{id}/urls", post(model_versions::urls))
        .route("/v1/model-versions/{id}/manifest", get(model_versions::manifest))
        .route("/v1/signing-keys", get(model_versions::signing_keys))
        .route("/v1/model-versions/{id}/validations", post(validations::submit).get(validations::list))
        .route("/v1/model-versions/{id}/deprecate", post(validations::deprecate))
        .route("/v1/validations/{id}", get(validations::get_validation))
        .route("/v1/validations/{id}/approvals", post(validations::decide))
        .route("/v1/validations/{id}/cancel", post(validations::cancel))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/policy",
            get(policies::get_project).put(policies::put_project).delete(policies::delete_project),
        )
        .route(
            "/v1/tenants/{tenant}/policy",
            get(policies::get_tenant).put(policies::put_tenant).delete(policies::delete_tenant),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/workflows",
            post(workflows::create).get(workflows::list),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/workflows/{workflow}",
            get(workflows::get_workflow).put(workflows::update).delete(workflows::delete),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/workflows/{workflow}/runs",
            post(workflow_runs::start),
        )
        .route("/v1/tenants/{tenant}/projects/{project}/workflow-runs", get(workflow_runs::list))
        .route("/v1/workflow-runs/{id}", get(workflow_runs::get_run))
        .route("/v1/workflow-runs/{id}/cancel", post(workflow_runs::cancel))
        .route("/v1/workflow-runs/{id}/resume", post(workflow_runs::resume))
        .route(mapi_schema::tasks::ADVANCE_PATH, post(workflow_driver::advance))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/jobs",
            post(jobs::submit).layer(DefaultBodyLimit::max(job_limit)).get(jobs::list),
        )
        .route("/v1/jobs/{id}", get(jobs::get_job))
        .route("/v1/jobs/{id}/items", get(jobs::list_items))
        .route("/v1/jobs/{id}/items/{idx}/log", get(jobs::item_log))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/jobs/{id}/retry-failed", post(jobs::retry_failed))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/endpoints",
            post(endpoints::create).get(endpoints::list),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/endpoints/{alias}",
            get(endpoints::get_endpoint).delete(endpoints::delete).post(endpoints::act),
        )
        .merge(protocols::routes())
        .route("/v1/tenants/{tenant}/projects/{project}/webhooks", post(webhooks::create).get(webhooks::list))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}",
            get(webhooks::get_webhook).patch(webhooks::update).delete(webhooks::delete),
        )
        .route("/v1/tenants/{tenant}/projects/{project}/webhooks/{id}/rotate", post(webhooks::rotate))
        .route("/v1/tenants/{tenant}/projects/{project}/webhooks/{id}/deliveries", get(webhooks::deliveries))
        .route(
            "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}/deliveries/{delivery}/replay",
            post(webhooks::replay),
        )
        .route("/v1/usage", get(docs::usage))
        .route("/v1/methods", get(methods::list))
        .route("/v1/methods/{name}", get(methods::get_method))
        .route("/v1/tenants/{tenant}/projects/{project}/methods", get(project_methods::project_list))
        .route("/v1/tenants/{tenant}/projects/{project}/methods/{name}", get(project_methods::project_get))
}
