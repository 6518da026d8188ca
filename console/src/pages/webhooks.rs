//! A project's webhooks: the list and a new one (its signing secret shown
//! once), and a webhook's page with its deliveries (each attempt's answer
//! or error), replay of one, rotation of the secret, turning it off and on,
//! and deletion.

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use mapi_api::webhooks::{
    DeliveryPage, DeliveryView, SecretRotated, WebhookCreated, WebhookPage, WebhookView,
};
use mapi_domain::{ProjectId, TenantId};
use mapi_webhooks::EventType;
use maud::{Markup, html};
use reqwest::Method;

use super::{Missing, PageQuery, ProjectPath, plain_id, project_ids, with_status};
use crate::Console;
use crate::api::{Api, Refusal, query};
use crate::html::{Scope, csrf, done, page, refusal_box, state_badge, when};
use crate::session::{Posted, Viewer};

pub fn routes() -> Router<Console> {
    let one = "/console/t/{tenant}/p/{project}/webhooks/{id}";
    Router::new()
        .route("/console/t/{tenant}/p/{project}/webhooks", get(list).post(create))
        .route(one, get(detail))
        .route(&format!("{one}/enabled"), post(switch))
        .route(&format!("{one}/rotate"), post(rotate))
        .route(&format!("{one}/delete"), post(delete))
        .route(&format!("{one}/deliveries/{{delivery}}/replay"), post(replay))
}

fn event_name(e: EventType) -> String {
    serde_json::to_value(e).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default()
}

async fn list(
    State(console): State<Console>,
    viewer: Viewer,
    ProjectPath { tenant: t, project: p }: ProjectPath,
) -> Response {
    render_list(&console, &viewer, (&t, &p), None).await
}

async fn render_list(
    console: &Console,
    viewer: &Viewer,
    (t, p): (&TenantId, &ProjectId),
    flash: Option<Markup>,
) -> Response {
    let answer: Result<WebhookPage, Refusal> =
        Api::new(console, viewer).get(&format!("/v1/tenants/{t}/projects/{p}/webhooks")).await;
    let base = format!("/console/t/{t}/p/{p}/webhooks");
    let body = html! {
        @if let Some(f) = flash { (f) }
        p.meta { "A webhook is told of the events it hears of by a signed POST (Standard Webhooks), retried with back-off until it answers 2xx." }
        @match &answer {
            Err(r) => (refusal_box(r)),
            Ok(list) if list.webhooks.is_empty() => p { "No webhook yet." },
            Ok(list) => div.scroll { table {
                thead { tr { th scope="col" { "URL" } th scope="col" { "Events" } th scope="col" { "Description" } th scope="col" { "Status" } th scope="col" { "Created" } } }
                tbody { @for w in &list.webhooks { tr {
                    td { a href={(base) "/" (w.id)} { (w.url) } }
                    td { (w.events.iter().map(|e| event_name(*e)).collect::<Vec<_>>().join(", ")) }
                    td { (w.description) }
                    td { @if w.enabled { "on" } @else { "off" } }
                    td { (when(w.created_at)) }
                } } }
            } },
        }
        h2 { "New webhook" }
        form.stack method="post" {
            (csrf(viewer))
            label { "URL (https, a public address)" input name="url" type="url" required maxlength="2048" placeholder="https://hooks.example.com/mapi"; }
            fieldset {
                legend { "Events" }
                @for e in EventType::ALL { label.check { input type="checkbox" name="event" value=(event_name(e)); (event_name(e)) } }
            }
            label { "Description" input name="description" maxlength="200"; }
            button type="submit" { "Create the webhook" }
        }
    };
    let status = answer.as_ref().err().map_or(StatusCode::OK, |r| r.status);
    page(status, Some(viewer), Scope::project(t.as_str(), p.as_str()), "Webhooks", body)
}

/// The secret, shown this once.
fn secret_box(what: &str, secret: &str) -> Markup {
    html! {
        div.done role="status" {
            p { (what) " Copy its signing secret now: it is shown this once." }
            p { label { "Secret" input.secret readonly value=(secret); } }
        }
    }
}

