//! Runs' documents but the run itself (which lives with its lifecycle):
//! attempts, progress, events seen, datasets, model versions, ledgers and
//! idempotency keys. Ids are chosen so no document is hot: one attempt,
//! one progress record, one ledger entry each.

use mapi_cost::Charge;
use mapi_domain::{
    AttemptNo, DatasetId, ExecutionStatus, JobId, ModelVersionId, Nonce, ProjectId, ResourceClass, RunId,
    TenantId, Timestamp, UserId,
};
use mapi_events::progress::Progress;
use mapi_executor::ExecutionHandle;
use serde::{Deserialize, Serialize};

use crate::Doc;

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
    /// When every task's bootstrap had been written. From then on a missing
    /// bootstrap was taken by a worker (which may not be listed yet), so it
    /// is never written again: a second copy would let a second execution
    /// do the same work.
    #[serde(default)]
    pub bootstrapped_at: Option<Timestamp>,
    /// Set when the meter found the attempt's work taken (a bootstrap
    /// gone) with none of its events heard: the execution that took it
    /// has not spoken yet, so its events are waited for (up to a bound)
    /// before the attempt is finalized on the recorded execution's report.
    #[serde(default)]
    pub taken_unheard: Option<TakenUnheard>,
    /// When a finalization began retiring the bootstraps of an attempt
    /// never heard from: for a short lease a concurrent delivery waits
    /// rather than take the first one's deletions for a worker's take.
    #[serde(default)]
    pub retiring_at: Option<Timestamp>,
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
    /// For a fan-out parent: the children whose tasks took the results they
    /// wrote in an earlier attempt (or in the run this one retries) instead
    /// of running the method again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reused: Vec<u32>,
    /// The accelerators each task of the attempt gets, settled at placement
    /// (`None` on rows written before it was recorded: the class's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<u32>,
}

/// The meter's wait for the execution that took an attempt's work.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TakenUnheard {
    /// When the bootstraps were found taken.
    pub found_at: Timestamp,
    /// When a delivery first found the wait over; the attempt is
    /// finalized one event grace after it.
    #[serde(default)]
    pub last_call_at: Option<Timestamp>,
}

impl AttemptDoc {
    pub fn id_of(run: &RunId, attempt: AttemptNo) -> String {
        format!("{run}:{attempt}")
    }

    /// The accelerators each task gets: as placed, else the class's.
    pub fn gpus(&self) -> u32 {
        self.gpus.unwrap_or_else(|| self.class.gpus())
    }
}

impl Doc for AttemptDoc {
    const COLLECTION: &'static str = "attempts";
    fn doc_id(&self) -> String {
        AttemptDoc::id_of(&self.run, self.attempt)
    }
}

/// What people logged to a run (metrics, params), bounded by
/// [`mapi_api::tracking`]. Id: the run's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunLogDoc {
    pub run: RunId,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub log: mapi_api::tracking::RunLog,
    pub updated_at: Timestamp,
}

impl Doc for RunLogDoc {
    const COLLECTION: &'static str = "run_logs";
    fn doc_id(&self) -> String {
        self.run.to_string()
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
    /// When the housekeeper deleted the version's bytes (its bundle and
    /// the outputs it seals) because it served no endpoint past its
    /// tenant's model-version retention. The record stays and says so; the
    /// version can no longer be served, read or downloaded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_at: Option<Timestamp>,
    /// When the version was sealed, as long as its bytes exist: the
    /// housekeeper's query finds it by this field, which is removed when
    /// they expire (so an expired version is never looked at again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_since: Option<Timestamp>,
    /// Set by an admin: the version may no longer be promoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deprecated: Option<crate::Deprecation>,
}

impl ModelVersionDoc {
    /// Why the version's bytes are gone, in words, once it expired.
    pub fn expiry(&self) -> Option<String> {
        self.expired_at.map(|at| {
            format!(
                "model version {} expired on {}: its bundle and outputs were deleted past its tenant's model-version retention while it served no endpoint; fit again, or use a newer version",
                self.id,
                at.to_rfc3339()
            )
        })
    }
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

/// The charge of one finished item in one round (class S, one task, the
/// item's duration; the amount is the one counted in the tenant's usage
/// counters). Items are charged in their minute's [`ItemLedgerMinute`],
/// in the commit that creates the item's marker (so once per item and
/// round). Stored one document per item (id `{job}:{idx}:{round}`) by
/// deployments before the minutes: those entries stay, and are read for
/// the usage of the time before rollups.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemLedgerEntry {
    pub tenant: TenantId,
    pub project: ProjectId,
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

/// The ledger of item jobs: the charges of one job's items of one round
/// that finished in one UTC minute, spread over [`JOB_SHARDS`]
/// documents by item index, summed (`items` counts them). An item costs
/// its marker and counters, not a document and two index entries of its
/// own: a job of N items adds at most one document per shard and minute.
/// What each item was charged stays in its marker (`cost_micros`,
/// `duration_ms`) for the job's retention.
///
/// Written without a read, so items finishing together never conflict:
/// the constant fields by a merge, the sums by increments (see
/// [`crate::usage::add_item_entry`]). Every item's charge is also counted
/// in the usage rollups of its instant, so usage never reads these; they
/// are kept (through a tenant's deletion, like [`LedgerEntry`]) as the
/// record of what was charged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemLedgerMinute {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub job: JobId,
    pub round: u32,
    /// The token the job was submitted with, if any.
    #[serde(default)]
    pub token: Option<String>,
    /// The minute's start.
    pub at: Timestamp,
    pub shard: u32,
    pub class: ResourceClass,
    pub currency: String,
    pub price_table: String,
    /// The sums, kept by increments (an absent one is 0).
    #[serde(flatten)]
    pub sums: ItemSums,
}

/// The sums of an [`ItemLedgerMinute`]: how many items, and their charges'
/// tasks, times and amount.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ItemSums {
    #[serde(default)]
    pub items: u64,
    #[serde(default)]
    pub tasks: u64,
    #[serde(default)]
    pub wall_ms: u64,
    #[serde(default)]
    pub vcpu_ms: u64,
    #[serde(default)]
    pub gib_ms: u64,
    #[serde(default)]
    pub accelerator_ms: u64,
    #[serde(default)]
    pub amount_micros: i64,
}

