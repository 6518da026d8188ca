//! The API's representations of runs, datasets and model versions.

use std::collections::BTreeMap;

use mapi_cost::Charge;
use mapi_domain::ExecutionHandle;
use mapi_domain::{
    AttemptNo, DatasetId, ExecutionStatus, ModelVersionId, ProjectId, ResourceClass, RunError, RunId,
    RunState, TenantId, Timestamp, Transition, UserId,
};
use mapi_events::progress::Summary;
use serde::{Deserialize, Serialize};

/// One attempt of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AttemptView {
    pub attempt: AttemptNo,
    pub class: ResourceClass,
    pub execution: Option<ExecutionHandle>,
    pub submitted_at: Option<Timestamp>,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub status: Option<ExecutionStatus>,
    /// The GPUs each task got (0 for a GPU-class attempt placed where there is none).
    #[serde(default)]
    pub gpus: u32,
    /// The metered charge, once the attempt is finalized.
    pub charge: Option<Charge>,
}

/// An output file of the run, with a short-lived signed URL to download it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct OutputView {
    pub name: String,
    pub size: u64,
    pub url: String,
}

/// What a run cost and may cost.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CostView {
    /// One attempt of the requested class for the whole timeout.
    pub estimate_micros: i64,
    /// Sum of the metered attempts so far.
    pub charged_micros: i64,
    pub currency: String,
    pub price_table: String,
    pub note: String,
}

/// A run, as `GET /v1/runs/{id}` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunView {
    pub id: RunId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub method: String,
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, serde_json::Value>,
    pub dataset: DatasetId,
    pub class: ResourceClass,
    pub requested_class: ResourceClass,
    pub timeout_s: u32,
    /// Tasks of each attempt's execution (more than 1 for a fan-out).
    pub tasks: u32,
    pub state: RunState,
    pub attempt: AttemptNo,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub created_by: UserId,
    /// The run's name, note and tags (`PATCH /v1/runs/{id}`).
    #[serde(flatten)]
    pub labels: crate::labels::RunLabels,
    /// The ended run this one retries (`POST /v1/runs/{id}/retry`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_of: Option<RunId>,
    /// For a run of a plugin method: the plugin version it runs (fixed at submit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<mapi_domain::PluginCode>,
    pub error: Option<RunError>,
    /// How the current attempt runs other than asked (`GPU_UNAVAILABLE`: a
    /// GPU-class run on the CPU); empty when it runs as asked.
    #[serde(default)]
    pub warnings: Vec<mapi_domain::RunWarning>,
    pub stalled: bool,
    /// Why a queued run is not placed yet (the executor switched off, the
    /// shared-tier gate, the spend cap), and since when; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<WaitingView>,
    #[schema(value_type = Option<Object>)]
    pub progress: Option<Summary>,
    /// What people logged to the run (`POST /v1/runs/{id}/log`): each
    /// metric's value at its highest step, and the params.
    #[serde(default)]
    pub logged_metrics: BTreeMap<String, f64>,
    #[serde(default)]
    #[schema(value_type = Object)]
    pub logged_params: BTreeMap<String, serde_json::Value>,
    pub attempts: Vec<AttemptView>,
    pub history: Vec<Transition>,
    pub outputs: Vec<OutputView>,
    /// The model version the run's outputs were sealed into, once it
    /// succeeded; absent for a method that fits no model (`describe`, the
    /// diagnostics), whose runs have outputs only.
    pub model_version: Option<ModelVersionId>,
    pub cost: CostView,
    /// For a run of a fan-out parent (`ts.backtest`, `sbc`): its children,
    /// the tasks of its execution, with their states.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub children: Vec<ChildView>,
    /// For a fan-out parent's run that succeeded: what it folded from its
    /// children (its own outputs are listed in `outputs` beside theirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate: Option<Aggregate>,
}

/// What a fan-out parent's run folded from its children: its metrics, and
/// the names of the outputs it wrote.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Aggregate {
    pub metrics: BTreeMap<String, f64>,
    pub outputs: Vec<String>,
}

/// Where a child of a fan-out parent's run is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChildState {
    /// Its task has not reported yet.
    Pending,
    Running,
    Succeeded,
    /// Its run ended (failed, or timed out) before it completed.
    Failed,
    Cancelled,
}

/// One child of a fan-out parent's run (`GET /v1/runs/{id}/children/{index}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ChildView {
    /// The parent run.
    pub parent: RunId,
    /// Its index, which is its task's index in every attempt.
    pub index: u32,
    pub state: ChildState,
    /// How far it got in the current attempt, 0 to 1.
    pub fraction: f64,
    /// It did not run its method in the current attempt: it took the results
    /// it wrote in an earlier attempt (or in the run this one retries).
    pub reused: bool,
    /// Its share of the run's charges: each attempt's charge split evenly
    /// over its tasks. The children's shares sum to the run's charge.
    pub charged_micros: i64,
    /// Its outputs, as the parent's view names them (`{index}/{name}`).
    pub outputs: Vec<String>,
}

