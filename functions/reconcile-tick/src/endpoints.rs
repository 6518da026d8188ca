//! The tick's endpoint sweep: every endpoint with something left to do
//! (deploying, promoting, deleting) is reconciled once, a page at a time.

use mapi_endpoints::EndpointDoc;
use mapi_endpoints::reconcile::{Ports, Reconciled, reconcile};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_store::Op;
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
