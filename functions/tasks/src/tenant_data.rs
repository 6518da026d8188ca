//! What a tenant owns in the store, collection by collection, and what its
//! deletion does with each: the one list the export and the purge read.
//!
//! A collection is the tenant's when its documents carry `tenant`; a few
//! are named by id instead (usage counters `tenant:{tenant}…` and
//! `token:{token}@…`, token minutes `{token}:…`, a job's count shards
//! `{job}:…`), and the purge reaches those through what they count. The
//! platform's own documents (kill switches, the tick's lease, executors),
//! people's sign-in records (`users`, console sessions and logins: a person
//! may belong to other tenants) and the tenant's tombstone and deletion
//! certificate are not the tenant's data.

/// What the purge does with a collection's documents of the tenant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Deleted.
    Delete,
    /// Kept as they are: the ledgers name tokens by public id, never a person.
    Keep,
    /// Kept with every e-mail in them replaced by a stable pseudonym: the audit log.
    Anonymize,
}

/// One collection of tenant documents (each has a `tenant` field).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owned {
    pub collection: &'static str,
    pub fate: Fate,
    /// Fields an export leaves out: secrets the API never shows again
    /// (a webhook's signing secrets are shown once, at creation and rotation).
    pub secret_fields: &'static [&'static str],
}

const fn delete(collection: &'static str) -> Owned {
    Owned { collection, fate: Fate::Delete, secret_fields: &[] }
}

const fn keep(collection: &'static str, fate: Fate) -> Owned {
    Owned { collection, fate, secret_fields: &[] }
}

/// Every collection whose documents name their tenant, in the order the
/// purge takes them: the work (runs and what hangs off them, jobs, endpoints)
/// before the people's grants, so nothing is left that points at a
/// deleted grant; the kept entries last.
pub const OWNED: &[Owned] = &[
    delete("workflow_runs"),
    delete("workflows"),
    delete("workflow_versions"),
    delete("runs"),
    delete("run_logs"),
    delete("attempts"),
    delete("progress"),
    delete("event_seen"),
    delete("validations"),
    delete("model_versions"),
    delete("datasets"),
    delete("idempotency"),
    delete("jobs"),
    delete("job_items"),
    delete("job_item_history"),
    delete("endpoints"),
    delete("endpoint_stats"),
    delete("instance_watermarks"),
    delete("webhook_deliveries"),
    Owned { collection: "webhooks", fate: Fate::Delete, secret_fields: &["secret", "previous_secret"] },
    delete("experiments"),
    delete("run_views"),
    delete("plugins"),
    delete("tenant_exports"),
    delete("quota_policies"),
    delete("governance_policies"),
    delete("tokens"),
    delete("memberships"),
    delete("projects"),
    keep("ledger", Fate::Keep),
    keep("item_ledger", Fate::Keep),
    keep("item_ledger_minutes", Fate::Keep),
    keep("score_ledger", Fate::Keep),
    keep("instance_ledger", Fate::Keep),
    keep("audit", Fate::Anonymize),
];

/// A stable pseudonym for an e-mail, from its keyed hash: the same person
/// gets the same pseudonym in every entry, and it does not give the e-mail
/// back. E-mail shaped, so the audit log's `actor` stays a valid user id.
pub fn pseudonym(hash_hex: &str) -> String {
    let short: String = hash_hex.chars().take(8).collect();
    format!("deleted-user-{short}@deleted.invalid")
}

