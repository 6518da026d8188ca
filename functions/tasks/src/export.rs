//! Builds a tenant's export (`POST /internal/tasks/tenants/export`): every
//! document of the tenant (the tenant's own and every collection of
//! [`OWNED`], less the secrets the API never shows again) as JSON Lines
//! parts of at most [`PAGE`] documents, and every
//! object under `t/{tenant}/` listed with its own signed URL in objects
//! parts, all written under the export's platform-owned prefix
//! (`mapi_schema::export_prefix`); then each part's URL is signed and the
//! export becomes `ready` with its manifest.
//!
//! A redelivery of a finished export does nothing; one of an export still
//! building writes the same parts again (each part is replaced whole). An
//! export of a tenant being deleted stops as `failed`: its data is going.

use std::time::Duration;

use axum::extract::State;
use bytes::Bytes;
use mapi_domain::{TenantId, TenantStatus};
use mapi_identity::InternalCaller;
use mapi_objects::{IfGeneration, ObjectKey, SignedMethod};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json};
use mapi_schema::tasks::ExportTask;
use mapi_schema::{Doc, ExportDoc, ExportPart, ExportState, PartKind, TenantDoc, tx_get, tx_put};
use mapi_store::{Op, Query, transact};

use super::tenant_data::{Fate, OWNED, Owned};

/// Documents (or objects) per part.
pub const PAGE: u32 = 500;

/// How long the parts' URLs work: the longest a V4 signed URL of Cloud
/// Storage may live (7 days).
pub const URL_TTL: Duration = Duration::from_secs(7 * 86_400);

pub async fn handle(
    State(state): State<AppState>,
    _internal: InternalCaller,
    Json(task): Json<ExportTask>,
) -> Result<Json<Option<ExportDoc>>, ApiError> {
    let Some(export) = mapi_schema::get::<ExportDoc>(&*state.store, &task.export).await? else {
        // The export is gone (its tenant was purged): nothing to build.
        return Ok(Json(None));
    };
    if export.state != ExportState::Building || export.tenant != task.tenant {
        return Ok(Json(Some(export)));
    }
    let tenant = mapi_schema::get::<TenantDoc>(&*state.store, task.tenant.as_str()).await?;
    let built = match tenant {
        Some(t) if t.status != TenantStatus::Deleting => Ok(build(&state, &export).await?),
        _ => Err("the tenant is being deleted: its data is no longer exported".to_owned()),
    };
    Ok(Json(Some(finish(&state, &export.id, built).await?)))
}

/// The parts of an export, written and signed.
struct Built {
    parts: Vec<ExportPart>,
    documents: u64,
    objects: u64,
    /// What the export's links can send: its parts and the objects they list.
    bytes: u64,
}

async fn build(state: &AppState, export: &ExportDoc) -> Result<Built, ApiError> {
    let dir = format!("{}{}", mapi_schema::export_prefix(&export.tenant), export.id);
    let mut built = Built { parts: Vec::new(), documents: 0, objects: 0, bytes: 0 };
    let tenant_doc = mapi_schema::key::<TenantDoc>(export.tenant.as_str())?;
    let own: Vec<_> = state.store.get(&[tenant_doc], None).await?.into_iter().flatten().collect();
    let tenant_doc = Owned { collection: TenantDoc::COLLECTION, fate: Fate::Keep, secret_fields: &[] };
    add_documents(state, &dir, &mut built, &tenant_doc, 0, &own).await?;
    for owned in OWNED {
        let query = Query::new(owned.collection).filter("tenant", Op::Eq, export.tenant.as_str());
        let (mut token, mut n) = (None::<String>, 0);
        loop {
            let (docs, next) = query.page(&*state.store, PAGE, token.as_deref()).await?;
            add_documents(state, &dir, &mut built, owned, n, &docs).await?;
            n += 1;
            match next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
    }
    add_objects(state, &dir, &mut built, &export.tenant).await?;
    Ok(built)
}

async fn add_documents(
    state: &AppState,
    dir: &str,
    built: &mut Built,
    owned: &Owned,
    n: u32,
    docs: &[mapi_store::Document],
) -> Result<(), ApiError> {
    if docs.is_empty() {
        return Ok(());
    }
    let collection = owned.collection;
    let mut lines = String::new();
    for d in docs {
        let mut fields = d.fields.clone();
        for secret in owned.secret_fields {
            fields.remove(*secret);
        }
        let line = serde_json::json!({"collection": collection, "id": d.key.id(), "fields": fields});
        lines.push_str(&line.to_string());
        lines.push('\n');
    }
    let name = format!("documents/{collection}-{n:04}.jsonl");
    built.documents += docs.len() as u64;
    write_part(state, dir, built, name, PartKind::Documents, docs.len() as u64, lines).await
}

async fn add_objects(
    state: &AppState,
    dir: &str,
    built: &mut Built,
    tenant: &TenantId,
) -> Result<(), ApiError> {
    let (mut token, mut n) = (None::<String>, 0);
    loop {
        let page = state.objects.list(&format!("t/{tenant}/"), token.as_deref(), PAGE).await?;
        let mut lines = String::new();
        for o in &page.objects {
            built.bytes = built.bytes.saturating_add(o.size);
            let url = state.objects.signed_url(SignedMethod::Get, &o.key, URL_TTL).await?;
            let line = serde_json::json!({
                "key": o.key.as_str(), "size": o.size, "content_type": o.content_type, "url": url,
            });
            lines.push_str(&line.to_string());
            lines.push('\n');
        }
        if !page.objects.is_empty() {
            let count = page.objects.len() as u64;
            built.objects += count;
            let name = format!("objects/objects-{n:04}.jsonl");
            write_part(state, dir, built, name, PartKind::Objects, count, lines).await?;
            n += 1;
        }
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return Ok(()),
        }
    }
}

async fn write_part(
    state: &AppState,
    dir: &str,
    built: &mut Built,
    name: String,
    kind: PartKind,
    count: u64,
    lines: String,
) -> Result<(), ApiError> {
    let key = ObjectKey::parse(&format!("{dir}/{name}"))?;
    let size = lines.len() as u64;
    state.objects.put(&key, Bytes::from(lines), "application/x-ndjson", IfGeneration::Any).await?;
    let url = state.objects.signed_url(SignedMethod::Get, &key, URL_TTL).await?;
    built.bytes = built.bytes.saturating_add(size);
    built.parts.push(ExportPart { name, kind, count, size, url });
    Ok(())
}

/// Records the result, if the export is still building (a concurrent
/// delivery may have finished it first: its result stands).
async fn finish(state: &AppState, id: &str, built: Result<Built, String>) -> Result<ExportDoc, ApiError> {
    let now = state.clock.now();
    let built = &built;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut export = tx_get::<ExportDoc>(&mut tx, id)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("export {id} not found")))?;
        if export.state != ExportState::Building {
            return Ok(tx.finish(export));
        }
        match built {
            Ok(b) => {
                export.state = ExportState::Ready;
                export.parts.clone_from(&b.parts);
                (export.documents, export.objects) = (b.documents, b.objects);
                export.expires_at = Some(now + URL_TTL);
                // The tenant's egress: counted once, with the links; never
                // refused (a tenant may always take its data out).
                mapi_metering::egress(&export.tenant, b.bytes, &export.id, now).apply(&mut tx)?;
            }
            Err(why) => {
                export.state = ExportState::Failed;
                export.error = Some(why.clone());
            }
        }
        export.finished_at = Some(now);
        tx_put(&mut tx, &export)?;
        Ok(tx.finish(export))
    })
    .await
}
