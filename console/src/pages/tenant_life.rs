//! A tenant's export and deletion, for its admins: start an export and
//! watch it until its parts can be downloaded; ask for the tenant's
//! deletion (the tenant's id typed to confirm, and a reason), see when it
//! will be purged, and cancel it before then.

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use mapi_api::words::size;
use mapi_domain::TenantId;
use mapi_schema::{DeletionDoc, ExportDoc};
use maud::{Markup, html};
use reqwest::Method;
use serde::Deserialize;

use super::{TenantPath, fragment, plain_id};
use crate::Console;
use crate::api::{Api, Refusal};
use crate::html::{Scope, csrf, done, page, refusal_box, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    Router::new()
        .route("/console/t/{tenant}/lifecycle", get(show))
        .route("/console/t/{tenant}/lifecycle/export", get(export_live).post(export))
        .route("/console/t/{tenant}/lifecycle/deletion", post(request_deletion))
        .route("/console/t/{tenant}/lifecycle/deletion/cancel", post(cancel_deletion))
}

/// `?export=exp_…`: the export to show.
#[derive(Debug, Default, Deserialize)]
pub struct ExportQuery {
    export: Option<String>,
}

async fn show(
    State(console): State<Console>,
    viewer: Viewer,
    TenantPath(t): TenantPath,
    Query(q): Query<ExportQuery>,
) -> Response {
    render(&console, &viewer, &t, q.export.as_deref(), None).await
}

async fn render(
    console: &Console,
    viewer: &Viewer,
    t: &TenantId,
    export: Option<&str>,
    flash: Option<Markup>,
) -> Response {
    let api = Api::new(console, viewer);
    let export = match export.map(plain_id) {
        Some(Ok(id)) => Some(api.get::<ExportDoc>(&format!("/v1/tenants/{t}/exports/{id}")).await),
        _ => None,
    };
    let deletion = api.get::<DeletionDoc>(&format!("/v1/tenants/{t}/deletion")).await;
    let base = format!("/console/t/{t}/lifecycle");
    let body = html! {
        @if let Some(f) = flash { (f) }
        h2 { "Export" }
        p.meta { "Everything the tenant holds (documents and objects) as files to download, kept for a while and then deleted." }
        @match &export {
            None => {},
            Some(Err(r)) => (refusal_box(r)),
            Some(Ok(e)) => (export_section(t, e)),
        }
        form method="post" action={(base) "/export"} {
            (csrf(viewer))
            button.secondary type="submit" { "Export the tenant" }
        }
        h2 { "Deletion" }
        @match &deletion {
            Ok(d) => (deletion_section(viewer, &base, d)),
            Err(r) if r.status == StatusCode::NOT_FOUND => (deletion_form(viewer, t, &base)),
            Err(r) => (refusal_box(r)),
        }
    };
    page(StatusCode::OK, Some(viewer), Scope::tenant(t), &format!("Tenant {t}: export and deletion"), body)
}

fn export_section(t: &TenantId, e: &ExportDoc) -> Markup {
    let over = e.state != mapi_schema::ExportState::Building;
    html! {
        section #export aria-live="polite" aria-label="The export"
            data-live={"/console/t/" (t) "/lifecycle/export?export=" (e.id)} data-final[over] {
            p { "Export " code { (e.id) } ": " (state_badge(e.state.as_str())) ", asked " (when(e.requested_at)) " by " (e.requested_by.as_str()) "." }
            @if let Some(err) = &e.error { div.problem { p { (err) } } }
            @if let Some(until) = e.expires_at { p { "Its files can be downloaded until " (when(until)) "." } }
            @if !e.parts.is_empty() {
                table.compact {
                    thead { tr { th scope="col" { "Part" } th scope="col" { "Holds" } th.num scope="col" { "Lines" } th.num scope="col" { "Size" } } }
                    tbody { @for part in &e.parts { tr {
                        td { a href=(part.url) download { (part.name) } }
                        td { (part.kind.as_str()) }
                        td.num { (part.count) }
                        td.num { (size(part.size)) }
                    } } }
                }
            }
            @if !over { p.meta { "This section refreshes itself until the export is done." } }
        }
    }
}