/// `text` with every e-mail address in it replaced by `pseudonym(email)`.
pub fn without_emails(text: &str, pseudonym: &dyn Fn(&str) -> String) -> String {
    let is_part = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '+' | '-' | '%');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('@') {
        let start = rest[..at].rfind(|c: char| !is_part(c)).map_or(0, |i| i + 1);
        let end = rest[at + 1..].find(|c: char| !is_part(c)).map_or(rest.len(), |i| at + 1 + i);
        let (local, domain) = (&rest[start..at], rest[at + 1..end].trim_end_matches('.'));
        let end = at + 1 + domain.len();
        out.push_str(&rest[..start]);
        if local.is_empty() || !domain.contains('.') {
            out.push_str(&rest[start..=at]);
            rest = &rest[at + 1..];
            continue;
        }
        out.push_str(&pseudonym(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use mapi_schema::Doc;

    use super::*;

    #[test]
    fn every_collection_of_tenant_data_is_listed_once_and_the_platforms_are_not() {
        let tenant_docs = [
            mapi_schema::WorkflowRunDoc::COLLECTION,
            mapi_schema::WorkflowDoc::COLLECTION,
            mapi_schema::WorkflowVersionDoc::COLLECTION,
            mapi_lifecycle::RunDoc::COLLECTION,
            mapi_schema::RunLogDoc::COLLECTION,
            mapi_schema::AttemptDoc::COLLECTION,
            mapi_schema::ProgressDoc::COLLECTION,
            mapi_schema::EventSeenDoc::COLLECTION,
            mapi_schema::ValidationDoc::COLLECTION,
            mapi_schema::ModelVersionDoc::COLLECTION,
            mapi_schema::DatasetDoc::COLLECTION,
            mapi_schema::IdempotencyDoc::COLLECTION,
            mapi_jobs::JobDoc::COLLECTION,
            mapi_jobs::JobItemDoc::COLLECTION,
            mapi_jobs::JobItemHistoryDoc::COLLECTION,
            mapi_endpoints::EndpointDoc::COLLECTION,
            mapi_endpoints::stats::StatsDoc::COLLECTION,
            mapi_schema::InstanceWatermark::COLLECTION,
            mapi_schema::DeliveryDoc::COLLECTION,
            mapi_schema::WebhookDoc::COLLECTION,
            mapi_schema::ExperimentDoc::COLLECTION,
            mapi_schema::RunViewDoc::COLLECTION,
            mapi_schema::PluginDoc::COLLECTION,
            mapi_schema::ExportDoc::COLLECTION,
            mapi_schema::QuotaPolicyDoc::COLLECTION,
            mapi_schema::PolicyDoc::COLLECTION,
            mapi_schema::TokenDoc::COLLECTION,
            mapi_schema::MembershipDoc::COLLECTION,
            mapi_schema::ProjectDoc::COLLECTION,
            mapi_schema::LedgerEntry::COLLECTION,
            mapi_schema::ItemLedgerEntry::COLLECTION,
            mapi_schema::ItemLedgerMinute::COLLECTION,
            mapi_schema::ScoreLedgerEntry::COLLECTION,
            mapi_schema::InstanceLedgerEntry::COLLECTION,
            mapi_schema::AuditDoc::COLLECTION,
        ];
        let listed: Vec<&str> = OWNED.iter().map(|o| o.collection).collect();
        assert_eq!(listed, tenant_docs, "the purge's order, by hand");
        let kept: Vec<&str> = OWNED.iter().filter(|o| o.fate != Fate::Delete).map(|o| o.collection).collect();
        assert_eq!(
            kept,
            ["ledger", "item_ledger", "item_ledger_minutes", "score_ledger", "instance_ledger", "audit"]
        );
        for platform in [
            mapi_schema::TenantDoc::COLLECTION,
            mapi_schema::DeletionDoc::COLLECTION,
            mapi_schema::UserDoc::COLLECTION,
            mapi_schema::KillSwitchDoc::COLLECTION,
        ] {
            assert!(!listed.contains(&platform), "{platform} is not the tenant's data");
        }
    }

    #[test]
    fn emails_in_text_become_their_pseudonyms_and_nothing_else_changes() {
        let p = |e: &str| format!("<{}>", e.len());
        assert_eq!(
            without_emails("member alice@acme.test added by bob.x+1@b.example.", &p),
            "member <15> added by <17>."
        );
        assert_eq!(without_emails("members/carol@acme.test", &p), "members/<15>");
        assert_eq!(without_emails("no e-mail @ here, a@b", &p), "no e-mail @ here, a@b");
        assert_eq!(pseudonym("0123456789abcdef"), "deleted-user-01234567@deleted.invalid");
    }
}
