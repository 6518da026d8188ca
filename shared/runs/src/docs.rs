//! The document types. Ids are chosen so no document is hot: one run, one
//! attempt, one progress record, one ledger entry each.

use mapi_access::{Role, Scope};
use mapi_cost::Charge;
use mapi_domain::{
    AttemptNo, DatasetId, ExecutionStatus, JobId, ModelVersionId, Nonce, ProjectId, Residency, ResourceClass,
    RunId, TenantId, TenantStatus, Tier, Timestamp, UserId,
};
use mapi_events::progress::Progress;
use mapi_executor::ExecutionHandle;
use serde::{Deserialize, Serialize};

use crate::Doc;

/// A tenant (organisation).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TenantDoc {
    pub id: TenantId,
    pub name: String,
    pub tier: Tier,
    pub status: TenantStatus,
    pub residency: Residency,
    /// Invited as tenant admin; claims the invitation at first sign-in.
    pub admin_email: Option<UserId>,
    /// Why the status was last changed to suspended or deleting.
    pub status_reason: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Doc for TenantDoc {
    const COLLECTION: &'static str = "tenants";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

/// A project inside a tenant. Id: `{tenant}:{project}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProjectDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub created_at: Timestamp,
}

impl ProjectDoc {
    pub fn id_of(tenant: &TenantId, project: &ProjectId) -> String {
        format!("{tenant}:{project}")
    }
}

impl Doc for ProjectDoc {
    const COLLECTION: &'static str = "projects";
    fn doc_id(&self) -> String {
        ProjectDoc::id_of(&self.tenant, &self.project)
    }
}

/// A person who has signed in at least once. Id: the e-mail.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UserDoc {
    pub email: UserId,
    pub first_sign_in: Timestamp,
    pub last_sign_in: Timestamp,
}

impl Doc for UserDoc {
    const COLLECTION: &'static str = "users";
    fn doc_id(&self) -> String {
        self.email.to_string()
    }
}

/// One grant: a role in one project, or tenant-wide (`project: None`). Id:
/// `{tenant}:{project or *}:{email}`. Read at every request, so removing it
/// stops the person's sessions and tokens at once. For an e-mail that has not
/// signed in yet it is an invitation, claimed at the first sign-in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MembershipDoc {
    pub tenant: TenantId,
    pub project: Option<ProjectId>,
    pub email: UserId,
    #[schema(value_type = String)]
    pub role: Role,
    /// The reviewer capability (never for viewers; admins have it implicitly).
    pub reviewer: bool,
    /// The person has signed in since the grant was made.
    pub claimed: bool,
    pub created_at: Timestamp,
    pub created_by: UserId,
}

impl MembershipDoc {
    pub fn id_of(tenant: &TenantId, project: Option<&ProjectId>, email: &UserId) -> String {
        match project {
            Some(p) => format!("{tenant}:{p}:{email}"),
            None => format!("{tenant}:*:{email}"),
        }
    }
}

impl Doc for MembershipDoc {
    const COLLECTION: &'static str = "memberships";
    fn doc_id(&self) -> String {
        MembershipDoc::id_of(&self.tenant, self.project.as_ref(), &self.email)
    }
}

/// A vCPU-second budget of a token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TokenBudget {
    pub vcpu_seconds: u64,
    /// `day` or `month` (UTC).
    pub period: BudgetPeriod,
}

mapi_domain::wire_enum!(
    /// A budget's period.
    BudgetPeriod {
        Day => "day",
        Month => "month",
    }
);

/// An API token, stored only as the HMAC of its secret (the id). It acts as
/// its owner in one project, limited by its scopes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenDoc {
    /// Hex HMAC-SHA256 of the token under the platform's pepper.
    pub hash: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub user: UserId,
    pub name: String,
    pub scopes: Vec<Scope>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
    pub revoked_by: Option<UserId>,
    /// Requests a minute this token may make.
    pub rate_limit_per_minute: Option<u32>,
    /// Compute this token may spend (enforced with quotas).
    pub budget: Option<TokenBudget>,
}

impl TokenDoc {
    /// The public name of a token: the first 12 hex characters of its hash.
    pub fn public_id(&self) -> &str {
        self.hash.get(..12).unwrap_or(&self.hash)
    }
}

impl Doc for TokenDoc {
    const COLLECTION: &'static str = "tokens";
    fn doc_id(&self) -> String {
        self.hash.clone()
    }
}

/// Requests one token made in one UTC minute. Id: `{token public id}:{minute}`.
/// Each token's minutes are separate documents, so no document is shared
/// by two tokens or written past its minute.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TokenMinuteDoc {
    pub token: String,
    pub minute: i64,
    pub requests: u32,
}

impl Doc for TokenMinuteDoc {
    const COLLECTION: &'static str = "token_minutes";
    fn doc_id(&self) -> String {
        format!("{}:{}", self.token, self.minute)
    }
}