impl ItemSums {
    /// The sums' field names.
    pub const FIELDS: [&'static str; 7] =
        ["items", "tasks", "wall_ms", "vcpu_ms", "gib_ms", "accelerator_ms", "amount_micros"];

    /// What one item's charge adds to each field (zeros left out).
    pub fn of(charge: &Charge) -> Vec<(&'static str, i64)> {
        let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let adds = [
            1,
            i64::from(charge.tasks),
            n(charge.wall_ms),
            n(charge.vcpu_ms),
            n(charge.gib_ms),
            n(charge.accelerator_ms),
            charge.amount_micros,
        ];
        Self::FIELDS.into_iter().zip(adds).filter(|(_, v)| *v != 0).collect()
    }
}

/// How many documents a job's per-item writes are spread over, by item
/// index (`idx % JOB_SHARDS`): its counts (Firestore's write rate per
/// document; a read of the counts sums them all) and each minute of its
/// ledger, so items that write one count shard write one ledger document.
pub const JOB_SHARDS: u64 = 8;

impl ItemLedgerMinute {
    /// The minute document `e` adds to, with nothing summed in it.
    pub fn of(e: &ItemLedgerEntry) -> ItemLedgerMinute {
        ItemLedgerMinute {
            tenant: e.tenant.clone(),
            project: e.project.clone(),
            job: e.job.clone(),
            round: e.round,
            token: e.token.clone(),
            at: ScoreLedgerEntry::minute_of(e.at),
            shard: u32::try_from(e.idx % JOB_SHARDS).unwrap_or(0),
            class: e.charge.class,
            currency: e.charge.currency.clone(),
            price_table: e.charge.price_table.clone(),
            sums: ItemSums::default(),
        }
    }
}

impl Doc for ItemLedgerMinute {
    const COLLECTION: &'static str = "item_ledger_minutes";
    /// `{job}:{round}:{minute, epoch seconds}:{price table}:{shard}`.
    fn doc_id(&self) -> String {
        format!("{}:{}:{}:{}:{}", self.job, self.round, self.at.as_secs(), self.price_table, self.shard)
    }
}

impl Doc for ScoreLedgerEntry {
    const COLLECTION: &'static str = "score_ledger";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

/// The ledger of endpoints' idle instance time: one entry per endpoint and
/// window `[from, to)`, for the time its instances were up and serving no
/// score (an instance-billed L4's idle time; its scores charge their own).
/// Created once per window, in the commit that moves the endpoint's
/// [`InstanceWatermark`] to `to`, so a window is never charged twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceLedgerEntry {
    pub tenant: TenantId,
    pub project: ProjectId,
    /// The endpoint's id (`{tenant}:{project}:{alias}`).
    pub endpoint: String,
    pub accelerator: String,
    pub from: Timestamp,
    pub to: Timestamp,
    /// The instances' time up in the window, summed.
    pub instance_ms: u64,
    /// Of it, the time scores took (charged by the scores).
    pub busy_ms: u64,
    /// What this entry charges: `instance_ms - busy_ms`, never below 0.
    pub idle_ms: u64,
    pub price_table: String,
    pub vcpu_ms: u64,
    pub gib_ms: u64,
    pub accelerator_ms: u64,
    pub cost_nanos: u64,
    /// When it was charged.
    pub at: Timestamp,
}

impl Doc for InstanceLedgerEntry {
    const COLLECTION: &'static str = "instance_ledger";
    /// `{endpoint}@{from, epoch milliseconds}`.
    fn doc_id(&self) -> String {
        format!("{}@{}", self.endpoint, self.from.as_millis())
    }
}

/// How far an endpoint's instance time is charged: to `until`, with the
/// busy time its scores had taken by then (their statistics' sum).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceWatermark {
    /// The endpoint's id.
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub until: Timestamp,
    pub busy_ms: u64,
}

