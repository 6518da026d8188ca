//! The webhooks' emission sweep: each tick turns the run transitions, the
//! endpoints' readiness and failures and the jobs' ends a webhook
//! subscribes to into messages, and re-pushes messages whose next attempt
//! is long overdue (a push lost after its commit).
//!
//! A webhook keeps a cursor: runs (endpoints, jobs) of its project that
//! changed at or after it have not all been looked at. Each sweep reads the
//! project's runs changed since the cursor less [`LOOK_BACK`] (a commit
//! whose time was taken before the previous sweep but which landed after
//! it is still seen), in order of change, at most [`RUNS_PER_WEBHOOK`], and
//! as many endpoints (by change) and jobs (by the end the tick's job sweep
//! recorded) the same way when the webhook subscribes to theirs.
//! Every transition since then that the webhook subscribes to becomes one
//! message whose id is derived from the webhook, the run and the
//! transition's place in the run's history (an endpoint's: the kind and
//! time of its history entry; a job's: its round), created only if absent: a run looked at
//! twice makes no second message, and the messages made in the look-back
//! window are remembered on the webhook so looking again reads nothing
//! more. A message and the cursor move in one commit, so a transition is
//! never skipped; its first attempt is pushed after.

use std::collections::HashMap;
use std::time::Duration;

use mapi_domain::{DeliveryId, TenantId, Timestamp, Transition, WebhookId};
use mapi_endpoints::EndpointDoc;
use mapi_jobs::JobDoc;
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_quota::nearness::Nearness as QuotaNearness;
use mapi_schema::tasks::{DeliverTask, push_deliver};
use mapi_schema::{
    DeliveryDoc, DeliveryState, Doc, QuotaPolicyDoc, Seen, SweepFailing, TenantDoc, ValidationDoc,
    WebhookDoc, WorkflowRunDoc, tx_create, tx_get, tx_put,
};

use mapi_store::{Direction, Op, Query, transact};
use mapi_webhooks::{Envelope, EventType};
use sha2::{Digest, Sha256};

/// How far before its cursor a webhook's sweep looks again.
pub const LOOK_BACK: Duration = Duration::from_secs(60);
/// Webhooks swept per tick, least recently swept first.
pub const WEBHOOKS_PER_TICK: u32 = 50;
/// Runs read per webhook per tick.
pub const RUNS_PER_WEBHOOK: u32 = 200;
/// A pending message whose next attempt is this overdue lost its push.
pub const OVERDUE: Duration = Duration::from_secs(300);

/// What the sweep did: messages made, messages re-pushed, and webhooks
/// whose sweep failed (retried next tick).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    pub made: u32,
    pub repushed: u32,
    pub errors: u32,
}

pub async fn sweep(state: &AppState) -> Result<Swept, ApiError> {
    let mut swept = Swept::default();
    let hooks = Query::new(WebhookDoc::COLLECTION)
        .filter("enabled", Op::Eq, true)
        .order_by("cursor", Direction::Asc)
        .limit(WEBHOOKS_PER_TICK);
    let mut nearness = Nearness::default();
    for doc in state.store.query(&hooks, None).await? {
        let hook: WebhookDoc = doc.decode()?;
        match sweep_one(state, &hook, &mut nearness).await {
            Ok(made) => swept.made += made,
            Err(e) => {
                swept.errors += 1;
                failed(state, &hook, &e).await;
            }
        }
    }
    let (repushed, errors) = repush_overdue(state).await?;
    swept.repushed = repushed;
    swept.errors += errors;
    Ok(swept)
}

/// Failures in a row of one webhook's sweep after which each further one
/// is an alarm: with the tick each minute, five minutes of its events
/// waiting.
pub const ALARM_AFTER: u32 = 5;

/// The message of the log line of a webhook's sweep failing again after
/// [`ALARM_AFTER`] failures in a row (the alert's log-based metric
/// matches it exactly).
pub const SWEEP_ALARM: &str = "ALARM webhook sweep failing: its events are not being delivered";

