//! `POST …/endpoints/{alias}:scale`: an endpoint's instance bounds. A change
//! is admitted as a creation is (its maximum with the tenant's other
//! endpoints' under `endpoint_instances`, the class gate, the spend cap), on
//! the room the tenant's endpoints hold at the commit, so two changes at
//! once are never admitted on the same room. The host gets the bounds
//! without a new revision; a lost answer is repeated by the tick
//! (`EndpointDoc::rescale`).

use mapi_admission::quota;
use mapi_api::endpoints::ScaleEndpoint;
use mapi_domain::endpoint::{Accelerator, EndpointStatus};
use mapi_endpoints::EndpointDoc;
use mapi_hosting::Scaling;
use mapi_identity::{Audit, Caller};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{InstanceWatermark, tx_create, tx_get, tx_put};
use mapi_store::transact;

use super::endpoint_access::hosting_error;
use super::endpoint_room::{admission_of, held_instances, tenant_endpoints};

/// Sets `doc`'s bounds to those `body` asks (a bound left out stays).
pub(super) async fn scale(
    state: &AppState,
    (caller, tier): (&Caller, mapi_domain::Tier),
    doc: EndpointDoc,
    body: &ScaleEndpoint,
) -> Result<EndpointDoc, ApiError> {
    if !matches!(doc.status, EndpointStatus::Ready | EndpointStatus::Deploying) {
        return Err(ApiError::precondition(format!(
            "endpoint {} is {}: only a deploying or ready endpoint scales",
            doc.alias, doc.status
        )));
    }
    let from = doc.scaling;
    let to =
        Scaling { min: body.min_instances.unwrap_or(from.min), max: body.max_instances.unwrap_or(from.max) };
    to.check().map_err(ApiError::invalid)?;
    let mut asked = doc.clone();
    asked.scaling = to;
    let held = held_instances(&state.store.query(&tenant_endpoints(&doc.tenant), None).await?, &doc.id)?;
    let request = admission_of(caller, tier, &asked, held);
    let mark = idle_charge_start(state, &doc, from, to).await?;
    let (asked, mark) = (&asked, &mark);
    let doc = quota::admit_and_commit(state, &request, |plan| async move {
        let bumps = &plan.bumps;
        let now = state.clock.now();
        let record = Audit::by(caller, "endpoint.scale", format!("endpoints/{}", asked.id))
            .tenant(&asked.tenant)
            .project(&asked.project)
            .detail(format!("instances {}…{} (were {}…{})", to.min, to.max, from.min, from.max))
            .into_doc(now, &*state.entropy);
        let record = &record;
        transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
            let others = tx.query(&tenant_endpoints(&asked.tenant)).await?;
            if held_instances(&others, &asked.id)? > held {
                return Err(ApiError::unavailable(
                    "another endpoint of the tenant changed at the same moment: retry",
                    1,
                ));
            }
            let mut doc = tx_get::<EndpointDoc>(&mut tx, &asked.id)
                .await?
                .ok_or_else(|| ApiError::not_found(format!("endpoint {} not found", asked.alias)))?;
            if doc.scaling != from || !matches!(doc.status, EndpointStatus::Ready | EndpointStatus::Deploying)
            {
                return Err(ApiError::precondition(
                    "the endpoint changed meanwhile: look at it and try again",
                ));
            }
            doc.scaling = to;
            doc.rescale = true;
            doc.active = true;
            doc.updated_at = now;
            doc.event(
                now,
                "scaled",
                format!("instances {}…{} (were {}…{})", to.min, to.max, from.min, from.max),
            );
            bumps.apply(&mut tx)?;
            if let Some(mark) = mark {
                tx_put(&mut tx, mark)?;
            }
            tx_put(&mut tx, &doc)?;
            tx_create(&mut tx, record)?;
            Ok(tx.finish(doc))
        })
        .await
    })
    .await?;
    // A lost answer leaves `rescale` set: the tick repeats the call.
    match state.hosting.set_scaling(&doc.service, to).await {
        Ok(()) => {}
        Err(e) if e.is_retryable() => {
            tracing::warn!(endpoint = %doc.id, error = %e, "the host did not answer; the tick repeats it")
        }
        Err(e) => return Err(hosting_error(e)),
    }
    state.ask_for_tick().await;
    Ok(doc)
}

/// Where a request-billed (CPU) endpoint's idle charge starts when its
/// minimum rises from zero: now, with the busy time its scores have taken
/// so far, so the time it scaled to zero is never charged as idle.
async fn idle_charge_start(
    state: &AppState,
    doc: &EndpointDoc,
    from: Scaling,
    to: Scaling,
) -> Result<Option<InstanceWatermark>, ApiError> {
    if doc.accelerator != Accelerator::Cpu || from.min > 0 || to.min == 0 {
        return Ok(None);
    }
    let mut busy_ms = 0;
    for r in &doc.revisions {
        busy_ms += mapi_endpoints::reconcile::usage_of(&*state.store, &doc.id, &r.tag).await?.compute_ms;
    }
    Ok(Some(InstanceWatermark {
        id: doc.id.clone(),
        tenant: doc.tenant.clone(),
        project: doc.project.clone(),
        until: state.clock.now(),
        busy_ms,
    }))
}
