//! Workflows: their definitions, one document per version, and their runs
//! (`mapi_workflows` decides; these are its documents).

use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use mapi_workflows::{Definition, WorkflowRun};
use serde::{Deserialize, Serialize};

use crate::Doc;

/// A workflow of a project, at its latest version. Id:
/// `{tenant}:{project}:{name}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    /// 1 when created, one more with each update.
    pub version: u32,
    pub definition: Definition,
    pub created_by: UserId,
    pub created_at: Timestamp,
    pub updated_by: UserId,
    pub updated_at: Timestamp,
}

impl WorkflowDoc {
    pub fn id_of(tenant: &TenantId, project: &ProjectId, name: &str) -> String {
        format!("{tenant}:{project}:{name}")
    }
}

impl Doc for WorkflowDoc {
    const COLLECTION: &'static str = "workflows";
    fn doc_id(&self) -> String {
        WorkflowDoc::id_of(&self.tenant, &self.project, &self.name)
    }
}

/// One version of a workflow's definition, kept as it was written. Id:
/// the workflow's and `@{version}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowVersionDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub workflow: String,
    pub version: u32,
    pub definition: Definition,
    pub created_by: UserId,
    pub created_at: Timestamp,
}

impl WorkflowVersionDoc {
    pub fn id_of(tenant: &TenantId, project: &ProjectId, name: &str, version: u32) -> String {
        format!("{}@{version}", WorkflowDoc::id_of(tenant, project, name))
    }
}

impl Doc for WorkflowVersionDoc {
    const COLLECTION: &'static str = "workflow_versions";
    fn doc_id(&self) -> String {
        WorkflowVersionDoc::id_of(&self.tenant, &self.project, &self.workflow, self.version)
    }
}

/// A run of one version of a workflow. Id: `wfr_` and a sortable suffix.
/// `active` and `driving` are indexed copies of what the run says (not
/// ended; a run or grid node running), for the tick's sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkflowRunDoc {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub workflow: String,
    pub version: u32,
    /// Who started it, and through which token (its public id): its
    /// child runs are admitted as theirs, each when it starts.
    pub started_by: UserId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The sum of its run and grid nodes' estimates (one attempt each, at
    /// list prices), admitted as one unit when it started.
    pub estimate: mapi_cost::Charge,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub active: bool,
    pub driving: bool,
    pub run: WorkflowRun,
}

impl WorkflowRunDoc {
    /// Copies what the tick's query reads from the run, after a change.
    pub fn touch(&mut self, now: Timestamp) {
        self.active = !self.run.state().is_final();
        self.driving = self.run.driving();
        self.updated_at = now;
    }
}

impl Doc for WorkflowRunDoc {
    const COLLECTION: &'static str = "workflow_runs";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}