/// Records a failed sweep of `hook`: counted, logged (at error when the
/// failure is a bug, or the sweep has failed [`ALARM_AFTER`] times in a
/// row), and kept on the webhook so the count survives the process.
async fn failed(state: &AppState, hook: &WebhookDoc, e: &ApiError) {
    state.metrics.webhook_sweep_failures.inc();
    let now = state.clock.now();
    let error = e.to_string();
    let failing = match &hook.failing {
        Some(f) => SweepFailing { since: f.since, count: f.count.saturating_add(1), error: error.clone() },
        None => SweepFailing { since: now, count: 1, error: error.clone() },
    };
    let (count, since) = (failing.count, failing.since);
    if count >= ALARM_AFTER {
        state.metrics.webhook_sweep_alarms.inc();
        tracing::error!(webhook = %hook.id, tenant = %hook.tenant, count, %since, %error, "{SWEEP_ALARM}");
    } else if e.is_bug() {
        tracing::error!(webhook = %hook.id, count, %error, "a webhook's sweep failed on a bug; the next tick retries");
    } else {
        tracing::warn!(webhook = %hook.id, count, %error, "a webhook's sweep failed; the next tick retries");
    }
    let (id, failing) = (&hook.id, &failing);
    let kept = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        // A webhook deleted meanwhile stays deleted.
        if let Some(mut current) = tx_get::<WebhookDoc>(&mut tx, id.as_str()).await? {
            current.failing = Some(failing.clone());
            tx_put(&mut tx, &current)?;
        }
        Ok(tx.finish(()))
    })
    .await;
    if let Err(e) = kept {
        tracing::warn!(webhook = %hook.id, error = %e, "recording a webhook's failed sweep failed");
    }
}

/// How near each tenant swept is to its limits, read once per sweep.
#[derive(Default)]
struct Nearness(HashMap<TenantId, Vec<mapi_quota::nearness::Nearness>>);

impl Nearness {
    async fn of(&mut self, state: &AppState, tenant: &TenantId) -> Result<&[QuotaNearness], ApiError> {
        if !self.0.contains_key(tenant) {
            let tier = mapi_schema::get::<TenantDoc>(&*state.store, tenant.as_str()).await?.map(|t| t.tier);
            let policy =
                mapi_schema::get::<QuotaPolicyDoc>(&*state.store, tenant.as_str()).await?.map(|p| p.policy);
            let near = match tier {
                Some(tier) => {
                    let limits = mapi_quota::effective(tier, policy.as_ref());
                    mapi_quota::nearness::of_tenant(&*state.store, tenant, &limits, state.clock.now()).await?
                }
                None => Vec::new(),
            };
            self.0.insert(tenant.clone(), near);
        }
        Ok(self.0.get(tenant).map(Vec::as_slice).unwrap_or_default())
    }
}