/// A page of what one attempt's execution printed (`GET /v1/runs/{id}/logs`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunLogs {
    pub run: RunId,
    pub attempt: AttemptNo,
    /// The execution, once the executor named it; no lines before that.
    pub execution: Option<ExecutionHandle>,
    pub lines: Vec<LogLineView>,
    /// Pass as `cursor` to read on: what was printed after these lines.
    pub cursor: String,
    /// More lines are ready: ask again at once.
    pub more: bool,
    /// The attempt is over: once `more` is false too, nothing will be added.
    pub finished: bool,
}

/// One printed line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LogLineView {
    pub task: u32,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// When the line was received, where the executor records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<Timestamp>,
    /// The line, cut at 8 KiB.
    pub text: String,
}

/// What holds a queued run back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WaitingView {
    pub reason: String,
    pub since: Timestamp,
}

/// A run in a listing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunSummary {
    pub id: RunId,
    pub method: String,
    pub state: RunState,
    pub class: ResourceClass,
    /// Who submitted it (a token's owner for a token).
    pub created_by: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
    pub attempt: AttemptNo,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub charged_micros: i64,
    /// The dataset it ran on.
    pub dataset: DatasetId,
    /// The value of each `params.{name}` and `metrics.{name}` column the
    /// list was asked for (`columns`, or the saved view's), by column; a
    /// column the run has no value for is absent. A param is the one
    /// people logged, else the spec's; a metric its latest logged value,
    /// else what the method reported.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub values: BTreeMap<String, serde_json::Value>,
}

/// A column's value in a run, as a table shows it and sorts by it.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    Number(f64),
    Text(String),
    Missing,
}

impl RunSummary {
    /// The value of a runs-table column (`state`, `params.alpha`,
    /// `metrics.r2`, …); `params.*` and `metrics.*` from [`RunSummary::values`].
    pub fn column(&self, column: &str) -> Column {
        let text = |s: &str| Column::Text(s.to_owned());
        match column {
            "id" => text(self.id.as_str()),
            "name" => self.name.as_deref().map_or(Column::Missing, text),
            "method" => text(&self.method),
            "dataset" => text(self.dataset.as_str()),
            "state" => text(self.state.as_str()),
            "class" => text(self.class.as_str()),
            "attempt" => Column::Number(f64::from(self.attempt.0)),
            "created_at" => text(&self.created_at.to_rfc3339()),
            "created_by" => text(self.created_by.as_str()),
            "charged" => Column::Number(self.charged_micros as f64 / 1e6),
            "tags" => text(&self.tags.join(", ")),
            "experiment" => self.experiment.as_deref().map_or(Column::Missing, text),
            other => match self.values.get(other) {
                Some(serde_json::Value::Number(n)) => n.as_f64().map_or(Column::Missing, Column::Number),
                Some(serde_json::Value::String(s)) => text(s),
                Some(v) => Column::Text(v.to_string()),
                None => Column::Missing,
            },
        }
    }
}

/// Runs sorted by a column: numbers by value, text in its order, runs
/// without a value last either way (a page is sorted; the list's order
/// across pages stays newest first).
pub fn sort_runs(runs: &mut [RunSummary], column: &str, descending: bool) {
    let rank = |c: &Column| match c {
        Column::Number(_) => 0,
        Column::Text(_) => 1,
        Column::Missing => 2,
    };
    runs.sort_by(|a, b| {
        let (x, y) = (a.column(column), b.column(column));
        let ordered = match (&x, &y) {
            (Column::Number(x), Column::Number(y)) => x.total_cmp(y),
            (Column::Text(x), Column::Text(y)) => x.cmp(y),
            _ => return rank(&x).cmp(&rank(&y)),
        };
        if descending { ordered.reverse() } else { ordered }
    });
}

/// A page of runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunPage {
    pub runs: Vec<RunSummary>,
    /// Pass as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
}

/// One artifact of a model version, as its verified manifest pins it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArtifactView {
    /// The output's name in the run (`{task}/{name}` for a fan-out).
    pub name: String,
    /// The object's key in the data bucket.
    pub key: String,
    /// The object generation the manifest pins.
    pub generation: i64,
    pub size: u64,
    /// Hex SHA-256 of the bytes.
    pub sha256: String,
}

