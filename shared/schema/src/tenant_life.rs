//! The end of a tenant's life, as documents: its exports (a bundle of its
//! documents and objects, with signed download URLs) and its deletion (a
//! request with a grace period, then a purge that records its progress here
//! and ends as the deletion certificate).

use std::collections::BTreeMap;

use mapi_domain::{TenantId, TenantStatus, Timestamp, UserId};
use serde::{Deserialize, Serialize};

use crate::Doc;

mapi_domain::wire_enum!(
    /// Where an export is.
    ExportState {
        /// The export task is writing its parts.
        Building => "building",
        /// Every part is written and its URL signed.
        Ready => "ready",
        /// The task gave up; `error` says why.
        Failed => "failed",
    }
);

mapi_domain::wire_enum!(
    /// What a part of an export holds.
    PartKind {
        /// JSON Lines: one document a line (`collection`, `id`, `fields`).
        Documents => "documents",
        /// JSON Lines: one object of the tenant a line (`key`, `size`,
        /// `content_type`, `url`: a signed download URL of the object itself).
        Objects => "objects",
    }
);

/// One downloadable part of an export.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExportPart {
    pub name: String,
    pub kind: PartKind,
    /// The lines (documents or objects) it holds.
    pub count: u64,
    pub size: u64,
    /// A signed GET URL, valid until the export's `expires_at`.
    pub url: String,
}

/// A tenant's export. Id: the export id (`exp_…`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExportDoc {
    pub id: String,
    pub tenant: TenantId,
    pub state: ExportState,
    pub requested_by: UserId,
    pub requested_at: Timestamp,
    pub finished_at: Option<Timestamp>,
    /// When the parts' URLs stop working.
    pub expires_at: Option<Timestamp>,
    /// The manifest: every part, in order.
    pub parts: Vec<ExportPart>,
    /// How many documents and objects the parts list.
    pub documents: u64,
    pub objects: u64,
    pub error: Option<String>,
}

impl Doc for ExportDoc {
    const COLLECTION: &'static str = "tenant_exports";
    fn doc_id(&self) -> String {
        self.id.clone()
    }
}

/// The prefix of an export's parts in the data bucket: `exports/{tenant}/{export}/`.
///
/// Platform-owned, outside the tenant's own `t/{tenant}/`: an export lists
/// every object under `t/{tenant}/`, so parts written there would be
/// exported again by the next export, counted as the tenant's data, and
/// deleted by the purge's pass over the tenant's objects while an export
/// still lists them. The purge deletes this prefix in a step of its own.
pub fn export_prefix(tenant: &TenantId) -> String {
    format!("exports/{tenant}/")
}

mapi_domain::wire_enum!(
    /// Where a tenant's deletion is.
    DeletionState {
        /// Requested; the tenant is `deleting` and may be given back until `purge_after`.
        Scheduled => "scheduled",
        /// The purge has started (it cannot be cancelled any more).
        Purging => "purging",
        /// Everything is deleted: the document is the deletion certificate.
        Purged => "purged",
        /// Cancelled within the grace period: the tenant has its previous status back.
        Cancelled => "cancelled",
    }
);

/// How far a purge has got: the step of the plan it is in; in a step that
/// pages by cursor, the last id done; in a step over objects, the page of
/// keys being deleted (recorded before they are, counted after).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PurgeProgress {
    pub step: u32,
    pub cursor: Option<String>,
    #[serde(default)]
    pub pending: Vec<String>,
}

/// A tenant's deletion: the request, the purge's progress and, once
/// purged, the certificate. Id: the tenant (a tenant is deleted once; a
/// cancelled request is replaced by the next one).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeletionDoc {
    pub tenant: TenantId,
    pub state: DeletionState,
    /// The tenant admin who asked (kept in the certificate: whose request it was).
    pub requested_by: UserId,
    pub requested_at: Timestamp,
    pub reason: String,
    /// The end of the grace period: the purge may start from then on.
    pub purge_after: Timestamp,
    /// The status the tenant had before, given back by a cancel.
    pub previous_status: TenantStatus,
    pub cancelled_at: Option<Timestamp>,
    pub cancelled_by: Option<UserId>,
    pub purge_started_at: Option<Timestamp>,
    pub purged_at: Option<Timestamp>,
    pub progress: PurgeProgress,
    /// Deleted, per collection, and `objects` (the data bucket's objects).
    pub deleted: BTreeMap<String, u64>,
    /// Kept for operators, per collection (ledger entries as they are,
    /// audit entries with every e-mail replaced by a pseudonym).
    pub kept: BTreeMap<String, u64>,
    /// Deliveries of the purge task that did some of it.
    pub purge_runs: u32,
    /// The last failure of a purge delivery, cleared when one finishes.
    pub last_error: Option<String>,
}

impl Doc for DeletionDoc {
    const COLLECTION: &'static str = "tenant_deletions";
    fn doc_id(&self) -> String {
        self.tenant.to_string()
    }
}
