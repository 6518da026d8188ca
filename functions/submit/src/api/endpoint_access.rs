//! What the endpoint routes and scoring share: loading an endpoint the
//! caller may act on, reading an action's body, answering a host's error.

use axum::http::HeaderMap;
use mapi_access::{Action, Resource};
use mapi_domain::endpoint::Access;
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
    if caller.is_anonymous() {
        return grant_public(state, (tenant, project, alias), action).await;
    }
    let what = format!("endpoint {}", alias.chars().take(40).collect::<String>());
    let target = Target { endpoint: Some(alias), ..Target::project(tenant, project, &what) };
    Ok(authorize(state, caller, target, Resource::Endpoint, action).await?.tenant)
}

/// What a caller without credentials may do: score a public endpoint and
/// read its metadata (`Run`, `Read`) while its tenant is active; nothing
/// else. A private or missing endpoint answers 401 alike, so nobody learns
/// which private aliases exist; a suspended tenant's public endpoint is 403,
/// as for its members.
async fn grant_public(
    state: &AppState,
    (tenant, project, alias): (&TenantId, &ProjectId, &str),
    action: Action,
) -> Result<mapi_schema::TenantDoc, ApiError> {
    let anonymous = || {
        Caller { principal: mapi_identity::Principal::Anonymous, meta: Default::default() }
            .require_credentials()
    };
    if !matches!(action, Action::Run | Action::Read) {
        anonymous()?;
    }
    let doc = mapi_schema::get::<EndpointDoc>(&*state.store, &endpoint_id(tenant, project, alias)).await?;
    if doc.is_none_or(|d| d.access != Access::Public) {
        anonymous()?;
    }
    let tenant_doc = mapi_schema::get::<mapi_schema::TenantDoc>(&*state.store, tenant.as_str()).await?;
    let tenant_doc = tenant_doc.ok_or_else(|| ApiError::not_found(format!("tenant {tenant} not found")))?;
    if tenant_doc.status != mapi_domain::TenantStatus::Active {
        return Err(ApiError::forbidden(format!(
            "tenant {tenant} is {}: its endpoints score nothing until it is active again",
            tenant_doc.status.as_str()
        )));
    }
    Ok(tenant_doc)
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
