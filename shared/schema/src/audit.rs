//! The audit log.

use mapi_domain::{ProjectId, TenantId, Timestamp, UserId};
use serde::{Deserialize, Serialize};

use crate::Doc;

pub use mapi_api::audit::Outcome;
use mapi_api::audit::{AuditEntry, split_resource};

/// One audit log entry. Id: time in micros (zero-padded) and a random
/// suffix, so entries sort by time. IP addresses and user agents are kept
/// only as keyed hashes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditDoc {
    pub id: String,
    pub at: Timestamp,
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
    /// What it was done to, e.g. `tenants/acme`, `runs/run_…`.
    pub resource: String,
    pub outcome: Outcome,
    /// The problem code answered, when refused or failed.
    pub problem: Option<String>,
    pub detail: Option<String>,
    pub ip_hash: Option<String>,
    pub user_agent_hash: Option<String>,
}

impl From<AuditDoc> for AuditEntry {
    fn from(d: AuditDoc) -> AuditEntry {
        let (kind, id) = split_resource(&d.resource);
        let (resource_kind, resource_id) = (kind.to_owned(), id.to_owned());
        AuditEntry {
            id: d.id,
            ts: d.at,
            tenant: d.tenant,
            project: d.project,
            actor: d.actor,
            actor_kind: d.actor_kind,
            token: d.token,
            operator: d.operator,
            action: d.action,
            resource: d.resource,
            resource_kind,
            resource_id,
            outcome: d.outcome,
            problem: d.problem,
            detail: d.detail,
            ip_hash: d.ip_hash,
            user_agent_hash: d.user_agent_hash,
        }
    }
}

impl Doc for AuditDoc {
    const COLLECTION: &'static str = "audit";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}