/// Makes the messages of one webhook's new transitions; how many.
async fn sweep_one(state: &AppState, hook: &WebhookDoc, nearness: &mut Nearness) -> Result<u32, ApiError> {
    let now = state.clock.now();
    let since = (hook.cursor - LOOK_BACK).max(hook.created_at);
    let wants = |events: &[EventType]| hook.events.iter().any(|e| events.contains(e));
    // Each full page may have more of its last time: the cursor stops at
    // the earliest such time, and the next sweep goes on from it.
    let mut cursor = now;
    let runs: Vec<RunDoc> =
        changed(state, hook, RunDoc::COLLECTION, "updated_at", since, &mut cursor).await?;
    let endpoints: Vec<EndpointDoc> = if wants(&ENDPOINT_EVENTS) {
        changed(state, hook, EndpointDoc::COLLECTION, "updated_at", since, &mut cursor).await?
    } else {
        Vec::new()
    };
    let jobs: Vec<JobDoc> = if wants(&[EventType::JobFinished]) {
        changed(state, hook, JobDoc::COLLECTION, "finished.at", since, &mut cursor).await?
    } else {
        Vec::new()
    };
    let workflow_runs: Vec<WorkflowRunDoc> = if wants(&[EventType::WorkflowFinished]) {
        changed(state, hook, WorkflowRunDoc::COLLECTION, "run.ended_at", since, &mut cursor).await?
    } else {
        Vec::new()
    };
    let validations: Vec<ValidationDoc> = if wants(&[EventType::ValidationDecided]) {
        changed(state, hook, ValidationDoc::COLLECTION, "decided_at", since, &mut cursor).await?
    } else {
        Vec::new()
    };
    let quotas =
        if wants(&[EventType::QuotaWarning]) { nearness.of(state, &hook.tenant).await? } else { &[] };
    let public_url = &state.config.public_url;
    let made: Vec<DeliveryDoc> = runs
        .iter()
        .flat_map(|run| messages(hook, run, since, public_url))
        .chain(endpoints.iter().flat_map(|e| endpoint_messages(hook, e, since)))
        .chain(jobs.iter().filter_map(|j| job_message(hook, j, public_url)))
        .chain(workflow_runs.iter().filter_map(|w| workflow_message(hook, w, public_url)))
        .chain(validations.iter().filter_map(|v| validation_message(hook, v, public_url)))
        .chain(quotas.iter().filter_map(|n| quota_message(hook, n, now)))
        .filter(|m| !hook.recent.iter().any(|s| s.id == m.id))
        .collect();
    let (hook_ref, made_ref) = (hook, &made);
    let per_second = state.config.webhook_receiver_per_second;
    let created = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let Some(mut current) = tx_get::<WebhookDoc>(&mut tx, hook_ref.id.as_str()).await? else {
            return Ok(tx.finish(Vec::new()));
        };
        // Every read before the first write: which messages exist already.
        let keys = made_ref.iter().map(|m| m.key()).collect::<Result<Vec<_>, _>>()?;
        let existing = tx.get_all(&keys).await?;
        let new: Vec<&DeliveryDoc> =
            made_ref.iter().zip(existing).filter(|(_, found)| found.is_none()).map(|(m, _)| m).collect();
        // Each new message's first attempt takes the receiver's next slot.
        let (slots, paced_until) = mapi_webhooks::pace(now, current.paced_until, new.len(), per_second);
        let mut created = Vec::new();
        for (m, slot) in new.into_iter().zip(slots) {
            tx_create(&mut tx, &DeliveryDoc { next_at: Some(slot), ..m.clone() })?;
            created.push((m.id.clone(), slot));
        }
        current.paced_until = Some(paced_until);
        current.failing = None;
        current.cursor = current.cursor.max(cursor);
        let keep_from = current.cursor - LOOK_BACK;
        current.recent.retain(|s| s.at >= keep_from);
        current.recent.extend(made_ref.iter().map(|m| Seen { id: m.id.clone(), at: m.created_at }));
        tx_put(&mut tx, &current)?;
        Ok(tx.finish(created))
    })
    .await?;
    for (id, slot) in &created {
        let task = DeliverTask { delivery: id.clone(), attempt: 1, replay: false };
        let at = (*slot > now).then_some(*slot);
        if let Err(e) = push_deliver(&*state.queue, &task, at, None).await {
            tracing::warn!(delivery = %id, error = %e, "pushing a webhook message failed; the sweep re-pushes it");
        }
    }
    Ok(u32::try_from(created.len()).unwrap_or(u32::MAX))
}

/// The documents of `collection` in `hook`'s project whose `field` (a
/// time) is at or after `since`, in its order, at most [`RUNS_PER_WEBHOOK`];
/// a full page lowers `cursor` to its last time.
async fn changed<T: serde::de::DeserializeOwned>(
    state: &AppState,
    hook: &WebhookDoc,
    collection: &str,
    field: &str,
    since: Timestamp,
    cursor: &mut Timestamp,
) -> Result<Vec<T>, ApiError> {
    let q = Query::new(collection)
        .filter("tenant", Op::Eq, hook.tenant.as_str())
        .filter("project", Op::Eq, hook.project.as_str())
        .filter(field, Op::Ge, since.to_rfc3339())
        .order_by(field, Direction::Asc)
        .limit(RUNS_PER_WEBHOOK);
    let docs = state.store.query(&q, None).await?;
    if docs.len() == RUNS_PER_WEBHOOK as usize {
        let last = docs.last().and_then(|d| mapi_store::field_value(&d.fields, field));
        if let Some(t) = last.and_then(|v| serde_json::from_value::<Timestamp>(v.clone()).ok()) {
            *cursor = (*cursor).min(t);
        }
    }
    Ok(docs.iter().map(|d| d.decode()).collect::<Result<_, _>>()?)
}

/// A message of `event` to `hook` about `subject`, happened at `at`, its
/// id derived from `key` (and `at`) so a second look makes the same one.
fn message(
    hook: &WebhookDoc,
    event: EventType,
    subject: String,
    key: &str,
    at: Timestamp,
    data: serde_json::Value,
) -> Option<DeliveryDoc> {
    message_with_id(hook, event, subject, derived_id(&hook.id, key, at), at, data)
}

