//! Governance: policies and validations of model versions.

use mapi_domain::{ModelVersionId, ProjectId, TenantId};
use serde::{Deserialize, Serialize};

pub use mapi_governance::{Better, CheckOutcome, Decision, Improvement, Policy, State, Validation};

/// A policy as set (absent: none) and the one in force where it applies
/// (the tenant's and the project's combined).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PolicyView {
    pub tenant: TenantId,
    /// Absent for the tenant-wide policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<ProjectId>,
    pub policy: Option<Policy>,
    /// What a version of this project must pass (for the tenant-wide policy: the tenant's alone).
    pub in_force: Policy,
}

/// `POST /v1/model-versions/{id}/validations`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitValidation {
    /// The endpoint the version is to serve: the policy's improvements are
    /// checked against the version it serves now. Needed when the policy asks
    /// for an improvement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^[a-z]([a-z0-9-]{0,30}[a-z0-9])?$")]
    pub endpoint: Option<String>,
}

/// A reviewer's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Approve,
    Reject,
}

/// `POST /v1/validations/{id}/approvals`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecideValidation {
    pub decision: Verdict,
    /// Why (1 to 1,000 characters); kept with the decision and in the audit log.
    #[schema(min_length = 1, max_length = 1000, pattern = "\\S")]
    pub reason: String,
}

/// A validation of a model version.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ValidationView {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub model_version: ModelVersionId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    #[serde(flatten)]
    pub validation: Validation,
}

/// The validations of a model version, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ValidationPage {
    pub validations: Vec<ValidationView>,
}

/// `POST /v1/model-versions/{id}/deprecate`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeprecateVersion {
    /// Why it may no longer be promoted (1 to 1,000 characters).
    #[schema(min_length = 1, max_length = 1000, pattern = "\\S")]
    pub reason: String,
}
