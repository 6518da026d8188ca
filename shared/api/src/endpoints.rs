//! What crosses the API for model endpoints: the create and promote
//! bodies, the endpoint as it is shown, and the scoring body.

use mapi_domain::endpoint::{Accelerator, Access, EndpointStatus};
use mapi_domain::{ModelVersionId, ProjectId, TenantId, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST …/endpoints`: serve a model version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// 1–32 lowercase letters, digits and `-`, starting with a letter; stable across versions.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")]
    pub alias: String,
    pub model_version: ModelVersionId,
    /// `cpu` (default) or `l4`.
    #[serde(default = "cpu")]
    pub accelerator: Accelerator,
    /// `us`, `eu`, or a region by name, within the tenant's data residency; `l4` only where
    /// Cloud Run has L4 GPUs. Absent: derived from the residency (`eu` → europe-west4, `us` →
    /// us-central1, `asia` → asia-southeast1, one region → that region).
    #[serde(default)]
    pub region: Option<String>,
    /// 0 (default) scales to zero when idle.
    #[serde(default)]
    pub min_instances: u32,
    /// 1 to 100; 3 when absent.
    #[serde(default = "three")]
    pub max_instances: u32,
    /// `private` (default): only the platform can call the service.
    #[serde(default)]
    pub access: Access,
}

fn cpu() -> Accelerator {
    Accelerator::Cpu
}

fn three() -> u32 {
    3
}

/// `POST …/endpoints/{alias}:promote`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteEndpoint {
    pub model_version: ModelVersionId,
}

/// One revision of an endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RevisionView {
    pub tag: String,
    pub model_version: ModelVersionId,
    /// Its share of the scores, in percent.
    pub traffic_percent: u32,
    /// `stable`, `canary`, `previous` or `retired`.
    pub role: String,
    pub created_at: Timestamp,
}

/// A promotion under way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PromotionView {
    pub model_version: ModelVersionId,
    pub tag: String,
    /// `smoke`, `shifting`, `promoted` or `rolled_back`.
    pub phase: String,
    pub canary_percent: u32,
    pub started_at: Timestamp,
}

/// One entry of an endpoint's history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointEventView {
    pub at: Timestamp,
    /// `created`, `ready`, `failed`, `promotion_started`, `traffic`, `promoted`, `rolled_back`, `deleting`.
    pub kind: String,
    pub detail: String,
}

/// What the endpoint's scores cost so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointUsageView {
    pub requests: u64,
    pub errors: u64,
    /// Compute time billed, in milliseconds.
    pub compute_ms: u64,
    pub cost_micros: u64,
}

/// An endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointView {
    pub alias: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    /// The version the stable revision serves.
    pub model_version: ModelVersionId,
    pub accelerator: Accelerator,
    pub region: String,
    pub min_instances: u32,
    pub max_instances: u32,
    pub access: Access,
    pub status: EndpointStatus,
    /// Why it failed, in the host's words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The host's service (`local` or `cloud-run`).
    pub hosting: String,
    pub service: String,
    /// Where the platform sends scores (the service's URL; none locally).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    pub revisions: Vec<RevisionView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<PromotionView>,
    pub usage: EndpointUsageView,
    pub events: Vec<EndpointEventView>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// A page of endpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EndpointPage {
    pub endpoints: Vec<EndpointView>,
}

/// `POST …/endpoints/{alias}:score`: rows of the model's input columns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScoreRequest {
    /// 1 to 10,000 rows, each naming exactly the model's input columns.
    #[schema(value_type = Vec<Object>)]
    #[serde(deserialize_with = "mapi_domain::unique::objects")]
    pub rows: Vec<Map<String, Value>>,
    /// Also answer each prediction's standard error (of the fitted mean).
    #[serde(default)]
    pub std_errors: bool,
}

/// One prediction.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PredictionView {
    pub value: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub std_error: Option<f64>,
}

/// The predictions, and which revision made them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScoreResponse {
    pub predictions: Vec<PredictionView>,
    pub revision: String,
}
