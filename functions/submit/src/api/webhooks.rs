//! A project's webhooks (project admins; tokens need `webhooks:manage`):
//! create (the secret is shown once), list, read, change, delete, rotate
//! the secret (the previous one keeps signing for a grace period), the
//! delivery log, and replaying one message. Each change is audited
//! (`webhook.create`, `.update`, `.delete`, `.rotate`, `.replay`).
//!
//! A URL is refused at creation unless it is `https` and its host is not a
//! private, loopback or link-local address (or a name for one such as
//! `localhost`); every delivery checks the addresses the name resolves to
//! again (see the delivery task). `MAPI_WEBHOOKS_ALLOW_LOOPBACK` lets a
//! development platform reach `http` receivers on loopback.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::webhooks::{
    DeliveryPage, DeliveryView, NewWebhook, SecretRotated, WebhookChange, WebhookCreated, WebhookPage,
    WebhookView,
};
use mapi_domain::{DeliveryId, ProjectId, TenantId, Timestamp, WebhookId};
use mapi_identity::{Audit, Caller};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query, page_size};
use mapi_schema::tasks::{DeliverTask, push_deliver};
use mapi_schema::{DeliveryDoc, Doc, RetiredSecret, WebhookDoc, tx_create, tx_get, tx_put};
use mapi_store::{Direction, Op, transact};
use mapi_webhooks::{EventType, Secret, TargetUrl};

use super::datasets::{PageQuery, entropy, require_project};

/// Webhooks one project may have.
pub const MAX_WEBHOOKS_PER_PROJECT: usize = 20;
/// The longest description.
const MAX_DESCRIPTION: usize = 200;
type HookPath = Path<(TenantId, ProjectId, WebhookId)>;

fn view(d: &WebhookDoc) -> WebhookView {
    WebhookView {
        id: d.id.clone(),
        tenant: d.tenant.clone(),
        project: d.project.clone(),
        url: d.url.clone(),
        events: d.events.clone(),
        description: d.description.clone(),
        enabled: d.enabled,
        created_at: d.created_at,
        created_by: d.created_by.clone(),
        updated_at: d.updated_at,
        previous_secret_valid_until: d.previous_secret.as_ref().map(|p| p.valid_until),
    }
}

fn delivery_view(d: &DeliveryDoc) -> DeliveryView {
    DeliveryView {
        id: d.id.clone(),
        webhook: d.webhook.clone(),
        event: d.event,
        subject: d.subject.clone(),
        created_at: d.created_at,
        state: d.state.as_str().to_owned(),
        next_at: d.next_at,
        attempts: d.attempts.clone(),
        payload: serde_json::from_str(&d.payload).unwrap_or(serde_json::Value::Null),
    }
}

fn not_found(tenant: &TenantId, project: &ProjectId, id: &dyn std::fmt::Display) -> ApiError {
    ApiError::not_found(format!("webhook {id} not found in {tenant}/{project}"))
}

/// The URL, if the address rules allow it, in words saying what to fix.
fn check_url(state: &AppState, url: &str) -> Result<String, ApiError> {
    let target = TargetUrl::parse(url.trim(), &state.config.webhooks)
        .map_err(|e| ApiError::invalid(format!("url: {e}")))?;
    Ok(target.as_str().to_owned())
}

fn check_events(events: &[EventType]) -> Result<Vec<EventType>, ApiError> {
    if events.is_empty() {
        return Err(ApiError::invalid(
            "events is empty: subscribe to at least one, e.g. [\"run.succeeded\"]",
        ));
    }
    let mut events = events.to_vec();
    events.sort();
    events.dedup();
    Ok(events)
}

fn check_description(d: Option<&str>) -> Result<String, ApiError> {
    let d = d.unwrap_or_default().trim();
    if d.chars().count() > MAX_DESCRIPTION || d.chars().any(char::is_control) {
        return Err(ApiError::invalid(format!(
            "description must be at most {MAX_DESCRIPTION} characters, without control characters"
        )));
    }
    Ok(d.to_owned())
}

fn new_secret(state: &AppState) -> Result<Secret, ApiError> {
    let key: [u8; 32] = mapi_entropy::bytes(&*state.entropy)?;
    Secret::from_bytes(&key).map_err(|e| ApiError::internal(e.to_string()))
}

async fn find(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    id: &WebhookId,
) -> Result<WebhookDoc, ApiError> {
    match mapi_schema::get::<WebhookDoc>(&*state.store, id.as_str()).await? {
        Some(d) if &d.tenant == tenant && &d.project == project => Ok(d),
        _ => Err(not_found(tenant, project, id)),
    }
}

