//! `admin`: the administrative API.
//!
//! - sessions and identity: `POST /v1/sessions` (sign in with an ID token),
//!   `GET /v1/whoami`;
//! - operators: `/v1/admin/tenants` (create, list, update: tier, status,
//!   residency; suspending and deleting need a reason), `/v1/admin/audit`,
//!   `/v1/admin/executors`, `/v1/admin/quotas`, `/v1/admin/kill-switches`;
//! - tenants: `GET|PATCH /v1/tenants/{tenant}`, tenant-wide members,
//!   projects, project members, API tokens, the tenant's audit log, and
//!   access checks (`can I?`);
//! - a tenant's end: its export (`/v1/tenants/{tenant}/exports`) and its
//!   deletion (`/v1/tenants/{tenant}/deletion`: request, cancel within the
//!   grace period, an operator's purge, the certificate).
//!
//! Every route authorizes through `mapi_identity::authorize` (one matrix);
//! every change is audited in the same transaction as the change.

mod audit_log;
mod checks;
mod executors;
mod limits;
mod members;
mod projects;
mod sessions;
mod tenant_life;
mod tenants;
mod tokens;
mod verify;

use axum::Router;
use axum::routing::{get, post};
use mapi_platform::AppState;
use utoipa::OpenApi;

#[derive(Debug, OpenApi)]
#[openapi(
    paths(
        sessions::sign_in, sessions::whoami, sessions::cli_client, executors::list, executors::set, executors::evidence, verify::verify, verify::security,
        tenants::create, tenants::list, tenants::manage, tenants::get_tenant, tenants::update,
        projects::list, projects::create, projects::get_project, projects::update, projects::delete,
        members::list_tenant, members::add_tenant, members::update_tenant, members::remove_tenant,
        members::list_project, members::add_project, members::update_project, members::remove_project,
        tokens::create, tokens::list, tokens::revoke,
        audit_log::tenant_log, audit_log::platform_log,
        checks::project_check, checks::tenant_check,
        limits::list, limits::set, limits::remove, limits::get_switches, limits::set_switches,
        tenant_life::request_export, tenant_life::get_export, tenant_life::request_deletion,
        tenant_life::get_deletion, tenant_life::cancel_deletion, tenant_life::purge,
    ),
    components(schemas(executors::ExecutorView, verify::Verified, verify::SecurityVerdict, executors::SetExecutor, mapi_executor::evidence::Evidence, mapi_schema::TenantDoc, mapi_schema::ProjectDoc, mapi_schema::MembershipDoc, mapi_api::audit::AuditEntry, mapi_schema::ExportDoc, mapi_schema::DeletionDoc, tenant_life::RequestDeletion)),
    tags((name = "admin", description = "Tenants, projects, members, tokens, audit"))
)]
pub struct ApiDoc;

pub fn router(state: AppState) -> Router {
    let json_limit = state.config.max_json_bytes;
    Router::new()
        .route("/v1/sessions", post(sessions::sign_in))
        .route("/v1/sessions/cli-client", get(sessions::cli_client))
        .route("/v1/whoami", get(sessions::whoami))
        .route("/v1/admin/executors", get(executors::list))
        .route("/v1/admin/executors/{name}", axum::routing::put(executors::set))
        .route("/v1/admin/executors/{name}/evidence", axum::routing::put(executors::evidence))
        .route("/v1/admin/executors/{name}/verify", post(verify::verify))
        .route("/v1/admin/executors/{name}/security", post(verify::security))
        .route("/v1/admin/tenants", post(tenants::create).get(tenants::list))
        .route("/v1/admin/tenants/{tenant}", axum::routing::patch(tenants::manage))
        .route("/v1/admin/audit", get(audit_log::platform_log))
        .route("/v1/admin/quotas", get(limits::list))
        .route("/v1/admin/quotas/{tenant}", axum::routing::put(limits::set).delete(limits::remove))
        .route("/v1/admin/kill-switches", get(limits::get_switches).put(limits::set_switches))
        .route("/v1/tenants/{tenant}", get(tenants::get_tenant).patch(tenants::update))
        .route("/v1/tenants/{tenant}/members", get(members::list_tenant).post(members::add_tenant))
        .route(
            "/v1/tenants/{tenant}/members/{email}",
            axum::routing::patch(members::update_tenant).delete(members::remove_tenant),
        )
        .route("/v1/tenants/{tenant}/projects", get(projects::list).post(projects::create))
        .route(
            "/v1/tenants/{tenant}/projects/{project}",
            get(projects::get_project).patch(projects::update).delete(projects::delete),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/members",
            get(members::list_project).post(members::add_project),
        )
        .route(
            "/v1/tenants/{tenant}/projects/{project}/members/{email}",
            axum::routing::patch(members::update_project).delete(members::remove_project),
        )
        .route("/v1/tenants/{tenant}/projects/{project}/tokens", get(tokens::list).post(tokens::create))
        .route("/v1/tenants/{tenant}/projects/{project}/tokens/{id}", axum::routing::delete(tokens::revoke))
        .route("/v1/tenants/{tenant}/audit", get(audit_log::tenant_log))
        .route("/v1/tenants/{tenant}/exports", post(tenant_life::request_export))
        .route("/v1/tenants/{tenant}/exports/{id}", get(tenant_life::get_export))
        .route(
            "/v1/tenants/{tenant}/deletion",
            get(tenant_life::get_deletion).post(tenant_life::request_deletion),
        )
        .route("/v1/tenants/{tenant}/deletion/cancel", post(tenant_life::cancel_deletion))
        .route("/v1/tenants/{tenant}/deletion/purge", post(tenant_life::purge))
        .route("/v1/tenants/{tenant}/access-checks", post(checks::tenant_check))
        .route("/v1/tenants/{tenant}/projects/{project}/access-checks", post(checks::project_check))
        .layer(axum::extract::DefaultBodyLimit::max(json_limit))
        .with_state(state.clone())
        .merge(mapi_console::router(state))
}
