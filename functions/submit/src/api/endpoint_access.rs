//! What the endpoint routes and scoring share: loading an endpoint the
//! caller may act on, reading an action's body, answering a host's error.

use axum::http::HeaderMap;
use mapi_access::{Action, Resource};
use mapi_domain::{ProjectId, TenantId};
use mapi_endpoints::{EndpointDoc, endpoint_id};
use mapi_hosting::HostingError;
use mapi_identity::{Caller, Target, authorize};
use mapi_platform::AppState;
use mapi_problem::ApiError;

/// Loads an endpoint `caller` may act on as `action`, with the tenant the
/// authorization read. One of another tenant, or of a project the caller
/// cannot see, answers as a missing one.
pub(super) async fn load_granted(
    state: &AppState,
    caller: &Caller,
    (tenant, project, alias): (&TenantId, &ProjectId, &str),
    action: Action,
) -> Result<(EndpointDoc, mapi_schema::TenantDoc), ApiError> {
    let tenant_doc = grant(state, caller, (tenant, project, alias), action).await?;
    let id = endpoint_id(tenant, project, alias);
    let doc = mapi_schema::get::<EndpointDoc>(&*state.store, &id).await?.ok_or_else(|| {
        ApiError::not_found(format!("endpoint {} not found", alias.chars().take(40).collect::<String>()))
    })?;
    Ok((doc, tenant_doc))
}

/// Whether `caller` may act on endpoint `alias` as `action` (an endpoint the caller cannot see
/// answers as a missing one); the tenant the authorization read.
pub(super) async fn grant(
    state: &AppState,
    caller: &Caller,
    (tenant, project, alias): (&TenantId, &ProjectId, &str),
    action: Action,
) -> Result<mapi_schema::TenantDoc, ApiError> {
    // A path that cannot name an endpoint is the caller's to fix, not a
    // lookup for the store to refuse.
    mapi_domain::endpoint::check_alias(alias).map_err(|e| ApiError::invalid(format!("invalid path: {e}")))?;
    let what = format!("endpoint {}", alias.chars().take(40).collect::<String>());
    let target = Target { endpoint: Some(alias), ..Target::project(tenant, project, &what) };
    Ok(authorize(state, caller, target, Resource::Endpoint, action).await?.tenant)
}

/// A JSON body of an endpoint's action, refused in our words.
pub(super) fn body_of<T: serde::de::DeserializeOwned>(
    headers: &HeaderMap,
    body: &[u8],
) -> Result<T, ApiError> {
    mapi_problem::require_json(headers)?;
    mapi_problem::parse_json(body)
}

/// The answer to a host's error: retry later when it was busy or did not
/// answer (its own words are logged, not echoed), the caller's to fix when
/// the request was invalid, else ours.
pub(super) fn hosting_error(e: HostingError) -> ApiError {
    match e {
        HostingError::Throttled(m) | HostingError::Unavailable(m) => {
            tracing::warn!(error = %m, "the endpoints' host is unavailable");
            ApiError::unavailable("the endpoints' host is unavailable: retry shortly", 5)
        }
        HostingError::Invalid(m) => ApiError::invalid(m),
        other => ApiError::internal_from("the endpoints' host", other),
    }
}
