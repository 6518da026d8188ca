//! Whether a queued run may be placed on the executor now: the one answer
//! the dispatcher acts on and a dry run reports. A run held back waits in
//! the queue; it never fails for it.

use mapi_domain::TenantId;
use mapi_platform::AppState;
use mapi_problem::ApiError;

/// Why a run of `tenant` may not start now, and how many seconds until the
/// queue offers it again: the spend cap (until its period ends, at most an
/// hour), the executor switched off by an operator, or the shared-tier gate
/// for `verified` and `public` tenants.
pub async fn held(state: &AppState, tenant: &TenantId) -> Result<Option<(u64, String)>, ApiError> {
    if let Some((wait, why)) = crate::quota::compute_stopped(state, tenant).await? {
        return Ok(Some((wait.min(3600), why)));
    }
    gate(state, tenant).await
}

/// How long a run held back by the executor's switch or the shared-tier
/// gate waits before the queue offers it again.
const HOLD_RETRY_S: u64 = 300;

/// Why a queued run may not be placed on the executor now, if it may not:
/// the operators disabled the executor, or the run's tenant is `verified`
/// or `public` and the shared-tier gate is closed. Such runs wait in the
/// queue; they never fail for it.
async fn gate(state: &AppState, tenant: &TenantId) -> Result<Option<(u64, String)>, ApiError> {
    let caps = state.executor.capabilities();
    let doc = mapi_schema::get::<mapi_schema::ExecutorDoc>(&*state.store, &caps.executor).await?;
    if let Some(d) = doc.as_ref().filter(|d| !d.enabled) {
        let reason = d.reason.clone().unwrap_or_default();
        return Ok(Some((
            HOLD_RETRY_S,
            format!("executor {} is disabled by an operator: {reason}", caps.executor),
        )));
    }
    let tier =
        mapi_schema::get::<mapi_schema::TenantDoc>(&*state.store, tenant.as_str()).await?.map(|t| t.tier);
    if !matches!(tier, Some(mapi_domain::Tier::Verified | mapi_domain::Tier::Public)) {
        return Ok(None);
    }
    let evidence = doc.and_then(|d| d.evidence);
    let gate = mapi_executor::evidence::shared_tier_gate(
        &caps,
        evidence.as_ref(),
        state.clock.now(),
        state.config.evidence_max_age,
    );
    if gate.shared_tiers_enabled {
        return Ok(None);
    }
    Ok(Some((
        HOLD_RETRY_S,
        format!(
            "shared tiers are not open on executor {}: {}; the run waits in the queue",
            caps.executor, gate.message
        ),
    )))
}
