//! `admin`: the administrative API. In this version: `GET /v1/whoami` (the
//! caller as the platform sees it) and `GET /v1/admin/executors` (each
//! executor's capabilities and recent activity). Tenants, projects,
//! members, tokens, quotas and kill switches join it with tenancy.

use axum::Router;
use axum::extract::State;
use axum::routing::get;
use mapi_domain::{TenantId, UserId};
use mapi_executor::Capabilities;
use mapi_identity::Caller;
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use serde::{Deserialize, Serialize};
use utoipa::OpenApi;

#[derive(Debug, OpenApi)]
#[openapi(paths(whoami, executors), components(schemas(WhoAmI, ExecutorView)), tags((name = "admin")))]
pub struct ApiDoc;

pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/whoami", get(whoami))
        .route("/v1/admin/executors", get(executors))
        .with_state(state)
}

/// The caller.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhoAmI {
    pub user: UserId,
    pub tenant: TenantId,
    /// The first characters of the token's hash, as logs and usage name it.
    pub token_id: String,
}

/// Who the token belongs to.
#[utoipa::path(get, path = "/v1/whoami", tag = "admin", responses((status = 200, body = WhoAmI), (status = 401, body = mapi_problem::Problem)), security(("bearer" = [])))]
pub async fn whoami(caller: Caller) -> Json<WhoAmI> {
    Json(WhoAmI { user: caller.user, tenant: caller.tenant, token_id: caller.token_id })
}

/// An executor and what it offers.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExecutorView {
    pub capabilities: Capabilities,
    /// Executions created in the last hour.
    pub executions_last_hour: usize,
}

/// The executors of this deployment.
#[utoipa::path(get, path = "/v1/admin/executors", tag = "admin", responses((status = 200, body = Vec<ExecutorView>)), security(("bearer" = [])))]
pub async fn executors(
    State(state): State<AppState>,
    _caller: Caller,
) -> Result<Json<Vec<ExecutorView>>, ApiError> {
    let since = state.clock.now() - std::time::Duration::from_secs(3600);
    let recent =
        state.executor.list_recent(since).await.map_err(|e| ApiError::unavailable(e.to_string(), 5))?;
    Ok(Json(vec![ExecutorView {
        capabilities: state.executor.capabilities(),
        executions_last_hour: recent.len(),
    }]))
}