/// Create a webhook; its secret is in the answer, and only there.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    request_body = NewWebhook,
    responses(
        (status = 201, body = WebhookCreated),
        (status = 400, body = mapi_problem::Problem, description = "A URL the address rules refuse, or no events"),
        (status = 409, body = mapi_problem::Problem, description = "The project has its most webhooks"),
    ),
    security(("session" = []), ("token" = []))
)]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Json(body): Json<NewWebhook>,
) -> Result<(StatusCode, Json<WebhookCreated>), ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Create).await?;
    let (url, events) = (check_url(&state, &body.url)?, check_events(&body.events)?);
    let description = check_description(body.description.as_deref())?;
    let (existing, _) = page_of(&state, &tenant, &project).await?;
    if existing.len() >= MAX_WEBHOOKS_PER_PROJECT {
        return Err(ApiError::precondition(format!(
            "project {tenant}/{project} has {MAX_WEBHOOKS_PER_PROJECT} webhooks, the most it may: delete one first"
        )));
    }
    let now = state.clock.now();
    let secret = new_secret(&state)?;
    let doc = WebhookDoc {
        id: WebhookId::generate(now, entropy(&state)?),
        tenant: tenant.clone(),
        project: project.clone(),
        url,
        events,
        description,
        enabled: true,
        secret: secret.as_str().to_owned(),
        previous_secret: None,
        created_at: now,
        created_by: caller.user().clone(),
        updated_at: now,
        cursor: now,
        recent: Vec::new(),
        failing: None,
        paced_until: None,
    };
    let names: Vec<&str> = doc.events.iter().map(|e| e.as_str()).collect();
    let record = Audit::by(&caller, "webhook.create", format!("webhooks/{}", doc.id))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("{} for {}", doc.url, names.join(", ")))
        .into_doc(now, &*state.entropy);
    let (doc_ref, record_ref) = (&doc, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx_create(&mut tx, doc_ref)?;
        tx_create(&mut tx, record_ref)?;
        Ok(tx.finish(()))
    })
    .await?;
    let created = WebhookCreated { webhook: view(&doc), secret: secret.as_str().to_owned() };
    Ok((StatusCode::CREATED, Json(created)))
}

/// The project's webhooks, newest first (at most 20 exist).
async fn page_of(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
) -> Result<(Vec<WebhookDoc>, Option<String>), ApiError> {
    let (docs, next) = mapi_store::Query::new(WebhookDoc::COLLECTION)
        .filter("tenant", Op::Eq, tenant.as_str())
        .filter("project", Op::Eq, project.as_str())
        .order_by("created_at", Direction::Desc)
        .page(&*state.store, MAX_WEBHOOKS_PER_PROJECT as u32, None)
        .await?;
    Ok((docs.iter().map(|d| d.decode()).collect::<Result<_, _>>()?, next))
}

/// The project's webhooks.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path)),
    responses((status = 200, body = WebhookPage)),
    security(("session" = []), ("token" = []))
)]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
) -> Result<Json<WebhookPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Read).await?;
    let (docs, _) = page_of(&state, &tenant, &project).await?;
    Ok(Json(WebhookPage { webhooks: docs.iter().map(view).collect() }))
}

/// A webhook.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::WebhookId, Path)),
    responses((status = 200, body = WebhookView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn get_webhook(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): HookPath,
) -> Result<Json<WebhookView>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Read).await?;
    Ok(Json(view(&find(&state, &tenant, &project, &id).await?)))
}

/// Change a webhook's URL, events, description or whether it is enabled.
#[utoipa::path(
    patch,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::WebhookId, Path)),
    request_body = WebhookChange,
    responses((status = 200, body = WebhookView), (status = 400, body = mapi_problem::Problem), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): HookPath,
    Json(body): Json<WebhookChange>,
) -> Result<Json<WebhookView>, ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Update).await?;
    let url = body.url.as_deref().map(|u| check_url(&state, u)).transpose()?;
    let events = body.events.as_deref().map(check_events).transpose()?;
    let description = body.description.as_deref().map(|d| check_description(Some(d))).transpose()?;
    let now = state.clock.now();
    let mut said = Vec::new();
    url.iter().for_each(|u| said.push(format!("url {u}")));
    events.iter().for_each(|e| said.push(format!("{} events", e.len())));
    body.enabled.iter().for_each(|on| said.push(if *on { "enabled" } else { "disabled" }.to_owned()));
    let record = Audit::by(&caller, "webhook.update", format!("webhooks/{id}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(said.join(", "))
        .into_doc(now, &*state.entropy);
    let change = |d: &mut WebhookDoc| {
        url.iter().for_each(|u| d.url = u.clone());
        events.iter().for_each(|e| d.events = e.clone());
        description.iter().for_each(|s| d.description = s.clone());
        if let Some(on) = body.enabled {
            // A webhook enabled again hears of what happens from now on.
            if on && !d.enabled {
                d.cursor = now;
            }
            d.enabled = on;
        }
        d.updated_at = now;
    };
    let doc = apply(&state, &tenant, &project, &id, &record, change).await?;
    Ok(Json(view(&doc)))
}

/// Changes a webhook of the project in one commit with its audit record.
async fn apply(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    id: &WebhookId,
    record: &mapi_schema::AuditDoc,
    change: impl Fn(&mut WebhookDoc),
) -> Result<WebhookDoc, ApiError> {
    let change = &change;
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut d = match tx_get::<WebhookDoc>(&mut tx, id.as_str()).await? {
            Some(d) if &d.tenant == tenant && &d.project == project => d,
            _ => return Err(not_found(tenant, project, id)),
        };
        change(&mut d);
        tx_put(&mut tx, &d)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(d))
    })
    .await
}