impl Doc for InstanceWatermark {
    const COLLECTION: &'static str = "instance_watermarks";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

impl Doc for ItemLedgerEntry {
    const COLLECTION: &'static str = "item_ledger";
    fn doc_id(&self) -> String {
        Self::id_of(&self.job, self.idx, self.round)
    }
}

/// The ledger of model endpoints: the scores of one endpoint in one UTC
/// minute by one token (or by sessions), in one of [`SCORE_LEDGER_SHARDS`]
/// documents so concurrent scores rarely write the same one. Each score adds
/// itself in the commit that counts it in the revision's statistics and
/// the tenant's usage counters, so the ledger, the statistics and the
/// counters agree; amounts stay in nano-units until a report rounds them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ScoreLedgerEntry {
    /// See [`ScoreLedgerEntry::id_of`].
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    pub endpoint: String,
    /// `cpu` (request-billed) or `l4` (instance-billed).
    pub accelerator: String,
    /// The token the scores came with; `None` for sessions.
    pub token: Option<String>,
    /// The minute's start.
    pub at: Timestamp,
    pub price_table: String,
    pub requests: u64,
    pub errors: u64,
    pub billed_ms: u64,
    pub vcpu_ms: u64,
    pub gib_ms: u64,
    pub accelerator_ms: u64,
    pub cost_nanos: u64,
}

/// How many documents one endpoint's scores of one minute and token are spread over.
pub const SCORE_LEDGER_SHARDS: u32 = 4;

impl ScoreLedgerEntry {
    /// The minute `now` is in.
    pub fn minute_of(now: Timestamp) -> Timestamp {
        Timestamp::from_secs(now.as_secs().div_euclid(60) * 60)
    }

    /// An entry with nothing in it yet.
    pub fn empty(
        (tenant, project, endpoint): (&TenantId, &ProjectId, &str),
        accelerator: &str,
        token: Option<&str>,
        now: Timestamp,
        shard: u32,
    ) -> ScoreLedgerEntry {
        let at = ScoreLedgerEntry::minute_of(now);
        let id = format!("{tenant}:{project}:{endpoint}");
        ScoreLedgerEntry {
            id: ScoreLedgerEntry::id_of(&id, at, token, shard),
            tenant: tenant.clone(),
            project: project.clone(),
            endpoint: endpoint.to_owned(),
            accelerator: accelerator.to_owned(),
            token: token.map(str::to_owned),
            at,
            price_table: String::new(),
            requests: 0,
            errors: 0,
            billed_ms: 0,
            vcpu_ms: 0,
            gib_ms: 0,
            accelerator_ms: 0,
            cost_nanos: 0,
        }
    }

    /// Adds one score.
    pub fn add(&mut self, error: bool, charge: &mapi_cost::ScoreCharge, price_table: &str) {
        self.requests += 1;
        self.errors += u64::from(error);
        self.billed_ms += charge.billed_ms;
        self.vcpu_ms += charge.vcpu_ms;
        self.gib_ms += charge.gib_ms;
        self.accelerator_ms += charge.accelerator_ms;
        self.cost_nanos += charge.nanos;
        price_table.clone_into(&mut self.price_table);
    }

    /// The entry's id: `{endpoint id}:{minute, in s}:{token or -}:{shard}`.
    pub fn id_of(endpoint: &str, minute: Timestamp, token: Option<&str>, shard: u32) -> String {
        format!("{endpoint}:{}:{}:{shard}", minute.as_secs(), token.unwrap_or("-"))
    }

    /// Micro-units, rounded half up.
    pub fn cost_micros(&self) -> i64 {
        mapi_cost::nanos_to_micros(self.cost_nanos)
    }
}

impl Doc for LedgerEntry {
    const COLLECTION: &'static str = "ledger";
    fn doc_id(&self) -> String {
        AttemptDoc::id_of(&self.run, self.attempt)
    }
}

/// An `Idempotency-Key` seen on a submit. Id: hex SHA-256 of
/// `{tenant}:{project}:{key}` for a run, `{tenant}:{project}:jobs:{key}`
/// for an item job (a key is the client's, per route).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyDoc {
    pub id: String,
    pub tenant: TenantId,
    pub project: ProjectId,
    /// The run the key made (run submits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run: Option<RunId>,
    /// The job the key made (item job submits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobId>,
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

impl From<&crate::ModelVersionDoc> for mapi_api::views::ModelVersionSummary {
    fn from(v: &crate::ModelVersionDoc) -> Self {
        mapi_api::views::ModelVersionSummary {
            id: v.id.clone(),
            run: v.run.clone(),
            method: v.method.clone(),
            artifact_count: v.artifact_count,
            manifest_sha256: v.manifest_sha256.clone(),
            created_at: v.created_at,
            expired_at: v.expired_at,
        }
    }
}

impl From<&crate::DatasetDoc> for mapi_api::views::DatasetSummary {
    fn from(d: &crate::DatasetDoc) -> Self {
        mapi_api::views::DatasetSummary {
            id: d.id.clone(),
            tenant: d.tenant.clone(),
            project: d.project.clone(),
            name: d.name.clone(),
            size: d.size,
            rows: d.rows,
            column_count: d.columns.len(),
            created_at: d.created_at,
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
