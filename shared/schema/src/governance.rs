//! Governance: the policies model versions must satisfy before they serve
//! traffic, and the validations of versions against them
//! (`mapi_governance` decides; these are its documents).

use mapi_domain::{ModelVersionId, ProjectId, TenantId, Timestamp, UserId};
use mapi_governance::{Policy, Validation};
use serde::{Deserialize, Serialize};

use crate::Doc;

/// A policy: the tenant's (id `{tenant}`, every project) or a project's
/// (id `{tenant}:{project}`, adding to the tenant's).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PolicyDoc {
    pub tenant: TenantId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectId>,
    pub policy: Policy,
    pub updated_by: UserId,
    pub updated_at: Timestamp,
}

impl PolicyDoc {
    pub fn id_of(tenant: &TenantId, project: Option<&ProjectId>) -> String {
        match project {
            Some(p) => format!("{tenant}:{p}"),
            None => tenant.to_string(),
        }
    }
}

impl Doc for PolicyDoc {
    const COLLECTION: &'static str = "governance_policies";
    fn doc_id(&self) -> String {
        PolicyDoc::id_of(&self.tenant, self.project.as_ref())
    }
}

/// One validation of a model version. Id: `val_` and a sortable suffix.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ValidationDoc {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub model_version: ModelVersionId,
    /// The endpoint whose serving version its improvements were checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The workflow run whose `validate` node submitted it: told when it is decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow_run: Option<String>,
    #[serde(flatten)]
    pub validation: Validation,
}

impl Doc for ValidationDoc {
    const COLLECTION: &'static str = "validations";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

/// Why a validated version may no longer be promoted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deprecation {
    pub by: UserId,
    pub at: Timestamp,
    pub reason: String,
}