mapi_domain::wire_enum!(
    /// How an audited action ended.
    Outcome {
        Success => "success",
        Denied => "denied",
        Failed => "failed",
    }
);

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
    #[schema(value_type = String)]
    pub outcome: Outcome,
    /// The problem code answered, when refused or failed.
    pub problem: Option<String>,
    pub detail: Option<String>,
    pub ip_hash: Option<String>,
    pub user_agent_hash: Option<String>,
}

impl Doc for AuditDoc {
    const COLLECTION: &'static str = "audit";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

/// An uploaded dataset.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DatasetDoc {
    pub id: DatasetId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    /// The object key in the data bucket.
    pub object: String,
    pub generation: i64,
    pub size: u64,
    pub rows: usize,
    pub columns: Vec<String>,
    pub numeric_columns: Vec<String>,
    pub created_at: Timestamp,
    pub created_by: UserId,
}

impl Doc for DatasetDoc {
    const COLLECTION: &'static str = "datasets";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

/// One attempt: the intent row the dispatcher writes before it calls the
/// executor. Id: `{run}:{attempt}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AttemptDoc {
    pub run: RunId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub attempt: AttemptNo,
    pub nonce: Nonce,
    pub class: ResourceClass,
    pub task_count: u32,
    /// The attempt's event-signing key (hex). Only the platform and the
    /// attempt's bootstrap know it.
    pub event_key: String,
    pub created_at: Timestamp,
    /// Until when a dispatcher holds this attempt (extended while it works).
    pub lease_until: Timestamp,
    /// The execution, once the executor named it.
    pub handle: Option<ExecutionHandle>,
    pub submitted_at: Option<Timestamp>,
    /// When the executor was first seen reporting the execution finished.
    pub finished_seen_at: Option<Timestamp>,
    pub started: Option<Timestamp>,
    pub finished: Option<Timestamp>,
    pub status: Option<ExecutionStatus>,
    /// The meter has written this attempt's ledger entry and applied its verdict.
    pub finalized: bool,
}

impl AttemptDoc {
    pub fn id_of(run: &RunId, attempt: AttemptNo) -> String {
        format!("{run}:{attempt}")
    }
}

impl Doc for AttemptDoc {
    const COLLECTION: &'static str = "attempts";
    fn doc_id(&self) -> String {
        AttemptDoc::id_of(&self.run, self.attempt)
    }
}

/// The merged events of one attempt. Id: `{run}:{attempt}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ProgressDoc {
    pub run: RunId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub attempt: AttemptNo,
    pub progress: Progress,
    pub updated_at: Timestamp,
}

impl Doc for ProgressDoc {
    const COLLECTION: &'static str = "progress";
    fn doc_id(&self) -> String {
        AttemptDoc::id_of(&self.run, self.attempt)
    }
}

/// Marks one event as applied: `{run}:{attempt}:{seq}`. Created in the same
/// transaction as the progress it changed, so an event applies once.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventSeenDoc {
    pub run: RunId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub attempt: AttemptNo,
    pub seq: u64,
    pub at: Timestamp,
}

impl Doc for EventSeenDoc {
    const COLLECTION: &'static str = "event_seen";
    fn doc_id(&self) -> String {
        format!("{}:{}:{}", self.run, self.attempt, self.seq)
    }
}

/// A model version: the signed bundle of a succeeded run's outputs. Id:
/// [`ModelVersionId::of_run`], created once, in the same commit as the
/// run's `succeeded` transition (the bundle was sealed before that commit),
/// so a run is `succeeded` exactly when its version exists.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelVersionDoc {
    pub id: ModelVersionId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub run: RunId,
    /// The attempt whose outputs were sealed.
    pub attempt: AttemptNo,
    pub method: String,
    /// The bundle's prefix in the data bucket (`…/runs/{run}/bundle`).
    pub bundle: String,
    /// Hex SHA-256 of the signed manifest: the version is exactly that manifest.
    pub manifest_sha256: String,
    /// The key version that signed the manifest.
    pub key_version: String,
    pub artifact_count: u32,
    pub created_at: Timestamp,
}

impl Doc for ModelVersionDoc {
    const COLLECTION: &'static str = "model_versions";
    fn doc_id(&self) -> String {
        self.id.to_string()
    }
}

/// One append-only ledger entry: the charge of one attempt. Id:
/// `{run}:{attempt}`, created once, so a repeated finalization writes nothing.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LedgerEntry {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub run: RunId,
    pub attempt: AttemptNo,
    pub charge: Charge,
    /// The token the run was submitted with, if any.
    #[serde(default)]
    pub token: Option<String>,
    pub at: Timestamp,
}

