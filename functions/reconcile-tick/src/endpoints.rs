//! The tick's endpoint sweep: every endpoint with something left to do
//! (deploying, promoting, deleting) is reconciled once, a page at a time;
//! and instance-billed endpoints' idle instance time is charged.

use std::time::Duration;

use mapi_domain::Timestamp;
use mapi_domain::endpoint::Accelerator;
use mapi_endpoints::EndpointDoc;
use mapi_endpoints::reconcile::{Ports, Reconciled, reconcile};
use mapi_metering::Payer;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{InstanceWatermark, tx_get, tx_put};
use mapi_store::Op;
use mapi_store::transact;
use mapi_store::typed::Doc;

/// The most endpoints one tick reconciles.
const PAGE: u32 = 200;

/// The gate's policy as configured.
pub fn policy(state: &AppState) -> mapi_rollout::Policy {
    mapi_rollout::Policy {
        min_step_time: state.config.endpoints_step,
        min_requests: state.config.endpoints_step_requests,
        p99_slack: state.config.endpoints_p99_slack,
        ..mapi_rollout::Policy::default()
    }
}

/// Reconciles the active endpoints; answers (changed, failed, whether any was active).
pub async fn sweep(state: &AppState) -> Result<(u32, u32, bool), ApiError> {
    let q = mapi_store::Query::new(EndpointDoc::COLLECTION).filter("active", Op::Eq, true).limit(PAGE);
    let docs = state.store.query(&q, None).await?;
    let open = !docs.is_empty();
    let policy = policy(state);
    let ports = Ports {
        store: &*state.store,
        hosting: &*state.hosting,
        clock: &*state.clock,
        http: &state.http,
        policy: &policy,
    };
    let (mut changed, mut failed) = (0, 0);
    for doc in docs {
        let id = doc.decode::<EndpointDoc>()?.doc_id();
        match reconcile(ports, &id).await {
            Ok(Reconciled::Changed | Reconciled::Gone) => changed += 1,
            Ok(Reconciled::Unchanged) => {}
            Err(e) => {
                failed += 1;
                tracing::warn!(endpoint = %id, error = %e, "reconciling an endpoint failed; the next tick retries");
            }
        }
    }
    Ok((changed, failed, open))
}

/// Charges the idle instance time of instance-billed (L4) endpoints and of
/// request-billed (CPU) ones with a minimum of instances, each in
/// windows of at least `MAPI_ENDPOINTS_CHARGE_S` from where its watermark
/// stands to where the host's report is complete, as the host reports its
/// instances' lifetimes; answers how
/// many were charged. An endpoint whose host reports no lifetimes is left
/// as it is.
pub async fn charge_instances(state: &AppState) -> Result<u32, ApiError> {
    // Instance-billed L4 endpoints, and request-billed CPU ones that keep instances warm.
    let l4 = mapi_store::Query::new(EndpointDoc::COLLECTION)
        .filter("accelerator", Op::Eq, Accelerator::L4.as_str())
        .limit(PAGE);
    let warm = mapi_store::Query::new(EndpointDoc::COLLECTION).filter("scaling.min", Op::Gt, 0).limit(PAGE);
    let decoded = |docs: Vec<mapi_store::Document>| {
        docs.iter().map(|d| d.decode::<EndpointDoc>()).collect::<Result<Vec<_>, _>>()
    };
    let mut docs = decoded(state.store.query(&l4, None).await?)?;
    // A warm L4 endpoint is in both answers: charged once, as an L4.
    let warm = decoded(state.store.query(&warm, None).await?)?;
    docs.extend(warm.into_iter().filter(|e| e.accelerator == Accelerator::Cpu));
    let mut charged = 0;
    for doc in docs {
        match charge_instance(state, &doc).await {
            Ok(true) => charged += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(endpoint = %doc.id, error = %e, "charging instance time failed; the next tick retries")
            }
        }
    }
    Ok(charged)
}

/// Charges one endpoint's window, if one is due: its instances' time up in
/// it, less the time its scores took (they charged themselves), in one
/// commit with its watermark's move, so a window is charged once.
async fn charge_instance(state: &AppState, doc: &EndpointDoc) -> Result<bool, ApiError> {
    let store = &*state.store;
    // The window ends where the host's report is complete.
    let lag = state.hosting.reporting_lag();
    let now = state.clock.now();
    let to = Timestamp::from_micros(now.as_micros() - i64::try_from(lag.as_micros()).unwrap_or(i64::MAX));
    let mark = mapi_schema::get::<InstanceWatermark>(store, &doc.id).await?;
    // A watermark older than the endpoint is a deleted one's of the same alias.
    let stood = mark.as_ref().map(|m| m.until);
    let from = stood.map_or(doc.created_at, |until| until.max(doc.created_at));
    if to.since(from) < state.config.endpoints_charge {
        return Ok(false);
    }
    let Some(instance) = state.hosting.instance_time(&doc.service, (from, to)).await.map_err(hosting)? else {
        return Ok(false);
    };
    let mut busy_ms = 0;
    for r in &doc.revisions {
        busy_ms += mapi_endpoints::reconcile::usage_of(store, &doc.id, &r.tag).await?.compute_ms;
    }
    let seen = mark.as_ref().filter(|m| m.until >= doc.created_at).map_or(0, |m| m.busy_ms);
    let busy = Duration::from_millis(busy_ms.saturating_sub(seen));
    state.rollups_started().await?;
    let payer = Payer { tenant: &doc.tenant, project: &doc.project, token: None };
    let charge = mapi_metering::instance(
        &payer,
        (&doc.id, doc.accelerator, doc.scaling.min),
        (from, to),
        (instance, busy),
        now,
    );
    let next = InstanceWatermark {
        id: doc.id.clone(),
        tenant: doc.tenant.clone(),
        project: doc.project.clone(),
        until: to,
        busy_ms,
    };
    let (charge, next) = (&charge, &next);
    transact::<_, ApiError, _, _>(store, |mut tx| async move {
        if tx_get::<InstanceWatermark>(&mut tx, &next.id).await?.map(|m| m.until) != stood {
            // Another tick charged it meanwhile.
            return Ok(tx.finish(false));
        }
        charge.write(&mut tx)?;
        tx_put(&mut tx, next)?;
        Ok(tx.finish(true))
    })
    .await
}

fn hosting(e: mapi_hosting::HostingError) -> ApiError {
    ApiError::unavailable(format!("the host: {e}"), 1)
}