/// A message of `event` to `hook` about `subject`, happened at `at`, as `id`.
fn message_with_id(
    hook: &WebhookDoc,
    event: EventType,
    subject: String,
    id: DeliveryId,
    at: Timestamp,
    data: serde_json::Value,
) -> Option<DeliveryDoc> {
    let payload = serde_json::to_string(&Envelope::new(event, at, data)).ok()?;
    Some(DeliveryDoc {
        id,
        webhook: hook.id.clone(),
        tenant: hook.tenant.clone(),
        project: hook.project.clone(),
        event,
        subject,
        created_at: at,
        payload,
        state: DeliveryState::Pending,
        attempts: Vec::new(),
        next_at: Some(at),
        replays: 0,
    })
}

/// The `job.finished` message `hook` gets for `job`'s recorded end.
fn job_message(hook: &WebhookDoc, job: &JobDoc, public_url: &str) -> Option<DeliveryDoc> {
    let end = job.finished.as_ref()?;
    let data = serde_json::json!({
        "job": {
            "id": job.id,
            "tenant": job.tenant,
            "project": job.project,
            "method": job.method,
            "items": job.items,
            "round": end.round,
            "state": end.state,
            "counts": end.counts,
            "url": format!("{public_url}/v1/jobs/{}", job.id),
        },
        "finished_at": end.at,
    });
    let key = format!("{}/round/{}", job.id, end.round);
    message(hook, EventType::JobFinished, format!("jobs/{}", job.id), &key, end.at, data)
}

/// The `workflow.finished` message `hook` gets for the end of a workflow
/// run's attempt (a resumed run that ends again is a second message).
fn workflow_message(hook: &WebhookDoc, w: &WorkflowRunDoc, public_url: &str) -> Option<DeliveryDoc> {
    let at = w.run.ended_at()?;
    let nodes: serde_json::Map<String, serde_json::Value> =
        w.run.nodes().map(|(n, r)| (n.id.clone(), r.state.as_str().into())).collect();
    let data = serde_json::json!({
        "workflow_run": {
            "id": w.id,
            "tenant": w.tenant,
            "project": w.project,
            "workflow": w.workflow,
            "version": w.version,
            "attempt": w.run.attempt(),
            "state": w.run.state().as_str(),
            "nodes": nodes,
            "url": format!("{public_url}/v1/workflow-runs/{}", w.id),
        },
        "finished_at": at,
    });
    let key = format!("{}/attempt/{}", w.id, w.run.attempt());
    message(hook, EventType::WorkflowFinished, format!("workflow-runs/{}", w.id), &key, at, data)
}

/// The `validation.decided` message `hook` gets for a validation's outcome.
fn validation_message(hook: &WebhookDoc, v: &ValidationDoc, public_url: &str) -> Option<DeliveryDoc> {
    let at = v.validation.decided_at?;
    let state = v.validation.state.as_str();
    let data = serde_json::json!({
        "validation": {
            "id": v.id,
            "tenant": v.tenant,
            "project": v.project,
            "model_version": v.model_version,
            "state": state,
            "decisions": v.validation.decisions,
            "workflow_run": v.workflow_run,
            "url": format!("{public_url}/v1/validations/{}", v.id),
        },
        "decided_at": at,
    });
    let key = format!("{}/{state}", v.id);
    message(hook, EventType::ValidationDecided, format!("validations/{}", v.id), &key, at, data)
}

/// The `quota.warning` message `hook` gets, noticed at `now`, when `n` is
/// at or past a warning: one per quota, period and threshold (the id's time
/// is the period's start, so each tick's look finds the same message). A
/// limit on concurrent runs is not a budget being spent and warns of nothing.
fn quota_message(hook: &WebhookDoc, n: &QuotaNearness, now: Timestamp) -> Option<DeliveryDoc> {
    let warning = n.warning.filter(|_| n.limit != "concurrent_runs")?;
    let period = n.warning_period();
    let key = format!("quota/{}/{}/{warning}", n.limit, period.key(now));
    let id = derived_id(&hook.id, &key, period.start(now));
    let data = serde_json::json!({
        "tenant": hook.tenant,
        "quota": n,
        "period": period.key(now),
    });
    message_with_id(hook, EventType::QuotaWarning, format!("quotas/{}", n.limit), id, now, data)
}

/// The messages `hook` gets for the transitions of `run` at or after `since`.
fn messages(hook: &WebhookDoc, run: &RunDoc, since: Timestamp, public_url: &str) -> Vec<DeliveryDoc> {
    run.history()
        .iter()
        .enumerate()
        .filter(|(_, t)| t.at >= since)
        .filter_map(|(seq, t)| {
            let event = EventType::of_run_state(t.to).filter(|e| hook.events.contains(e))?;
            let (subject, key) = (format!("runs/{}", run.id()), format!("{}/{seq}", run.id()));
            message(hook, event, subject, &key, t.at, run_data(run, t, public_url))
        })
        .collect()
}

