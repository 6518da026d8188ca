//! Moves one endpoint with what the host reports. Each call reads the
//! document and the host's state once, decides, asks the host for at most
//! one change, and writes the document only if nobody changed it meanwhile
//! (so a concurrent API call or a second tick wins, and the next call
//! decides again). Every step is safe to repeat.

use std::time::Duration;

use mapi_clock::Clock;
use mapi_domain::Timestamp;
use mapi_domain::endpoint::EndpointStatus;
use mapi_hosting::{Hosting, HostingError, Rollout, server_env};
use mapi_rollout::{Decision, Observation, Policy, Totals};
use mapi_store::typed::{tx_get, tx_put};
use mapi_store::{Store, StoreError, transact};
use serde_json::json;

use crate::stats::{SHARDS, StatsDoc, Usage};
use crate::{DEPLOY_TIMEOUT, EndpointDoc, Promotion, Serves};

/// What a reconciliation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reconciled {
    /// Nothing to do, or the host has not moved.
    Unchanged,
    /// The document changed.
    Changed,
    /// The endpoint is gone (deleted, or never was).
    Gone,
}

/// Why a reconciliation stopped early (it is repeated by the next tick).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Hosting(#[from] HostingError),
}

/// The ports a reconciliation uses.
#[derive(Clone, Copy, Debug)]
pub struct Ports<'a> {
    pub store: &'a dyn Store,
    pub hosting: &'a dyn Hosting,
    pub clock: &'a dyn Clock,
    pub http: &'a reqwest::Client,
    pub policy: &'a Policy,
}

/// Reads one revision's statistics, summed over its shards.
pub async fn usage_of(store: &dyn Store, endpoint: &str, tag: &str) -> Result<Usage, StoreError> {
    let mut docs = Vec::with_capacity(SHARDS as usize);
    for shard in 0..SHARDS {
        if let Some(d) =
            mapi_store::typed::get::<StatsDoc>(store, &StatsDoc::id_of(endpoint, tag, shard)).await?
        {
            docs.push(d);
        }
    }
    Ok(Usage::sum(&docs))
}

fn totals(u: &Usage) -> Totals {
    Totals { requests: u.requests, errors: u.errors, p99_ms: u.p99_ms() }
}

/// Reconciles the endpoint `id`.
pub async fn reconcile(ports: Ports<'_>, id: &str) -> Result<Reconciled, ReconcileError> {
    let Some(before) = mapi_store::typed::get::<EndpointDoc>(ports.store, id).await? else {
        return Ok(Reconciled::Gone);
    };
    if !before.needs_reconcile() {
        return Ok(Reconciled::Unchanged);
    }
    let now = ports.clock.now();
    let mut doc = before.clone();
    if doc.status == EndpointStatus::Deleting {
        return delete(ports, &before).await;
    }
    let state = match ports.hosting.get(&doc.service).await {
        Ok(s) => s,
        Err(HostingError::NotFound(_)) => {
            doc.status = EndpointStatus::Failed;
            doc.message = Some(format!("the service {} no longer exists at the host", doc.service));
            doc.promotion = None;
            doc.event(now, "failed", "the host has no such service");
            return commit(ports.store, &before, doc).await;
        }
        Err(e)
            if doc.status == EndpointStatus::Deploying
                && now.since(doc.rollout_started_at) >= DEPLOY_TIMEOUT =>
        {
            doc.status = EndpointStatus::Failed;
            doc.event(now, "failed", e.to_string());
            doc.message = Some(e.to_string());
            return commit(ports.store, &before, doc).await;
        }
        Err(e) => return Err(e.into()),
    };
    if doc.rescale {
        if state.scaling == doc.scaling {
            doc.rescale = false;
        } else {
            // Repeated until the host reports the bounds the document holds.
            ports.hosting.set_scaling(&doc.service, doc.scaling).await?;
        }
    }
    if doc.status == EndpointStatus::Deploying {
        let rollout = state.revision(&doc.stable).map(|r| r.rollout.clone()).unwrap_or(Rollout::Reconciling);
        match rollout {
            Rollout::Ready => {
                doc.status = EndpointStatus::Ready;
                doc.url = state.url.clone();
                doc.event(now, "ready", format!("revision {} serves 100 %", doc.stable));
            }
            Rollout::Failed(message) => {
                doc.status = EndpointStatus::Failed;
                doc.event(now, "failed", message.clone());
                doc.message = Some(message);
            }
            Rollout::Reconciling if now.since(doc.rollout_started_at) >= DEPLOY_TIMEOUT => {
                let message = format!("not ready within {} minutes", DEPLOY_TIMEOUT.as_secs() / 60);
                doc.status = EndpointStatus::Failed;
                doc.event(now, "failed", message.clone());
                doc.message = Some(message);
            }
            Rollout::Reconciling => return Ok(Reconciled::Unchanged),
        }
        return commit(ports.store, &before, doc).await;
    }
    if let Some(promotion) = doc.promotion.clone() {
        promote_step(ports, &mut doc, promotion, &state, now).await?;
    }
    commit(ports.store, &before, doc).await
}