async fn export_live(
    State(console): State<Console>,
    viewer: Viewer,
    TenantPath(t): TenantPath,
    Query(q): Query<ExportQuery>,
) -> Response {
    let id = q.export.as_deref().map(plain_id).and_then(Result::ok).unwrap_or("none");
    let answer = Api::new(&console, &viewer).get::<ExportDoc>(&format!("/v1/tenants/{t}/exports/{id}")).await;
    fragment(answer.map(|e| export_section(&t, &e)))
}

async fn export(State(console): State<Console>, TenantPath(t): TenantPath, posted: Posted) -> Response {
    let answer: Result<ExportDoc, Refusal> =
        Api::new(&console, &posted.viewer).post_empty(&format!("/v1/tenants/{t}/exports")).await;
    match answer {
        Ok(e) => Redirect::to(&format!("/console/t/{t}/lifecycle?export={}", e.id)).into_response(),
        Err(r) => refused_here(&console, &posted.viewer, &t, &r).await,
    }
}

async fn refused_here(console: &Console, viewer: &Viewer, t: &TenantId, r: &Refusal) -> Response {
    super::with_status(render(console, viewer, t, None, Some(refusal_box(r))).await, Some(r))
}

fn deletion_form(viewer: &Viewer, t: &TenantId, base: &str) -> Markup {
    html! {
        p { "No deletion is asked for. A deletion suspends the tenant at once (nothing new starts) and purges everything it holds after a grace period, during which it can be cancelled." }
        details.danger-zone {
            summary { "Delete this tenant" }
            form.stack method="post" action={(base) "/deletion"} {
                (csrf(viewer))
                label { "Why (kept in the deletion certificate)" input name="reason" required maxlength="200"; }
                label { "Type " code { (t) } " to confirm" input name="confirm" required autocomplete="off"; }
                button.danger type="submit" { "Delete the tenant" }
            }
        }
    }
}

fn deletion_section(viewer: &Viewer, base: &str, d: &DeletionDoc) -> Markup {
    html! {
        dl.facts {
            dt { "State" } dd { (state_badge(d.state.as_str())) }
            dt { "Asked" } dd { (when(d.requested_at)) " by " (d.requested_by.as_str()) ": " (d.reason) }
            dt { "Purged after" } dd { (when(d.purge_after)) }
            @if let Some(at) = d.cancelled_at { dt { "Cancelled" } dd { (when(at)) } }
            @if let Some(at) = d.purged_at { dt { "Purged" } dd { (when(at)) } }
        }
        @if d.state == mapi_schema::DeletionState::Scheduled {
            form method="post" action={(base) "/deletion/cancel"} {
                (csrf(viewer))
                button.secondary type="submit" { "Cancel the deletion" }
            }
        }
    }
}

async fn request_deletion(
    State(console): State<Console>,
    TenantPath(t): TenantPath,
    posted: Posted,
) -> Response {
    let viewer = &posted.viewer;
    if posted.get("confirm") != Some(t.as_str()) {
        let r = Refusal::invalid(format!("type the tenant's id, {t}, to confirm its deletion"));
        return refused_here(&console, viewer, &t, &r).await;
    }
    let body = serde_json::json!({ "reason": posted.get("reason").unwrap_or_default() });
    let answer: Result<DeletionDoc, Refusal> =
        Api::new(&console, viewer).send(Method::POST, &format!("/v1/tenants/{t}/deletion"), &body).await;
    match answer {
        Ok(d) => {
            render(
                &console,
                viewer,
                &t,
                None,
                Some(done(&format!(
                    "The tenant is suspended and will be purged after {}.",
                    d.purge_after.to_rfc3339()
                ))),
            )
            .await
        }
        Err(r) => refused_here(&console, viewer, &t, &r).await,
    }
}

async fn cancel_deletion(
    State(console): State<Console>,
    TenantPath(t): TenantPath,
    posted: Posted,
) -> Response {
    let viewer = &posted.viewer;
    let answer: Result<DeletionDoc, Refusal> =
        Api::new(&console, viewer).post_empty(&format!("/v1/tenants/{t}/deletion/cancel")).await;
    match answer {
        Ok(_) => {
            render(
                &console,
                viewer,
                &t,
                None,
                Some(done("The deletion is cancelled; the tenant is as it was.")),
            )
            .await
        }
        Err(r) => refused_here(&console, viewer, &t, &r).await,
    }
}
