//! `submit`: the tenant-facing API (the `submit-api` service): datasets,
//! runs, item jobs, model versions, endpoints and scores, webhooks,
//! experiments and saved views, the method registry.
//!
//! Routes:
//! - `POST /v1/tenants/{tenant}/projects/{project}/datasets` (CSV upload),
//!   `GET` the same path to list, `GET …/datasets/{id}` for one with its
//!   columns;
//! - `POST /v1/tenants/{tenant}/projects/{project}/runs` (submit, with
//!   `Idempotency-Key`), `GET` to list;
//! - `GET /v1/runs/{id}`, `POST /v1/runs/{id}/cancel`, `POST /v1/runs/{id}/retry`;
//! - model versions: `GET /v1/tenants/{tenant}/projects/{project}/model-versions`,
//!   `GET /v1/model-versions/{id}`, `POST /v1/model-versions/{id}/urls`,
//!   `GET /v1/model-versions/{id}/manifest`, `GET /v1/signing-keys` (public keys, no credentials);
//! - item jobs: `POST /v1/tenants/{tenant}/projects/{project}/jobs` (with
//!   `Idempotency-Key`),
//!   `GET /v1/jobs/{id}`, `GET /v1/jobs/{id}/items`,
//!   `GET /v1/jobs/{id}/items/{idx}/log`, `POST /v1/jobs/{id}/cancel`,
//!   `POST /v1/jobs/{id}/retry-failed`; `GET /v1/usage`, `GET /manifest`;
//! - the method registry: `GET /v1/methods`, `GET /v1/methods/{name}`;
//!
//! - workflows: `…/workflows` (create, list), `…/workflows/{name}` (get,
//!   update, delete), `…/workflows/{name}/runs` (start), `…/workflow-runs`,
//!   `GET /v1/workflow-runs/{id}`, `…/cancel`, `…/resume`.
//!
//! The queues' and the scheduler's callbacks are `mapi_tasks`', a crate this
//! one neither depends on nor is depended on by, but one: the workflows
//! queue's advance (`POST /internal/tasks/workflows/advance`), which admits
//! child runs, submits validations and promotes exactly as this API does; admission is
//! `mapi_admission`'s and a job's documents and objects `mapi_jobstore`'s.

pub mod api;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::get;
use mapi_platform::AppState;
use utoipa::OpenApi;