/// One step of a promotion: the canary's rollout, its smoke test, the gate.
async fn promote_step(
    ports: Ports<'_>,
    doc: &mut EndpointDoc,
    mut p: Promotion,
    state: &mapi_hosting::ServiceState,
    now: Timestamp,
) -> Result<(), ReconcileError> {
    let observed = state.traffic.iter().find(|t| t.tag == p.tag).map(|t| t.percent).or(Some(0));
    let rollout = state.revision(&p.tag).map(|r| r.rollout.clone()).unwrap_or(Rollout::Reconciling);
    let (gate, decision) = match rollout {
        Rollout::Failed(m) => p.gate.rollback(now, &format!("revision {} failed to start: {m}", p.tag)),
        Rollout::Reconciling if now.since(p.started_at) >= DEPLOY_TIMEOUT => {
            p.gate.rollback(now, &format!("revision {} was not ready within 10 minutes", p.tag))
        }
        Rollout::Reconciling => return Ok(()),
        Rollout::Ready => {
            if p.smoke.is_none() {
                let result = smoke(ports, doc, &p.tag).await;
                let detail = match &result {
                    Ok(()) => format!("revision {} passed its smoke test", p.tag),
                    Err(e) => format!("revision {} failed its smoke test: {e}", p.tag),
                };
                doc.event(now, "smoke", detail);
                p.smoke = Some(result);
            }
            let canary = usage_of(ports.store, &doc.id, &p.tag).await?;
            let stable = usage_of(ports.store, &doc.id, &doc.stable).await?;
            let obs = Observation {
                now,
                smoke: p.smoke.clone(),
                observed_canary_percent: observed,
                canary: totals(&canary),
                stable: totals(&stable),
            };
            p.gate.observe(ports.policy, &obs)
        }
    };
    let was = p.gate.desired_percent();
    p.gate = gate;
    if let Decision::SetCanary(percent) = decision {
        let split = doc.split(&p.tag, percent);
        if percent != was {
            doc.event(now, "traffic", format!("revision {} at {percent} %", p.tag));
        }
        doc.traffic = split.clone();
        // A lost answer is repeated by the next step: the gate waits for the host to show the split.
        if let Err(e) = ports.hosting.set_traffic(&doc.service, &split).await {
            tracing::warn!(endpoint = %doc.id, error = %e, "the traffic split was not set; retried next tick");
        }
    }
    if p.gate.is_promoted() && observed == Some(100) {
        doc.previous = Some(doc.stable.clone());
        doc.stable = p.tag.clone();
        doc.traffic = doc.split(&p.tag, 0);
        let served = doc.revision(&p.tag).map(crate::Revision::served).unwrap_or_default();
        doc.event(now, "promoted", format!("{served} serves 100 % as revision {}", p.tag));
        doc.promotion = None;
    } else if let Some(reason) = p.gate.rolled_back_reason()
        && observed == Some(0)
    {
        doc.traffic = doc.split(&p.tag, 0);
        doc.event(now, "rolled_back", format!("revision {} rolled back: {reason}", p.tag));
        doc.promotion = None;
    } else {
        doc.promotion = Some(p);
    }
    Ok(())
}