async fn create(
    State(console): State<Console>,
    ProjectPath { tenant: t, project: p }: ProjectPath,
    posted: Posted,
) -> Response {
    let body = serde_json::json!({
        "url": posted.get("url").unwrap_or_default(),
        "events": posted.all("event"),
        "description": posted.get("description"),
    });
    let answer: Result<WebhookCreated, Refusal> = Api::new(&console, &posted.viewer)
        .send(Method::POST, &format!("/v1/tenants/{t}/projects/{p}/webhooks"), &body)
        .await;
    let flash = match &answer {
        Ok(made) => secret_box(&format!("Webhook for {} created.", made.webhook.url), &made.secret),
        Err(r) => refusal_box(r),
    };
    with_status(render_list(&console, &posted.viewer, (&t, &p), Some(flash)).await, answer.as_ref().err())
}

/// The `{tenant}`, `{project}` and `{id}` of a webhook's page, checked.
fn webhook_path(t: &str, p: &str, id: &str) -> Result<(TenantId, ProjectId, String), Missing> {
    let (t, p) = project_ids(t, p)?;
    Ok((t, p, plain_id(id)?.to_owned()))
}

type WebhookPath = Path<(String, String, String)>;

async fn detail(
    State(console): State<Console>,
    viewer: Viewer,
    Path((t, p, id)): WebhookPath,
    Query(q): Query<PageQuery>,
) -> Response {
    match webhook_path(&t, &p, &id) {
        Ok((t, p, id)) => {
            render_detail(&console, &viewer, (&t, &p, &id), q.page_token.as_deref(), None).await
        }
        Err(m) => m.into_response(),
    }
}

async fn render_detail(
    console: &Console,
    viewer: &Viewer,
    (t, p, id): (&TenantId, &ProjectId, &str),
    page_token: Option<&str>,
    flash: Option<Markup>,
) -> Response {
    let api = Api::new(console, viewer);
    let path = format!("/v1/tenants/{t}/projects/{p}/webhooks/{id}");
    let scope = Scope::project(t.as_str(), p.as_str());
    let hook: WebhookView = match api.get(&path).await {
        Ok(w) => w,
        Err(r) => return crate::html::refused(viewer, scope, "Webhook", &r),
    };
    let deliveries: Result<DeliveryPage, Refusal> = api
        .get(&format!("{path}/deliveries{}", query(&[("page_size", Some("50")), ("page_token", page_token)])))
        .await;
    let base = format!("/console/t/{t}/p/{p}/webhooks/{id}");
    let body = html! {
        @if let Some(f) = flash { (f) }
        dl.facts {
            dt { "URL" } dd { code { (hook.url) } }
            dt { "Events" } dd { (hook.events.iter().map(|e| event_name(*e)).collect::<Vec<_>>().join(", ")) }
            @if !hook.description.is_empty() { dt { "Description" } dd { (hook.description) } }
            dt { "Status" } dd { @if hook.enabled { "on: sent every event it hears of" } @else { "off: sent nothing (replays excepted)" } }
            dt { "Created" } dd { (when(hook.created_at)) " by " (hook.created_by.as_str()) }
            @if let Some(until) = hook.previous_secret_valid_until { dt { "Previous secret" } dd { "still signs until " (when(until)) } }
        }
        div.actions {
            form method="post" action={(base) "/enabled"} {
                (csrf(viewer))
                input type="hidden" name="enabled" value=(if hook.enabled { "false" } else { "true" });
                button.secondary type="submit" { @if hook.enabled { "Turn off" } @else { "Turn on" } }
            }
            form method="post" action={(base) "/rotate"} {
                (csrf(viewer))
                button.secondary type="submit" { "Rotate the secret" }
            }
            form method="post" action={(base) "/delete"} {
                (csrf(viewer))
                button.danger type="submit" { "Delete the webhook" }
            }
        }
        h2 { "Deliveries" }
        @match &deliveries {
            Err(r) => (refusal_box(r)),
            Ok(d) if d.deliveries.is_empty() => p { "Nothing sent yet." },
            Ok(d) => {
                div.scroll { table {
                    caption.meta { "Newest first; a replay sends the same message (the same " code { "webhook-id" } ") again." }
                    thead { tr { th scope="col" { "Event" } th scope="col" { "About" } th scope="col" { "State" } th scope="col" { "Attempts" } th scope="col" { "Created" } th scope="col" { span.sr-only { "Actions" } } } }
                    tbody { @for m in &d.deliveries { (delivery_row(viewer, &base, m)) } }
                } }
                @if let Some(next) = &d.next_page_token { div.pager { a href={(base) (query(&[("page_token", Some(next))]))} rel="next" { "Older deliveries" } } }
            }
        }
        p { a href={"/console/t/" (t) "/p/" (p) "/webhooks"} { "All webhooks" } }
    };
    page(StatusCode::OK, Some(viewer), scope, "Webhook", body)
}

