//! What crosses the API for model endpoints: the create and promote
//! bodies, the endpoint as it is shown, and the scoring body.

use mapi_domain::endpoint::{Accelerator, Access, EndpointStatus};
use mapi_domain::{ModelVersionId, ProjectId, TenantId, Timestamp};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// `POST …/endpoints`: serve a model version, or a model-server container.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEndpoint {
    /// 1–32 lowercase letters, digits and `-`, starting with a letter; stable across versions.
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")]
    pub alias: String,
    /// The model version the platform's model server serves. Exactly one of `model_version`
    /// and `container`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<ModelVersionId>,
    /// A model-server image of the tenant's own, run as it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
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
    /// `private` (the default): scores need a session or a token that may score it. `public`:
    /// anyone may score it at the platform's routes without credentials (charged to the
    /// tenant, admitted under its limits). Either way the model server itself stays private:
    /// only the platform, with an ID token, calls it, so every score is admitted and metered.
    #[serde(default)]
    pub access: Access,
}

fn cpu() -> Accelerator {
    Accelerator::Cpu
}

fn three() -> u32 {
    3
}

/// A model-server container: the tenant's own image, which listens on `port` and answers
/// `health_path` with a 2xx once it can serve. Requests reach it unchanged through the
/// platform's protocol routes (authorized, admitted, metered and audited there).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Container {
    /// On Cloud Run an image reference Cloud Run can pull (`REGION-docker.pkg.dev/…:tag` or
    /// `…@sha256:…`); on one machine the path of an OCI image layout (a directory or its tar
    /// archive), run in a gVisor sandbox without network.
    #[schema(min_length = 1, max_length = 1024)]
    pub image: String,
    /// The TCP port the server listens on (its `PORT` variable says the same); 8080 when absent.
    #[serde(default = "port_8080")]
    #[schema(minimum = 1, maximum = 65535)]
    pub port: u16,
    /// The path answered with a 2xx once the server can serve (its startup probe and the
    /// smoke test's first step); `/health` when absent.
    #[serde(default = "health")]
    #[schema(pattern = "^/[!-~]{0,255}$")]
    pub health_path: String,
    /// Environment variables whose values are secrets of the tenant, by variable name:
    /// `SECRET` or `SECRET:VERSION` (version a number or `latest`, the default). On Cloud Run
    /// each is a Secret Manager reference (never a plain value on the revision); on one
    /// machine it is read from the secrets file.
    #[serde(default)]
    pub secrets: std::collections::BTreeMap<String, String>,
    /// A request the smoke test sends after the health check; a 2xx passes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub example: Option<ContainerExample>,
}

/// A request a container's revision must answer with a 2xx before it takes traffic.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContainerExample {
    /// The path, e.g. `/v2/models/m/infer`.
    #[schema(pattern = "^/[!-~]{0,1023}$")]
    pub path: String,
    /// A JSON body, sent with POST; absent: a GET.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
}

fn port_8080() -> u16 {
    8080
}

fn health() -> String {
    "/health".to_owned()
}

/// What a revision serves, in words: its model version, or `image …`.
pub fn served(version: Option<&ModelVersionId>, image: Option<&str>) -> String {
    match (version, image) {
        (Some(v), _) => v.to_string(),
        (None, Some(image)) => format!("image {image}"),
        (None, None) => "nothing".into(),
    }
}

/// `POST …/endpoints/{alias}:promote`: a new revision serving a model version, or (on a
/// container endpoint) another container.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteEndpoint {
    /// Exactly one of `model_version` and `container`, of the endpoint's kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<ModelVersionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<Container>,
}

/// `POST …/endpoints/{alias}:scale`: new instance bounds; a bound left out stays.
/// Admitted as a creation is: a larger `max_instances` is more compute.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScaleEndpoint {
    /// Instances kept warm (0 scales to zero when idle).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_instances: Option<u32>,
    /// The most instances (1–100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
}

/// One revision of an endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RevisionView {
    pub tag: String,
    /// The model version it serves (absent for a container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<ModelVersionId>,
    /// The container image it runs (absent for a model version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Its share of the scores, in percent.
    pub traffic_percent: u32,
    /// `stable`, `canary`, `previous` or `retired`.
    pub role: String,
    pub created_at: Timestamp,
}

/// A promotion under way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PromotionView {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<ModelVersionId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
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
    /// The version the stable revision serves (absent for a container).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<ModelVersionId>,
    /// The image the stable revision runs (absent for a model version).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
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
    /// Versions its revisions serve that an admin deprecated since: roll
    /// back or promote another.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deprecated: Vec<DeprecatedServing>,
}

/// A deprecated model version an endpoint still serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeprecatedServing {
    pub model_version: ModelVersionId,
    pub by: mapi_domain::UserId,
    pub at: Timestamp,
    pub reason: String,
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

/// The bodies of the standard inference protocols, as the document
/// describes them. The handlers read the JSON themselves, to name the input
/// that is wrong; a test holds that every body they accept is one of these.
pub mod protocol {
    use serde::{Deserialize, Serialize};
    use serde_json::{Map, Value};

    /// An Open Inference Protocol v2 infer request.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct InferRequest {
        /// Echoed in the answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub id: Option<String>,
        /// One tensor per input column, all with the same number of rows.
        #[schema(min_items = 1)]
        pub inputs: Vec<InferTensor>,
        /// The outputs wanted: `value` always comes; name `std_error` to get standard errors too.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub outputs: Option<Vec<RequestedOutput>>,
    }

    /// One input column as a tensor of shape `[N]` or `[N, 1]`.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct InferTensor {
        /// The column's name.
        pub name: String,
        /// `[N]` or `[N, 1]`.
        #[schema(min_items = 1, max_items = 2)]
        pub shape: Vec<u64>,
        /// The tensor's type, as the client states it (`FP64`, `INT64`, `BYTES`, …).
        pub datatype: String,
        /// N values, flat or nested by row.
        pub data: Vec<Value>,
    }

    /// An output asked for by name.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct RequestedOutput {
        /// `value` or `std_error`.
        pub name: String,
    }

    /// A KServe v1 predict request.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct PredictRequest {
        /// One object per row, naming its columns.
        #[schema(value_type = Vec<Object>, min_items = 1)]
        pub instances: Vec<Map<String, Value>>,
    }

    /// An MLflow scoring request: exactly one of the four fields.
    #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct InvocationsRequest {
        /// `{"columns": [...], "data": [[...], ...]}`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub dataframe_split: Option<Value>,
        /// One object per row.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Vec<Object>>)]
        pub dataframe_records: Option<Vec<Map<String, Value>>>,
        /// One object per row.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(value_type = Option<Vec<Object>>)]
        pub instances: Option<Vec<Map<String, Value>>>,
        /// One object per row, or one list per column.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub inputs: Option<Value>,
    }

    /// The KServe v1 and MLflow answer: one value per row.
    #[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
    pub struct PredictResponse {
        /// The predicted values, in the rows' order.
        pub predictions: Vec<f64>,
    }
}
