//! The API's representations of runs and datasets, shared by the server
//! (which builds them) and the CLI (which reads them).

use std::collections::BTreeMap;

use mapi_cost::Charge;
use mapi_domain::{
    AttemptNo, DatasetId, ExecutionStatus, ProjectId, ResourceClass, RunError, RunId, RunState, TenantId,
    Timestamp, Transition, UserId,
};
use mapi_events::progress::Summary;
use mapi_executor::ExecutionHandle;
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
    pub state: RunState,
    pub attempt: AttemptNo,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub created_by: UserId,
    pub error: Option<RunError>,
    pub stalled: bool,
    #[schema(value_type = Option<Object>)]
    pub progress: Option<Summary>,
    pub attempts: Vec<AttemptView>,
    pub history: Vec<Transition>,
    pub outputs: Vec<OutputView>,
    pub cost: CostView,
}

/// A run in a listing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunSummary {
    pub id: RunId,
    pub method: String,
    pub state: RunState,
    pub class: ResourceClass,
    pub attempt: AttemptNo,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub charged_micros: i64,
}

/// A page of runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunPage {
    pub runs: Vec<RunSummary>,
    /// Pass as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
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

/// A page of datasets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetPage {
    pub datasets: Vec<DatasetView>,
    pub next_page_token: Option<String>,
}

impl From<&crate::DatasetDoc> for DatasetView {
    fn from(d: &crate::DatasetDoc) -> Self {
        DatasetView {
            id: d.id.clone(),
            tenant: d.tenant.clone(),
            project: d.project.clone(),
            name: d.name.clone(),
            size: d.size,
            rows: d.rows,
            columns: d.columns.clone(),
            numeric_columns: d.numeric_columns.clone(),
            created_at: d.created_at,
        }
    }
}

impl From<&crate::RunDoc> for RunSummary {
    fn from(r: &crate::RunDoc) -> Self {
        RunSummary {
            id: r.id.clone(),
            method: r.method.clone(),
            state: r.state,
            class: r.class,
            attempt: r.attempt,
            created_at: r.created_at,
            updated_at: r.updated_at,
            charged_micros: r.charged_micros,
        }
    }
}