fn delivery_row(viewer: &Viewer, base: &str, m: &DeliveryView) -> Markup {
    html! {
        tr {
            td { (event_name(m.event)) }
            td { code { (m.subject) } }
            td { (state_badge(&m.state)) @if let Some(next) = m.next_at { br; span.meta { "next try " (when(next)) } } }
            td {
                @if m.attempts.is_empty() { "none yet" }
                ul.plain { @for a in &m.attempts { li {
                    (when(a.at)) " — "
                    @match (a.status, &a.error) {
                        (Some(s), _) => { "answered " (s) },
                        (None, Some(e)) => { "no answer: " (e) },
                        (None, None) => "no answer",
                    }
                    " (" (a.latency_ms) " ms" @if a.replay { ", a replay" } ")"
                } } }
            }
            td { (when(m.created_at)) }
            td { form method="post" action={(base) "/deliveries/" (m.id) "/replay"} {
                (csrf(viewer))
                button.secondary type="submit" aria-label={"Replay delivery " (m.id)} { "Replay" }
            } }
        }
    }
}

/// Runs `act` on a checked webhook path, then shows the webhook's page with what it did.
async fn acted<'c, F, Fut>(
    console: &'c Console,
    (t, p, id): (String, String, String),
    posted: &Posted,
    act: F,
) -> Response
where
    F: FnOnce(Api<'c>, String) -> Fut,
    Fut: std::future::Future<Output = Result<Markup, Refusal>>,
{
    let (t, p, id) = match webhook_path(&t, &p, &id) {
        Ok(x) => x,
        Err(m) => return m.into_response(),
    };
    let path = format!("/v1/tenants/{t}/projects/{p}/webhooks/{id}");
    let answer = act(Api::new(console, &posted.viewer), path).await;
    let flash = match &answer {
        Ok(m) => m.clone(),
        Err(r) => refusal_box(r),
    };
    let response = render_detail(console, &posted.viewer, (&t, &p, &id), None, Some(flash)).await;
    with_status(response, answer.as_ref().err())
}

async fn switch(State(console): State<Console>, Path(ids): WebhookPath, posted: Posted) -> Response {
    let on = posted.get("enabled") == Some("true");
    acted(&console, ids, &posted, |api, path| async move {
        let _: WebhookView = api.send(Method::PATCH, &path, &serde_json::json!({ "enabled": on })).await?;
        Ok(done(if on { "The webhook is on." } else { "The webhook is off: nothing is sent to it." }))
    })
    .await
}

async fn rotate(State(console): State<Console>, Path(ids): WebhookPath, posted: Posted) -> Response {
    acted(&console, ids, &posted, |api, path| async move {
        let r: SecretRotated = api.post_empty(&format!("{path}/rotate")).await?;
        let what = format!(
            "The secret is rotated; the previous one still signs until {}.",
            r.previous_valid_until.to_rfc3339()
        );
        Ok(secret_box(&what, &r.secret))
    })
    .await
}

async fn replay(
    State(console): State<Console>,
    Path((t, p, id, delivery)): Path<(String, String, String, String)>,
    posted: Posted,
) -> Response {
    let Ok(delivery) = plain_id(&delivery).map(str::to_owned) else {
        return Missing("There is no such delivery.").into_response();
    };
    acted(&console, (t, p, id), &posted, |api, path| async move {
        let d: DeliveryView = api.post_empty(&format!("{path}/deliveries/{delivery}/replay")).await?;
        Ok(done(&format!("Delivery {} is sent again (now {}).", d.id, d.state)))
    })
    .await
}

async fn delete(State(console): State<Console>, Path((t, p, id)): WebhookPath, posted: Posted) -> Response {
    let (t, p, id) = match webhook_path(&t, &p, &id) {
        Ok(x) => x,
        Err(m) => return m.into_response(),
    };
    let answer = Api::new(&console, &posted.viewer)
        .delete(&format!("/v1/tenants/{t}/projects/{p}/webhooks/{id}"))
        .await;
    match &answer {
        Ok(()) => {
            render_list(&console, &posted.viewer, (&t, &p), Some(done("The webhook is deleted."))).await
        }
        Err(r) => with_status(
            render_detail(&console, &posted.viewer, (&t, &p, &id), None, Some(refusal_box(r))).await,
            Some(r),
        ),
    }
}
