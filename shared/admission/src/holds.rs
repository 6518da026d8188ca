//! Whether admitted compute may start now: the one answer the dispatcher
//! acts on (and a run's dry run reports) and the fan-out asks before each
//! batch of items. Work held back waits in its queue; it never fails for it.

use mapi_domain::{TenantId, Tier, Timestamp};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_quota::{KillSwitches, Period, counters};
use mapi_schema::{KillSwitchDoc, TenantDoc};

/// Why a run of `tenant` may not start now, and how many seconds until the
/// queue offers it again: the spend cap (until its period ends, at most an
/// hour), for a run of tenant code (`plugin`) the uploaded-code switch or an
/// executor that does not isolate it, the executor switched off by an
/// operator, or the shared-tier gate for `verified` and `public` tenants.
pub async fn held(
    state: &AppState,
    tenant: &TenantId,
    plugin: bool,
) -> Result<Option<(u64, String)>, ApiError> {
    // One read of the switches serves the spend cap and the uploaded-code switch.
    let switches = switches(state).await?;
    if let Some((wait, why)) = stopped_by(state, tenant, switches.as_ref()).await? {
        return Ok(Some((wait.min(3600), why)));
    }
    if plugin && let Some(why) = untrusted_code_held(state, switches.as_ref()) {
        return Ok(Some((HOLD_RETRY_S, why)));
    }
    gate(state, tenant).await
}

/// Why a queued run of plugin code may not be leased now: an operator
/// turned uploaded code off (runs already started finish), or the executor
/// does not isolate tenant code.
fn untrusted_code_held(state: &AppState, switches: Option<&KillSwitches>) -> Option<String> {
    if switches.is_some_and(|s| !s.untrusted_execution_enabled) {
        return Some(
            "uploaded code is switched off by an operator (kill switch untrusted_execution): \
             the run waits in the queue until it is switched on again"
                .to_owned(),
        );
    }
    let refusal = state.executor.capabilities().untrusted_code_refusal();
    refusal.map(|why| format!("{why}; the run waits in the queue"))
}

/// Why a plugin's model may not be deployed to an endpoint now, if it may
/// not: an operator turned uploaded code off (403), or the host does not
/// run tenant code in a sandbox (409). Scores of plugins' models already
/// deployed are refused by admission while the switch is off.
pub async fn plugin_serving_refused(state: &AppState) -> Result<Option<ApiError>, ApiError> {
    if switches(state).await?.is_some_and(|s| !s.untrusted_execution_enabled) {
        return Ok(Some(ApiError::new(
            mapi_problem::ProblemCode::Forbidden,
            "uploaded code is switched off by an operator (kill switch untrusted_execution): a plugin's model \
             is not deployed; built-in models keep serving",
        )));
    }
    Ok(state.hosting.uploaded_code_refusal().map(ApiError::precondition))
}

/// The platform's kill switches, when an operator set any.
async fn switches(state: &AppState) -> Result<Option<KillSwitches>, ApiError> {
    Ok(mapi_schema::get::<KillSwitchDoc>(&*state.store, KillSwitchDoc::ID).await?.map(|k| k.switches))
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

/// The platform's spend against its cap in the cap's current UTC period.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpendStanding {
    pub cap_micros: i64,
    pub spend_micros: i64,
    pub period: Period,
    /// The first instant of the period the spend is counted in.
    pub period_start: Timestamp,
    /// When the period ends (and the spend counts from zero again).
    pub period_end: Timestamp,
}

impl SpendStanding {
    /// Whether the spend has reached `percent` % of the cap (integer
    /// arithmetic: money never touches floating point).
    pub fn reached(&self, percent: u8) -> bool {
        i128::from(self.spend_micros) * 100 >= i128::from(self.cap_micros) * i128::from(percent)
    }
}

/// The platform's spend against its cap, when an operator set one.
pub async fn spend_standing(state: &AppState) -> Result<Option<SpendStanding>, ApiError> {
    standing_of(state, switches(state).await?.as_ref()).await
}

/// The spend against the cap `switches` set, if they set one.
async fn standing_of(
    state: &AppState,
    switches: Option<&KillSwitches>,
) -> Result<Option<SpendStanding>, ApiError> {
    let Some(switches) = switches else { return Ok(None) };
    let Some(cap_micros) = switches.spend_cap_micros else { return Ok(None) };
    let (now, period) = (state.clock.now(), switches.spend_cap_period);
    let spend = counters::read(&*state.store, &counters::platform_period(period, now)).await?.spend_micros;
    Ok(Some(SpendStanding {
        cap_micros,
        spend_micros: spend,
        period,
        period_start: period.start(now),
        period_end: period.end(now),
    }))
}

/// When the global spend cap is reached, no new compute starts except for
/// internal tenants: runs admitted earlier stay queued. `Some((seconds to
/// the cap's period end, why))` when the run must wait.
pub async fn compute_stopped(state: &AppState, tenant: &TenantId) -> Result<Option<(u64, String)>, ApiError> {
    stopped_by(state, tenant, switches(state).await?.as_ref()).await
}

/// [`compute_stopped`] under the switches already read.
async fn stopped_by(
    state: &AppState,
    tenant: &TenantId,
    switches: Option<&KillSwitches>,
) -> Result<Option<(u64, String)>, ApiError> {
    let Some(standing) = standing_of(state, switches).await? else { return Ok(None) };
    if !standing.reached(100) {
        return Ok(None);
    }
    let tier =
        mapi_schema::get::<TenantDoc>(&*state.store, tenant.as_str()).await?.map_or(Tier::Public, |t| t.tier);
    if tier == Tier::Internal {
        return Ok(None);
    }
    let wait = standing.period_end.since(state.clock.now()).as_secs().max(1);
    Ok(Some((
        wait,
        format!(
            "the platform's {} spend cap is reached: no new compute starts until it resets",
            standing.period.as_str()
        ),
    )))
}