/// A model version, as `GET /v1/model-versions/{id}` shows it: its record
/// and the artifacts of its manifest, which verified for this answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelVersionView {
    pub id: ModelVersionId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub run: RunId,
    pub attempt: AttemptNo,
    pub method: String,
    /// The bundle's prefix (`manifest.json` and `manifest.sig.json` under it).
    pub bundle: String,
    /// Hex SHA-256 of the signed manifest.
    pub manifest_sha256: String,
    /// The key version that signed it.
    pub key_version: String,
    pub created_at: Timestamp,
    pub artifacts: Vec<ArtifactView>,
    /// When an admin deprecated it (it may no longer be promoted), by whom and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<DeprecationView>,
}

/// A model version's deprecation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeprecationView {
    pub by: mapi_domain::UserId,
    pub at: Timestamp,
    pub reason: String,
}

/// A model version in a listing (from its record; nothing verified).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelVersionSummary {
    pub id: ModelVersionId,
    pub run: RunId,
    pub method: String,
    pub artifact_count: u32,
    pub manifest_sha256: String,
    pub created_at: Timestamp,
    /// When its bytes were deleted (its tenant's model-version retention,
    /// while it served no endpoint); absent while it can be served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_at: Option<Timestamp>,
}

/// A page of model versions, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelVersionPage {
    pub model_versions: Vec<ModelVersionSummary>,
    /// Pass as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
}

/// A signed GET URL to one artifact.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArtifactUrl {
    pub name: String,
    /// The artifact's object key, as the signed manifest lists it (empty from a platform before it
    /// was stated).
    #[serde(default)]
    pub key: String,
    pub size: u64,
    pub sha256: String,
    pub url: String,
}

/// URLs to every artifact of a model version, minted after its manifest
/// verified and every artifact was found to be the one it pins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ArtifactUrls {
    pub model_version: ModelVersionId,
    /// Seconds the URLs stay valid.
    pub expires_in_s: u64,
    pub artifacts: Vec<ArtifactUrl>,
}

/// A model version's manifest exactly as it was signed, with its
/// signature: what a verifier outside the platform checks against
/// `GET /v1/signing-keys` (the format is in docs/bundle-format.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SignedManifest {
    pub model_version: ModelVersionId,
    /// Hex SHA-256 of `manifest`'s UTF-8 bytes, as the version recorded it when sealed.
    pub manifest_sha256: String,
    /// The signed bytes (JSON text; verify these bytes, not a re-serialization).
    pub manifest: String,
    pub signature: ManifestSignature,
}

/// A signature over a manifest.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ManifestSignature {
    /// The signing key's version: the `kid` of its key in `GET /v1/signing-keys`.
    pub key_version: String,
    /// `EC_SIGN_P256_SHA256` (ECDSA, ASN.1 DER) or `RSA_SIGN_PSS_{2048,3072,4096}_SHA256`.
    pub algorithm: String,
    /// Base64 (standard alphabet) of the signature bytes.
    pub value: String,
}

/// The public keys bundle signatures verify under: a JSON Web Key Set
/// (RFC 7517) with the key new signatures are made with named.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SigningKeys {
    /// The active key and every key still trusted (a rotation keeps the old one until its versions go).
    pub keys: Vec<SigningKey>,
    /// The `kid` new signatures are made with.
    pub active: String,
}

/// One public key as a JSON Web Key (RFC 7517, 7518): EC P-256 (`x`, `y`)
/// or RSA (`n`, `e`), numbers in unpadded base64url.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SigningKey {
    /// The key version, as signatures name it.
    pub kid: String,
    /// `EC` or `RSA`.
    pub kty: String,
    /// `ES256` or `PS256`.
    pub alg: String,
    /// Always `sig`.
    #[serde(rename = "use")]
    pub use_: String,
    /// The platform's name of the algorithm (as signatures name it).
    pub algorithm: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crv: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub y: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e: Option<String>,
}

/// A dataset, as the API shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetView {
    pub id: DatasetId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub size: u64,
    pub rows: usize,
    pub columns: Vec<String>,
    pub numeric_columns: Vec<String>,
    pub created_at: Timestamp,
}

/// A dataset in a listing: its columns are on its own page
/// (`GET …/datasets/{id}`), so a page's size does not grow with them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetSummary {
    pub id: DatasetId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub size: u64,
    pub rows: usize,
    pub column_count: usize,
    pub created_at: Timestamp,
}

/// A link to download a dataset's file (a signed GET URL).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetUrl {
    pub dataset: DatasetId,
    pub url: String,
    pub expires_in_s: u64,
}

/// A page of datasets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetPage {
    pub datasets: Vec<DatasetSummary>,
    pub next_page_token: Option<String>,
}