/// The endpoint events a webhook can hear of.
const ENDPOINT_EVENTS: [EventType; 2] = [EventType::EndpointReady, EventType::EndpointFailed];

/// The messages `hook` gets for the entries of `endpoint`'s history at or
/// after `since` that say it became ready or failed.
fn endpoint_messages(hook: &WebhookDoc, endpoint: &EndpointDoc, since: Timestamp) -> Vec<DeliveryDoc> {
    endpoint
        .events
        .iter()
        .filter(|e| e.at >= since)
        .filter_map(|e| {
            let event = match e.kind.as_str() {
                "ready" => EventType::EndpointReady,
                "failed" => EventType::EndpointFailed,
                _ => return None,
            };
            if !hook.events.contains(&event) {
                return None;
            }
            let data = serde_json::json!({
                "endpoint": {
                    "alias": endpoint.alias,
                    "tenant": endpoint.tenant,
                    "project": endpoint.project,
                    "status": endpoint.status,
                    "url": endpoint.url,
                    "revision": endpoint.stable,
                },
                "event": { "kind": e.kind, "detail": e.detail, "at": e.at },
            });
            let subject = format!("endpoints/{}", endpoint.alias);
            // The time in micros: the key must not change with how times are written.
            let key = format!("{}/{}/{}", endpoint.id, e.kind, e.at.as_micros());
            message(hook, event, subject, &key, e.at, data)
        })
        .collect()
}

/// What a run event says about the run.
fn run_data(run: &RunDoc, t: &Transition, public_url: &str) -> serde_json::Value {
    serde_json::json!({
        "run": {
            "id": run.id(),
            "tenant": run.tenant(),
            "project": run.project(),
            "method": run.method(),
            "dataset": run.dataset(),
            "name": run.labels().name,
            "tags": run.labels().tags,
            "state": t.to,
            "attempt": t.attempt,
            "class": run.class(),
            // How the transition's attempt ran other than asked (e.g. GPU_UNAVAILABLE).
            "warnings": run.warnings().iter().filter(|w| w.attempt == t.attempt).collect::<Vec<_>>(),
            "error": if t.to == mapi_domain::RunState::Failed { serde_json::to_value(run.error()).ok() } else { None },
            "url": format!("{public_url}/v1/runs/{}", run.id()),
        },
        "transition": { "from": t.from, "to": t.to, "reason": t.reason, "at": t.at },
    })
}

/// The id of the message to `hook` about what `key` names, at `at`.
fn derived_id(hook: &WebhookId, key: &str, at: Timestamp) -> DeliveryId {
    let digest = Sha256::digest(format!("{hook}/{key}").as_bytes());
    let mut ten = [0u8; 10];
    ten.copy_from_slice(&digest[..10]);
    DeliveryId::of_event(at, ten)
}

/// Re-pushes the due attempt of pending messages long overdue; how many,
/// and how many pushes failed.
async fn repush_overdue(state: &AppState) -> Result<(u32, u32), ApiError> {
    let now = state.clock.now();
    let overdue = Query::new(DeliveryDoc::COLLECTION)
        .filter("state", Op::Eq, DeliveryState::Pending.as_str())
        .filter("next_at", Op::Lt, (now - OVERDUE).to_rfc3339())
        .order_by("next_at", Direction::Asc)
        .limit(WEBHOOKS_PER_TICK);
    let (mut repushed, mut errors) = (0, 0);
    for doc in state.store.query(&overdue, None).await? {
        let m: DeliveryDoc = doc.decode()?;
        let next = m.attempts.iter().filter(|a| !a.replay).map(|a| a.attempt).max().unwrap_or(0) + 1;
        // A round of its own: the lost task's name is still taken.
        let round = Some(mapi_schema::tasks::round_of(now));
        let task = DeliverTask { delivery: m.id.clone(), attempt: next, replay: false };
        match push_deliver(&*state.queue, &task, None, round).await {
            Ok(()) => repushed += 1,
            Err(e) => {
                errors += 1;
                tracing::warn!(delivery = %m.id, error = %e, "re-pushing an overdue webhook message failed");
            }
        }
    }
    Ok((repushed, errors))
}
