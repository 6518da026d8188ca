//! The platform's documents (but the run's), by domain, and their indexes.
//!
//! Every document names its tenant and project. Each type knows its
//! collection and key ([`Doc`], from the store's typed layer); [`INDEXES`]
//! lists every composite index the platform's queries need (the SQLite
//! adapter creates them; the Firestore deploy applies the same list).
//!
//! - [`tenancy`]: tenants, projects, people, memberships, tokens, quota policies;
//! - [`runs`]: attempts, progress, events seen, datasets, model versions,
//!   ledgers, idempotency keys;
//! - [`ops`]: kill switches, the tick's lease, executors;
//! - [`audit`]: the audit log; [`webhooks`]: webhooks and their messages;
//! - [`experiments`]: experiments and saved views of the runs table;
//! - [`governance`]: policies and validations; [`workflows`]: workflows, their versions and runs;
//! - [`tenant_life`]: a tenant's exports and its deletion (the certificate);
//! - [`usage`]: the ledgers summed per day, written with each ledger change;
//! - [`layout`]: where objects live; [`tasks`]: the queue's task bodies.
//!
//! The run document itself and every change of its state live in
//! `mapi-lifecycle`; usage counters live with admission in `mapi-quota`.

pub mod audit;
pub mod experiments;
pub mod governance;
pub mod layout;
pub mod ops;
pub mod plugins;
pub mod runs;
pub mod tasks;
pub mod tenancy;
pub mod tenant_life;
pub mod usage;
pub mod webhooks;
pub mod workflows;

pub use audit::*;
pub use experiments::*;
pub use governance::*;
pub use mapi_store::typed::{Doc, decode, get, key, put, tx_create, tx_get, tx_put};
pub use ops::*;
pub use plugins::*;
pub use runs::*;
pub use tenancy::*;
pub use tenant_life::*;
pub use webhooks::*;
pub use workflows::*;

/// The queue that dispatches attempts (handled by `submit`).
pub const DISPATCH_QUEUE: &str = "dispatch";
/// The queue that finalizes attempts (handled by `meter`).
pub const FINALIZE_QUEUE: &str = "finalize";
/// The queue that delivers webhook messages (handled by `submit`).
pub const WEBHOOKS_QUEUE: &str = "webhooks";
pub use tasks::{EXPORT_QUEUE, PURGE_QUEUE, TICK_QUEUE, WORKFLOWS_QUEUE};

use mapi_store::{Direction, Index, StoreError};

/// The documents of type `T` that belong to `run`, by attempt (attempts,
/// ledger entries).
pub async fn of_run<T: Doc>(
    store: &dyn mapi_store::Store,
    run: &mapi_domain::RunId,
) -> Result<Vec<T>, StoreError> {
    let q = mapi_store::Query::new(T::COLLECTION)
        .filter("run", mapi_store::Op::Eq, run.as_str())
        .order_by("attempt", Direction::Asc);
    store.query(&q, None).await?.iter().map(|d| d.decode()).collect()
}