/// Delete a webhook: nothing more is sent to it; its log goes with it.
#[utoipa::path(
    delete,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::WebhookId, Path)),
    responses((status = 204, description = "Deleted"), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): HookPath,
) -> Result<StatusCode, ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Delete).await?;
    let doc = find(&state, &tenant, &project, &id).await?;
    let record = Audit::by(&caller, "webhook.delete", format!("webhooks/{id}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(doc.url.clone())
        .into_doc(state.clock.now(), &*state.entropy);
    let (record, doc) = (&record, &doc);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        if tx_get::<WebhookDoc>(&mut tx, doc.id.as_str()).await?.is_none() {
            return Err(not_found(&doc.tenant, &doc.project, &doc.id));
        }
        tx.delete(&mapi_schema::key::<WebhookDoc>(doc.id.as_str())?);
        tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Rotate the secret: the new one signs from now on, shown this once; the
/// previous one signs beside it for a day, so receivers can switch.
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}/rotate",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::WebhookId, Path)),
    responses((status = 200, body = SecretRotated), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn rotate(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): HookPath,
) -> Result<Json<SecretRotated>, ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Update).await?;
    let now = state.clock.now();
    let secret = new_secret(&state)?;
    let valid_until: Timestamp = mapi_webhooks::grace_until(now);
    let record = Audit::by(&caller, "webhook.rotate", format!("webhooks/{id}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("the previous secret signs until {}", valid_until.to_rfc3339()))
        .into_doc(now, &*state.entropy);
    let text = secret.as_str().to_owned();
    apply(&state, &tenant, &project, &id, &record, |d| {
        let old = std::mem::replace(&mut d.secret, text.clone());
        d.previous_secret = Some(RetiredSecret { secret: old, valid_until });
        d.updated_at = now;
    })
    .await?;
    Ok(Json(SecretRotated { secret: text, previous_valid_until: valid_until }))
}

/// A webhook's messages, newest first, each with its attempts.
#[utoipa::path(
    get,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}/deliveries",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::WebhookId, Path), PageQuery),
    responses((status = 200, body = DeliveryPage), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn deliveries(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id)): HookPath,
    Query(q): Query<PageQuery>,
) -> Result<Json<DeliveryPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Read).await?;
    find(&state, &tenant, &project, &id).await?;
    let (docs, next_page_token) = mapi_store::Query::new(DeliveryDoc::COLLECTION)
        .filter("webhook", Op::Eq, id.as_str())
        .order_by("created_at", Direction::Desc)
        .page(&*state.store, page_size(q.page_size)?, q.page_token.as_deref())
        .await?;
    let deliveries = docs.iter().map(|d| d.decode().map(|m| delivery_view(&m))).collect::<Result<_, _>>()?;
    Ok(Json(DeliveryPage { deliveries, next_page_token }))
}

/// Send one message again, now, whatever its state (one more attempt).
#[utoipa::path(
    post,
    path = "/v1/tenants/{tenant}/projects/{project}/webhooks/{id}/deliveries/{delivery}/replay",
    tag = "webhooks",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("id" = mapi_domain::WebhookId, Path), ("delivery" = mapi_domain::DeliveryId, Path)),
    responses((status = 202, body = DeliveryView), (status = 404, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = []))
)]
pub async fn replay(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, id, delivery)): Path<(TenantId, ProjectId, WebhookId, DeliveryId)>,
) -> Result<(StatusCode, Json<DeliveryView>), ApiError> {
    let granted =
        require_project(&state, &caller, &tenant, &project, Resource::Webhook, Action::Update).await?;
    find(&state, &tenant, &project, &id).await?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "webhook.replay", format!("webhooks/{id}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("message {delivery}"))
        .into_doc(now, &*state.entropy);
    let (hook, msg, record) = (&id, &delivery, &record);
    let message = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let mut m = match tx_get::<DeliveryDoc>(&mut tx, msg.as_str()).await? {
            Some(m) if &m.webhook == hook => m,
            _ => return Err(ApiError::not_found(format!("message {msg} of webhook {hook} not found"))),
        };
        m.replays += 1;
        tx_put(&mut tx, &m)?;
        tx_create(&mut tx, record)?;
        Ok(tx.finish(m))
    })
    .await?;
    let task = DeliverTask { delivery: message.id.clone(), attempt: message.replays, replay: true };
    push_deliver(&*state.queue, &task, None, None).await?;
    Ok((StatusCode::ACCEPTED, Json(delivery_view(&message))))
}