/// One append-only ledger entry of an item job: the charge of one finished
/// item in one round (class S, one task, the item's duration; the amount is
/// the one counted in the tenant's usage counters). Id:
/// `{job}:{idx}:{round}`, created once in the commit of the item's marker,
/// so a redelivered item writes nothing more. Kept beside [`LedgerEntry`]
/// (which stays the charge of one run attempt) in its own collection.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemLedgerEntry {
    pub tenant: TenantId,
    pub project: ProjectId,
    #[schema(value_type = String)]
    pub job: JobId,
    pub idx: u64,
    pub round: u32,
    pub charge: Charge,
    /// The token the job was submitted with, if any.
    #[serde(default)]
    pub token: Option<String>,
    pub at: Timestamp,
}

impl ItemLedgerEntry {
    /// The entry's id.
    pub fn id_of(job: &JobId, idx: u64, round: u32) -> String {
        format!("{job}:{idx}:{round}")
    }
}

impl Doc for ItemLedgerEntry {
    const COLLECTION: &'static str = "item_ledger";
    fn doc_id(&self) -> String {
        Self::id_of(&self.job, self.idx, self.round)
    }
}

/// A tenant's quota override (operators). Id: the tenant. The limits given
/// replace the tier's; the others fall back to it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QuotaPolicyDoc {
    pub tenant: TenantId,
    pub policy: mapi_quota::Policy,
    pub set_by: UserId,
    pub set_at: Timestamp,
}

impl Doc for QuotaPolicyDoc {
    const COLLECTION: &'static str = "quota_policies";
    fn doc_id(&self) -> String {
        self.tenant.to_string()
    }
}

/// The platform's kill switches. One document: `kill_switches/global`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KillSwitchDoc {
    pub switches: mapi_quota::KillSwitches,
    pub reason: String,
    pub set_by: UserId,
    pub set_at: Timestamp,
}

impl KillSwitchDoc {
    pub const ID: &'static str = "global";
}

impl Doc for KillSwitchDoc {
    const COLLECTION: &'static str = "kill_switches";
    fn doc_id(&self) -> String {
        KillSwitchDoc::ID.to_owned()
    }
}

impl Doc for LedgerEntry {
    const COLLECTION: &'static str = "ledger";
    fn doc_id(&self) -> String {
        AttemptDoc::id_of(&self.run, self.attempt)
    }
}

/// An `Idempotency-Key` seen on a submit. Id: hex SHA-256 of
/// `{tenant}:{project}:{key}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyDoc {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub run: RunId,
    /// Hex SHA-256 of the request body, to refuse a reused key with another request.
    pub request_hash: String,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
}

impl Doc for IdempotencyDoc {
    const COLLECTION: &'static str = "idempotency";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

/// The reconcile tick's lease: one tick works at a time. Each taker bumps
/// `token` (the fencing token); a holder that finds another token has been
/// fenced out and stops. `cursor` is where the next tick resumes its sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TickLeaseDoc {
    pub holder: String,
    pub token: u64,
    pub until: Timestamp,
    /// The page token of the last run the sweep reached.
    pub cursor: Option<String>,
}

impl TickLeaseDoc {
    pub const ID: &'static str = "reconcile-tick";
}

impl Doc for TickLeaseDoc {
    const COLLECTION: &'static str = "leases";
    fn doc_id(&self) -> String {
        TickLeaseDoc::ID.to_owned()
    }
}

/// An executor's operator switch and recorded evidence. Id: the
/// executor's name (`cloudrun-jobs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorDoc {
    pub name: String,
    /// The operators' switch (incident containment): a disabled executor
    /// takes no new attempts. Never the evidence gate's switch.
    pub enabled: bool,
    pub reason: Option<String>,
    pub set_by: Option<UserId>,
    pub set_at: Option<Timestamp>,
    pub evidence: Option<mapi_executor::evidence::Evidence>,
    pub evidence_recorded_by: Option<UserId>,
    pub evidence_recorded_at: Option<Timestamp>,
}

impl ExecutorDoc {
    /// The record of an executor nobody has switched or given evidence for.
    pub fn fresh(name: &str) -> ExecutorDoc {
        ExecutorDoc {
            name: name.to_owned(),
            enabled: true,
            reason: None,
            set_by: None,
            set_at: None,
            evidence: None,
            evidence_recorded_by: None,
            evidence_recorded_at: None,
        }
    }
}

impl Doc for ExecutorDoc {
    const COLLECTION: &'static str = "executors";
    fn doc_id(&self) -> String {
        self.name.clone()
    }
}

impl From<&crate::ModelVersionDoc> for mapi_api::views::ModelVersionSummary {
    fn from(v: &crate::ModelVersionDoc) -> Self {
        mapi_api::views::ModelVersionSummary {
            id: v.id.clone(),
            run: v.run.clone(),
            method: v.method.clone(),
            artifact_count: v.artifact_count,
            manifest_sha256: v.manifest_sha256.clone(),
            created_at: v.created_at,
        }
    }
}

impl From<&crate::DatasetDoc> for mapi_api::views::DatasetView {
    fn from(d: &crate::DatasetDoc) -> Self {
        mapi_api::views::DatasetView {
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