/// Every composite index the platform's queries use.
pub const INDEXES: &[Index] = &[
    // Model versions of a project, newest first.
    Index {
        collection: ModelVersionDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("created_at", Direction::Desc)],
    },
    // Datasets of a project, newest first.
    Index {
        collection: DatasetDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("created_at", Direction::Desc)],
    },
    // Memberships of a person in a tenant; and of a tenant or project.
    Index {
        collection: MembershipDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("email", Direction::Asc)],
    },
    Index {
        collection: MembershipDoc::COLLECTION,
        fields: &[("email", Direction::Asc), ("claimed", Direction::Asc)],
    },
    Index {
        collection: MembershipDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc)],
    },
    // Tokens of a project, and of a person in it.
    Index {
        collection: TokenDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("user", Direction::Asc)],
    },
    // Projects of a tenant.
    Index {
        collection: ProjectDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc)],
    },
    // The audit log, newest first: of everything, and filtered by any mix
    // of tenant, project, actor, action and outcome (`functions/admin`'s
    // audit_log). One index per filter field, each ending in `at desc`:
    // Firestore merges them for a query with several equality filters, so
    // five indexes serve all 31 mixes (with or without a time range on `at`).
    Index { collection: AuditDoc::COLLECTION, fields: &[("at", Direction::Desc)] },
    // Datasets by upload, of every tenant and of one (the housekeeper deletes those past their
    // retention).
    Index { collection: DatasetDoc::COLLECTION, fields: &[("created_at", Direction::Asc)] },
    Index {
        collection: DatasetDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("created_at", Direction::Asc)],
    },
    // Model versions whose bytes exist, oldest first, of every tenant and of one (the run
    // housekeeper expires those past their retention that serve no endpoint).
    Index { collection: ModelVersionDoc::COLLECTION, fields: &[("bytes_since", Direction::Asc)] },
    Index {
        collection: ModelVersionDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("bytes_since", Direction::Asc)],
    },
    // Audit entries by age, oldest first, of every tenant and of one (the housekeeper deletes
    // those past their retention).
    Index { collection: AuditDoc::COLLECTION, fields: &[("at", Direction::Asc)] },
    Index { collection: AuditDoc::COLLECTION, fields: &[("tenant", Direction::Asc), ("at", Direction::Asc)] },
    Index {
        collection: AuditDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("at", Direction::Desc)],
    },
    Index {
        collection: AuditDoc::COLLECTION,
        fields: &[("project", Direction::Asc), ("at", Direction::Desc)],
    },
    Index { collection: AuditDoc::COLLECTION, fields: &[("actor", Direction::Asc), ("at", Direction::Desc)] },
    Index {
        collection: AuditDoc::COLLECTION,
        fields: &[("action", Direction::Asc), ("at", Direction::Desc)],
    },
    Index {
        collection: AuditDoc::COLLECTION,
        fields: &[("outcome", Direction::Asc), ("at", Direction::Desc)],
    },
    // Ledger entries of a tenant, or of one of its projects, in a period.
    Index {
        collection: LedgerEntry::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("at", Direction::Asc)],
    },
    Index {
        collection: LedgerEntry::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("at", Direction::Asc)],
    },
    // Item jobs' ledger entries of a tenant, or of one of its projects, in a period.
    Index {
        collection: ItemLedgerEntry::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("at", Direction::Asc)],
    },
    Index {
        collection: ItemLedgerEntry::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("at", Direction::Asc)],
    },
    // Endpoints' scores of a tenant, or of one of its projects, in a period.
    Index {
        collection: ScoreLedgerEntry::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("at", Direction::Asc)],
    },
    Index {
        collection: ScoreLedgerEntry::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("at", Direction::Asc)],
    },
    // A project's datasets of one name, newest first (a workflow node's dataset by name).
    Index {
        collection: DatasetDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("name", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    // Datasets of a tenant (storage).
    Index {
        collection: DatasetDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("created_at", Direction::Asc)],
    },
    // Ledger entries of a run.
    Index {
        collection: LedgerEntry::COLLECTION,
        fields: &[("run", Direction::Asc), ("attempt", Direction::Asc)],
    },
    // Attempts of a run.
    Index {
        collection: AttemptDoc::COLLECTION,
        fields: &[("run", Direction::Asc), ("attempt", Direction::Asc)],
    },
    // Webhooks of a project, newest first; enabled ones, least recently
    // swept first (the emission sweep).
    Index {
        collection: WebhookDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("created_at", Direction::Desc)],
    },
    Index {
        collection: WebhookDoc::COLLECTION,
        fields: &[("enabled", Direction::Asc), ("cursor", Direction::Asc)],
    },
    // Pending messages by when their next attempt is due (lost pushes).
    Index {
        collection: DeliveryDoc::COLLECTION,
        fields: &[("state", Direction::Asc), ("next_at", Direction::Asc)],
    },
    // A project's endpoints by when they last changed (the webhooks' sweep;
    // `mapi_endpoints::EndpointDoc`, whose crate depends on this one).
    Index {
        collection: "endpoints",
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("updated_at", Direction::Asc)],
    },
    // A project's experiments and saved views, by name.
    Index {
        collection: ExperimentDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("name", Direction::Asc)],
    },
    Index {
        collection: RunViewDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("name", Direction::Asc)],
    },
    // A project's plugin versions, by plugin name (and one plugin's).
    Index {
        collection: PluginDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("name", Direction::Asc)],
    },
    // Webhook messages by age, of every tenant and of one (the housekeeper deletes those past
    // their retention).
    Index { collection: DeliveryDoc::COLLECTION, fields: &[("created_at", Direction::Asc)] },
    Index {
        collection: DeliveryDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("created_at", Direction::Asc)],
    },
    // A project's workflows by name; a project's workflow runs (and one workflow's), newest first.
    Index {
        collection: WorkflowDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("name", Direction::Asc)],
    },
    Index {
        collection: WorkflowRunDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("created_at", Direction::Desc)],
    },
    // A project's workflow runs and validations by when they ended (the webhooks' sweep).
    Index {
        collection: WorkflowRunDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("run.ended_at", Direction::Asc)],
    },
    Index {
        collection: ValidationDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("decided_at", Direction::Asc)],
    },
    // Active workflow runs, oldest first (the tick's sweep).
    Index {
        collection: WorkflowRunDoc::COLLECTION,
        fields: &[("active", Direction::Asc), ("created_at", Direction::Asc)],
    },
    Index {
        collection: WorkflowRunDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("workflow", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    // A webhook's delivery log, newest first.
    Index {
        collection: DeliveryDoc::COLLECTION,
        fields: &[("webhook", Direction::Asc), ("created_at", Direction::Desc)],
    },
];
