//! Workflows: their definitions and their runs.

use mapi_domain::{RunId, Timestamp, UserId};
use serde::{Deserialize, Serialize};

pub use mapi_workflows::definition::show as show_combination;
pub use mapi_workflows::{Definition, Goal, Kind, NodeState, RunState};

/// How a workflow's name is written: a lowercase letter, then up to 62
/// lowercase letters, digits or `-`.
pub const WORKFLOW_NAME_PATTERN: &str = "^[a-z][a-z0-9-]{0,62}$";

/// `POST …/workflows`: a new workflow.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWorkflow {
    #[schema(pattern = "^[a-z][a-z0-9-]{0,62}$")]
    pub name: String,
    /// The definition: a JSON object, or its YAML (or JSON) text as a string.
    #[schema(value_type = Object)]
    pub definition: serde_json::Value,
}

/// `PUT …/workflows/{name}`: its next version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateWorkflow {
    /// As for a new workflow.
    #[schema(value_type = Object)]
    pub definition: serde_json::Value,
    /// The version this update replaces: refused (409) if another update
    /// came first. Absent: replace whatever is latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

/// A workflow at one version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowView {
    pub name: String,
    pub version: u32,
    /// The latest version (the one `version` is, unless an earlier one was asked for).
    pub latest: u32,
    pub definition: Definition,
    pub created_by: UserId,
    pub created_at: Timestamp,
    pub updated_by: UserId,
    pub updated_at: Timestamp,
}

/// A project's workflows, by name.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowPage {
    pub workflows: Vec<WorkflowView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}

/// `POST …/workflows/{name}/runs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct StartWorkflow {
    /// The version to run; the latest when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

/// A run a node made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeRunView {
    pub run: RunId,
    /// The grid's values this run tries (empty for a `run` node).
    #[schema(value_type = Object)]
    pub combination: serde_json::Map<String, serde_json::Value>,
    /// `succeeded`, `failed`, `cancelled`, `refused`; absent while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended: Option<String>,
    /// The grid's metric, as the run reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// One node of a workflow run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeView {
    pub id: String,
    pub kind: Kind,
    pub needs: Vec<String>,
    pub state: NodeState,
    /// How many times it started (a resume starts a failed node again).
    pub tries: u32,
    pub runs: Vec<NodeRunView>,
    /// Runs of its earlier tries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub earlier_runs: Vec<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<String>,
    /// The model version it made, picked (a grid's best), validated or deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub best_run: Option<RunId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
}

/// A run of a workflow, with each node's state and the runs it made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowRunView {
    pub id: String,
    pub workflow: String,
    pub version: u32,
    pub state: RunState,
    /// 1, and one more with each resume.
    pub attempt: u32,
    pub started_by: UserId,
    /// The sum of its runs' estimates (one attempt each, at list prices).
    pub estimate: mapi_cost::Charge,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Timestamp>,
    pub nodes: Vec<NodeView>,
}

/// Workflow runs, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WorkflowRunPage {
    pub runs: Vec<WorkflowRunView>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}