/// The OpenAPI description of this function's public routes.
#[derive(Debug, OpenApi)]
#[openapi(
    paths(
        api::datasets::upload, api::datasets::list, api::datasets::get_dataset, api::datasets::delete_dataset, api::datasets::download_url, api::runs::submit, api::runs::list, api::runs::get_run, api::labels::update,
        api::runs::cancel, api::runs::retry, api::tracking::log, api::tracking::read, api::tracking::put_image, api::tracking::image_url, api::logs::run_logs, api::outputs::download, api::runs::get_child, api::jobs::submit, api::jobs::list, api::jobs::get_job, api::jobs::list_items, api::jobs::item_log,
        api::jobs::cancel, api::jobs::retry_failed, api::docs::usage, api::docs::manifest, api::docs::index,
        api::methods::list, api::methods::get_method, api::project_methods::project_list, api::project_methods::project_get,
        api::model_versions::list, api::model_versions::get_version, api::model_versions::urls, api::model_versions::manifest, api::model_versions::signing_keys,
        api::validations::submit, api::validations::list, api::validations::deprecate, api::validations::get_validation, api::validations::decide, api::validations::cancel,
        api::policies::get_project, api::policies::put_project, api::policies::delete_project, api::policies::get_tenant, api::policies::put_tenant, api::policies::delete_tenant,
        api::workflows::create, api::workflows::list, api::workflows::get_workflow, api::workflows::update, api::workflows::delete,
        api::workflow_runs::start, api::workflow_runs::list, api::workflow_runs::get_run, api::workflow_runs::cancel, api::workflow_runs::resume,
        api::protocols::v2_infer, api::protocols::v2_model, api::protocols::v2_model_ready, api::protocols::v2_health, api::protocols::v2_live, api::protocols::kserve_predict, api::protocols::mlflow_invocations,
        api::endpoints::create, api::endpoints::list, api::endpoints::get_endpoint, api::endpoints::delete,
        api::endpoints::act,
        api::webhooks::create, api::webhooks::list, api::webhooks::get_webhook, api::webhooks::update,
        api::webhooks::delete, api::webhooks::rotate, api::webhooks::deliveries, api::webhooks::replay,
        api::experiments::create, api::experiments::list, api::experiments::get_experiment,
        api::experiments::update, api::experiments::delete,
        api::run_views::save, api::run_views::list, api::run_views::get_view, api::run_views::delete,
        api::plugins::publish, api::plugins::list, api::plugins::get_plugin, api::plugins::delete
    ),
    components(schemas(
        mapi_problem::Problem,
        mapi_domain::RunSpecInput,
        mapi_api::views::RunView,
        mapi_api::views::ChildView,
        mapi_api::views::ChildState,
        mapi_api::views::Aggregate,
        mapi_api::views::RunLogs,
        mapi_api::views::LogLineView,
        mapi_api::views::RunPage,
        mapi_api::views::DatasetView,
        mapi_api::views::DatasetSummary,
        mapi_api::views::DatasetPage,
        mapi_api::views::DatasetUrl,
        mapi_api::tracking::LogInput,
        mapi_api::tracking::MetricInput,
        mapi_api::tracking::RunLog,
        mapi_api::tracking::Point,
        mapi_api::tracking::ImageRef,
        api::tracking::ImageUrl,
        mapi_api::views::ModelVersionView,
        mapi_api::views::ModelVersionSummary,
        mapi_api::views::ModelVersionPage,
        mapi_api::endpoints::CreateEndpoint,
        mapi_api::endpoints::Container,
        mapi_api::endpoints::ContainerExample,
        mapi_api::endpoints::PromoteEndpoint,
        mapi_api::endpoints::ScaleEndpoint,
        mapi_api::governance::Policy,
        mapi_api::governance::Improvement,
        mapi_api::governance::Better,
        mapi_api::governance::PolicyView,
        mapi_api::governance::SubmitValidation,
        mapi_api::governance::Verdict,
        mapi_api::governance::DecideValidation,
        mapi_api::governance::ValidationView,
        mapi_api::governance::ValidationPage,
        mapi_api::governance::DeprecateVersion,
        mapi_api::governance::CheckOutcome,
        mapi_api::governance::Decision,
        mapi_api::governance::State,
        api::docs::Index,
        mapi_api::workflows::CreateWorkflow,
        mapi_api::workflows::UpdateWorkflow,
        mapi_api::workflows::WorkflowView,
        mapi_api::workflows::WorkflowPage,
        mapi_api::workflows::StartWorkflow,
        mapi_api::workflows::NodeRunView,
        mapi_api::workflows::NodeView,
        mapi_api::workflows::WorkflowRunView,
        mapi_api::workflows::WorkflowRunPage,
        mapi_workflows::Definition,
        mapi_workflows::Node,
        mapi_workflows::Kind,
        mapi_workflows::Goal,
        mapi_workflows::NodeState,
        mapi_workflows::RunState,
        mapi_api::views::DeprecationView,
        mapi_api::endpoints::EndpointView,
        mapi_api::endpoints::EndpointPage,
        mapi_api::endpoints::ScoreRequest,
        mapi_api::endpoints::ScoreResponse,
        mapi_api::endpoints::protocol::InferRequest,
        mapi_api::endpoints::protocol::InferTensor,
        mapi_api::endpoints::protocol::RequestedOutput,
        mapi_api::endpoints::protocol::PredictRequest,
        mapi_api::endpoints::protocol::InvocationsRequest,
        mapi_api::endpoints::protocol::PredictResponse,
        mapi_api::webhooks::WebhookView,
        mapi_api::webhooks::WebhookCreated,
        mapi_api::webhooks::WebhookPage,
        mapi_api::webhooks::NewWebhook,
        mapi_api::webhooks::WebhookChange,
        mapi_api::webhooks::SecretRotated,
        mapi_api::webhooks::DeliveryView,
        mapi_api::webhooks::DeliveryAttempt,
        mapi_api::webhooks::DeliveryPage,
        mapi_schema::ExperimentDoc,
        mapi_schema::RunViewDoc,
        mapi_schema::RunFilters,
        api::experiments::NewExperiment,
        api::experiments::ExperimentChange,
        api::experiments::ExperimentPage,
        api::plugins::PluginView,
        api::plugins::PluginMethodView,
        api::plugins::PluginPage,
        api::run_views::SaveRunView,
        api::run_views::RunViewPage,
        mapi_api::views::ArtifactView,
        mapi_api::views::ArtifactUrl,
        mapi_api::views::ArtifactUrls,
        api::jobs::JobSpec,
        api::jobs::JobOptions,
        api::jobs::JobView,
        api::jobs::JobCost,
        api::jobs::ItemView,
        api::jobs::ItemPage,
        api::docs::Manifest,
        mapi_api::methods::MethodList,
        mapi_api::methods::MethodView,
        mapi_api::methods::MethodInput,
        mapi_api::methods::ParamView,
        mapi_api::methods::ParamKind,
        mapi_api::methods::MethodOutput,
        mapi_api::methods::MethodExample,
        mapi_api::methods::MethodPlugin,
        mapi_jobs::Counts,
        mapi_jobs::JobState,
        mapi_jobs::ItemOutcome,
        mapi_jobs::ItemFailure
    )),
    tags(
        (name = "runs", description = "Submit, watch and cancel runs"),
        (name = "datasets", description = "Upload datasets"),
        (name = "model-versions", description = "Succeeded fits' outputs as signed bundles, verified before every download"),
        (name = "jobs", description = "Item jobs: a method on every item of a list"),
        (name = "methods", description = "The method registry: parameters, outputs, examples, which methods fit a model"),
        (name = "plugins", description = "Tenants' own methods: plugin packages published per project")
    )
)]
pub struct ApiDoc;

/// The function's routes.
pub fn router(state: AppState) -> Router {
    let json_limit = state.config.max_json_bytes;
    api::router(&state)
        .route("/manifest", get(api::docs::manifest))
        .route("/", get(api::docs::index))
        .layer(DefaultBodyLimit::max(json_limit))
        .with_state(state)
}