/// The smoke test: the revision's health path, then its example. A model
/// version's stored example must score as the fit predicted it; a
/// container's example (when it has one) must answer a 2xx.
async fn smoke(ports: Ports<'_>, doc: &EndpointDoc, tag: &str) -> Result<(), String> {
    let revision = doc.revision(tag).ok_or_else(|| format!("no revision {tag}"))?;
    let route = ports.hosting.route(&doc.service, Some(tag)).await.map_err(|e| e.to_string())?;
    let send = |req: reqwest::RequestBuilder| {
        let req = req.timeout(Duration::from_secs(30));
        match &route.authorization {
            Some(a) => req.header("authorization", a),
            None => req,
        }
    };
    let health_path = revision.container().map_or(server_env::HEALTH_PATH, |c| c.health_path.as_str());
    let health = send(ports.http.get(format!("{}{health_path}", route.url)))
        .send()
        .await
        .map_err(|e| format!("health check: {e}"))?;
    if !health.status().is_success() {
        return Err(format!("health check answered {}", health.status()));
    }
    match &revision.serves {
        Serves::Model(model) => {
            let Some((inputs, want)) = &model.example else { return Ok(()) };
            let resp = send(ports.http.post(format!("{}{}", route.url, server_env::PREDICT_PATH)))
                .json(&json!({"rows": [inputs]}))
                .send()
                .await
                .map_err(|e| format!("scoring the example: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("scoring the example answered {}", resp.status()));
            }
            let body: serde_json::Value =
                resp.json().await.map_err(|e| format!("scoring the example: {e}"))?;
            let got = body["predictions"][0]["value"].as_f64().ok_or("the answer has no prediction")?;
            if (got - want).abs() > 1e-9 * want.abs().max(1.0) {
                return Err(format!("the example scored {got}, the fit predicted {want}"));
            }
            Ok(())
        }
        Serves::Container(c) => {
            let Some(example) = &c.container.example else { return Ok(()) };
            let url = format!("{}{}", route.url, example.path);
            let req = match &example.body {
                Some(body) => ports.http.post(url).json(body),
                None => ports.http.get(url),
            };
            let resp = send(req).send().await.map_err(|e| format!("the example request: {e}"))?;
            if !resp.status().is_success() {
                return Err(format!("the example request {} answered {}", example.path, resp.status()));
            }
            Ok(())
        }
    }
}

/// Deletes the service, then the document and its statistics.
async fn delete(ports: Ports<'_>, doc: &EndpointDoc) -> Result<Reconciled, ReconcileError> {
    match ports.hosting.delete(&doc.service).await {
        Ok(()) | Err(HostingError::NotFound(_)) => {}
        Err(e) => return Err(e.into()),
    }
    let doc = doc.clone();
    let doc = &doc;
    transact::<_, StoreError, _, _>(ports.store, |mut tx| async move {
        if tx_get::<EndpointDoc>(&mut tx, &doc.id).await?.is_some() {
            tx.delete(&mapi_store::typed::key::<EndpointDoc>(&doc.id)?);
        }
        for r in &doc.revisions {
            for shard in 0..SHARDS {
                tx.delete(&mapi_store::typed::key::<StatsDoc>(&StatsDoc::id_of(&doc.id, &r.tag, shard))?);
            }
        }
        Ok(tx.finish(()))
    })
    .await?;
    Ok(Reconciled::Gone)
}

/// Writes `doc` if the stored one is still `before`.
async fn commit(
    store: &dyn Store,
    before: &EndpointDoc,
    mut doc: EndpointDoc,
) -> Result<Reconciled, ReconcileError> {
    doc.active = doc.needs_reconcile();
    if doc == *before {
        return Ok(Reconciled::Unchanged);
    }
    let (before, doc) = (before, &doc);
    let written = transact::<_, StoreError, _, _>(store, |mut tx| async move {
        let current = tx_get::<EndpointDoc>(&mut tx, &doc.id).await?;
        if current.as_ref() != Some(before) {
            return Ok(tx.finish(false));
        }
        tx_put(&mut tx, doc)?;
        Ok(tx.finish(true))
    })
    .await?;
    Ok(if written { Reconciled::Changed } else { Reconciled::Unchanged })
}
