//! The audit log as the API answers it: entries newest first under `items`,
//! each with its time as `ts` and its resource split into a kind and an id
//! (`runs/run_…` is kind `runs`, id `run_…`), so a reader can print
//! `kind:id` without parsing.

use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use serde::{Deserialize, Serialize};

mapi_domain::wire_enum!(
    /// How an audited action ended.
    Outcome {
        Success => "success",
        Denied => "denied",
        Failed => "failed",
    }
);

/// One entry of the audit log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    pub id: String,
    /// When it happened (RFC 3339, UTC).
    pub ts: Timestamp,
    pub tenant: Option<TenantId>,
    pub project: Option<ProjectId>,
    /// The person (or the token's owner); absent when unauthenticated.
    pub actor: Option<UserId>,
    /// `session`, `token`, `internal` or `anonymous`.
    pub actor_kind: String,
    /// The token used, by public id.
    pub token: Option<String>,
    /// The actor acted as an operator.
    pub operator: bool,
    /// What was done, e.g. `tenant.create`, `auth.sign_in_failed`, `run.cancel`.
    pub action: String,
    /// What it was done to, whole: `tenants/acme`, `runs/run_…`.
    pub resource: String,
    /// The resource's collection: `tenants`, `runs`, `tokens`, …
    pub resource_kind: String,
    /// The resource within its kind: `acme`, `run_…`.
    pub resource_id: String,
    pub outcome: Outcome,
    /// The problem code answered, when refused or failed.
    pub problem: Option<String>,
    pub detail: Option<String>,
    /// Keyed hashes: entries can be correlated, the values not recovered.
    pub ip_hash: Option<String>,
    pub user_agent_hash: Option<String>,
}

/// `kind/id` split at its first `/`; a resource with no `/` is all kind.
pub fn split_resource(resource: &str) -> (&str, &str) {
    resource.split_once('/').unwrap_or((resource, ""))
}

/// A page of the audit log, newest first.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditPage {
    pub items: Vec<AuditEntry>,
    /// Pass as `page_token` for the next page; absent on the last.
    pub next_page_token: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resource_splits_at_its_first_slash() {
        assert_eq!(split_resource("runs/run_1"), ("runs", "run_1"));
        assert_eq!(split_resource("projects/acme/default"), ("projects", "acme/default"));
        assert_eq!(split_resource("kill_switches"), ("kill_switches", ""));
    }
}
