//! Admission: the three levels of quotas (the token's, the tenant's policy
//! or tier defaults, the platform's) and the kill switches.
//!
//! A request is first checked against what is in use now (the sum of each
//! counter's shards), which gives the refusal its detail and Retry-After;
//! then its reservation is written as guarded increments of the shards with
//! room, in the same commit as the run or dataset, each increment at most
//! its shard's share of the limit (see `mapi_runs::counters`). Racing
//! requests therefore never over-admit (the shares add up to the limit, and
//! the store checks each where it writes it) and never conflict with each
//! other (increments read nothing); a race for the last room of one shard
//! fails the commit, and the request is planned again.

use mapi_domain::{TenantId, Tier, Timestamp};
use mapi_identity::{Audit, Caller, audit};
use mapi_platform::AppState;
use mapi_problem::{ApiError, ProblemCode};
use mapi_quota::{
    Ask, Limits, Period, Refusal, RefusalCode, TokenBudget, Usage, admit, effective, platform_limits,
};
use mapi_runs::counters::{self, Bumps, CounterDoc, Hold, Reservation, field};
use mapi_runs::{BudgetPeriod, KillSwitchDoc, Outcome, QuotaPolicyDoc, TenantDoc, TokenDoc};

/// What an admitted request writes, and the limits it was admitted under.
#[derive(Debug, Clone)]
pub struct Plan {
    pub bumps: Bumps,
    pub reservation: Option<Reservation>,
    /// The tenant's limits in force (its policy's, else its tier's).
    pub limits: Limits,
}

fn budget_of(token: Option<&TokenDoc>) -> Option<TokenBudget> {
    token.and_then(|t| t.budget.as_ref()).map(|b| TokenBudget {
        vcpu_seconds: b.vcpu_seconds,
        period: match b.period {
            BudgetPeriod::Day => Period::Day,
            BudgetPeriod::Month => Period::Month,
        },
    })
}

fn limit_ms(seconds: Option<u64>) -> Option<i64> {
    seconds.map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))
}

fn limit(n: Option<impl Into<u64>>) -> Option<i64> {
    n.map(|n| i64::try_from(n.into()).unwrap_or(i64::MAX))
}

/// Checks `ask` against what is in use now and plans its reservation.
/// `tier` is the tenant's, as the caller's authorization read it. `seed`
/// (the run's or dataset's id) picks the counter shards it starts from.
#[allow(clippy::too_many_arguments)]
pub async fn plan(
    state: &AppState,
    now: Timestamp,
    tenant: &TenantId,
    tier: Tier,
    token: Option<&TokenDoc>,
    ask: &Ask,
    seed: &str,
) -> Result<Result<Plan, Refusal>, ApiError> {
    let store = &*state.store;
    let budget = budget_of(token);
    let token_counter =
        token.zip(budget.as_ref()).map(|(t, b)| counters::token_period(t.public_id(), b.period, now));
    let (total, day, month, minute) = (
        counters::tenant(tenant),
        counters::tenant_period(tenant, Period::Day, now),
        counters::tenant_period(tenant, Period::Month, now),
        counters::tenant_minute(tenant, now),
    );
    // One read for everything admission looks at: the policy, the kill
    // switches and the counters' shards (both spend periods: the switches
    // say which).
    let mut names = vec![
        total.clone(),
        day.clone(),
        month.clone(),
        minute.clone(),
        counters::PLATFORM.to_owned(),
        counters::platform_period(Period::Day, now),
        counters::platform_period(Period::Month, now),
    ];
    names.extend(token_counter.clone());
    let mut keys = vec![
        mapi_runs::key::<QuotaPolicyDoc>(tenant.as_str())?,
        mapi_runs::key::<KillSwitchDoc>(KillSwitchDoc::ID)?,
    ];
    keys.extend(counters::keys(&names)?);
    let docs = store.get(&keys, None).await?;
    let policy = docs[0].as_ref().map(|d| d.decode::<QuotaPolicyDoc>()).transpose()?.map(|p| p.policy);
    let switches = docs[1]
        .as_ref()
        .map(|d| d.decode::<KillSwitchDoc>())
        .transpose()?
        .map(|k| k.switches)
        .unwrap_or_default();
    let read = counters::Sharded::decode_all(&names, &docs[2..])?;
    let sums: Vec<CounterDoc> = read.iter().map(counters::Sharded::total).collect();
    let spend_index = if switches.spend_cap_period == Period::Day { 5 } else { 6 };
    let (c_total, c_day, c_month, c_minute, c_platform, c_spend) =
        (&sums[0], &sums[1], &sums[2], &sums[3], &sums[4], &sums[spend_index]);
    let c_token = sums.get(7).cloned().unwrap_or_default();
    let usage = Usage {
        token_vcpu_ms: c_token.vcpu_ms(),
        tenant_requests_this_minute: u32::try_from(c_minute.requests).unwrap_or(u32::MAX),
        tenant_active_runs: u32::try_from(c_total.active_runs).unwrap_or(u32::MAX),
        tenant_vcpu_ms_day: c_day.vcpu_ms(),
        tenant_vcpu_ms_month: c_month.vcpu_ms(),
        tenant_storage_bytes: u64::try_from(c_total.storage_bytes).unwrap_or(0),
        platform_active_runs: u32::try_from(c_platform.active_runs).unwrap_or(u32::MAX),
        platform_spend_micros: c_spend.spend_micros,
    };
    let limits: Limits = effective(tier, policy.as_ref());
    let platform = Limits {
        concurrent_runs: Some(state.config.platform_concurrent_runs),
        max_items_per_job: Some(state.config.jobs.max_items),
        ..platform_limits()
    };
    if let Err(refusal) = admit(now, tier, budget.as_ref(), &limits, &platform, &switches, &usage, ask) {
        return Ok(Err(refusal));
    }
    // The same limits, as guards on the increments of the shards with room,
    // in the order of the checks. The check above passed, so every take
    // finds room unless the shards' counts are uneven past their shares
    // (see `counters`): that is answered as a race, to be retried.
    let take = |c: &counters::Sharded, field: &str, amount: i64, limit: Option<i64>| {
        c.take(field, amount, limit, seed)
            .ok_or_else(|| ApiError::unavailable(format!("{} has no shard with room now: retry", c.name), 1))
    };
    let mut bumps = Bumps::default();
    let reservation = match ask {
        Ask::Run { vcpu_ms, .. } => {
            let held = i64::try_from(*vcpu_ms).unwrap_or(i64::MAX);
            let mut holds = Vec::new();
            let mut budget_takes = |bumps: &mut Bumps, c: &counters::Sharded, max: Option<i64>| {
                let takes = take(c, field::COMMITTED, held, max)?;
                for t in &takes {
                    bumps.add(&t.shard, field::RESERVED, t.amount);
                    bumps.guarded(&t.shard, field::COMMITTED, t.amount, t.at_most);
                    holds.push(Hold {
                        shard: t.shard.clone(),
                        vcpu_ms: u64::try_from(t.amount).unwrap_or(0),
                        at_most: t.at_most,
                        limit: max,
                    });
                }
                Ok::<_, ApiError>(())
            };
            if let (Some(c), Some(b)) = (read.get(7), &budget) {
                budget_takes(&mut bumps, c, limit_ms(Some(b.vcpu_seconds)))?;
            }
            bumps.take(
                field::REQUESTS,
                &take(&read[3], field::REQUESTS, 1, limit(limits.requests_per_minute))?,
            );
            let tenant_slot = take(&read[0], field::ACTIVE, 1, limit(limits.concurrent_runs))?;
            bumps.take(field::ACTIVE, &tenant_slot);
            budget_takes(&mut bumps, &read[1], limit_ms(limits.vcpu_seconds_per_day))?;
            budget_takes(&mut bumps, &read[2], limit_ms(limits.vcpu_seconds_per_month))?;
            let platform_slot = take(&read[4], field::ACTIVE, 1, limit(platform.concurrent_runs))?;
            bumps.take(field::ACTIVE, &platform_slot);
            Some(Reservation {
                vcpu_ms: *vcpu_ms,
                budgets: Vec::new(),
                at_most: Vec::new(),
                slots: tenant_slot.into_iter().chain(platform_slot).map(|t| t.shard).collect(),
                holds,
            })
        }
        Ask::Job { .. } => {
            // A job's compute is reserved item by item as the fan-out
            // enqueues them; admission takes only the request.
            bumps.take(
                field::REQUESTS,
                &take(&read[3], field::REQUESTS, 1, limit(limits.requests_per_minute))?,
            );
            None
        }
        Ask::Upload { bytes } => {
            bumps.take(
                field::REQUESTS,
                &take(&read[3], field::REQUESTS, 1, limit(limits.requests_per_minute))?,
            );
            let bytes = i64::try_from(*bytes).unwrap_or(i64::MAX);
            bumps.take(field::STORAGE, &take(&read[0], field::STORAGE, bytes, limit(limits.storage_bytes))?);
            None
        }
    };
    Ok(Ok(Plan { bumps, reservation, limits }))
}

pub use mapi_runs::counters::reserve_ms;

/// How many times a request is planned again after its commit lost a race
/// for a shard's last room.
pub const RACE_RETRIES: u32 = 4;

/// A guard failed in the commit: another request took what the first check
/// saw free. Checking again names the limit that is now reached, or, when
/// there is room still (in another shard), gives the plan to commit again,
/// `attempt` (from 1) being how many commits were refused so far.
#[allow(clippy::too_many_arguments)]
pub async fn raced(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantId,
    tier: Tier,
    what: &str,
    ask: &Ask,
    seed: &str,
    attempt: u32,
) -> Result<Plan, ApiError> {
    match plan(state, state.clock.now(), tenant, tier, caller.token(), ask, seed).await {
        Ok(Err(r)) => Err(refused(state, caller, tenant, what, r).await),
        Ok(Ok(plan)) if attempt < RACE_RETRIES => Ok(plan),
        Ok(Ok(_)) => Err(ApiError::unavailable("a quota changed while the request was admitted: retry", 1)),
        Err(e) => Err(e),
    }
}

/// Who asks for what: the inputs of one admission.
#[derive(Debug)]
pub struct Request<'a> {
    pub caller: &'a Caller,
    pub tenant: &'a TenantId,
    /// The tenant's, as the caller's authorization read it.
    pub tier: Tier,
    pub ask: Ask,
    /// The new document's id: picks the counter shards it starts from.
    pub seed: &'a str,
    /// What is asked for, for the audit of a refusal (`projects/…/runs`).
    pub what: String,
}

/// Whether a commit failed on a guarded increment: a racing request took
/// what the check before it saw free.
pub fn is_limit(e: &ApiError) -> bool {
    e.code() == ProblemCode::QuotaExceeded
}

/// The one admission of runs, uploads and item jobs: checks the request
/// against the quotas (a refusal is audited and answered), then runs
/// `commit` with the plan, which writes the plan's increments in the
/// request's own transaction. A commit that lost a race for a shard's last
/// room is planned again from a fresh read ([`RACE_RETRIES`] times).
pub async fn admit_and_commit<T, F, Fut>(
    state: &AppState,
    req: &Request<'_>,
    commit: F,
) -> Result<T, ApiError>
where
    F: FnMut(Plan) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let first = admission(state, req).await?;
    commit_admitted(state, req, first, commit).await
}

/// The first half of [`admit_and_commit`], for a request that has work to
/// do between its admission and its commit: the plan, or the refusal
/// (audited) as the answer.
pub async fn admission(state: &AppState, req: &Request<'_>) -> Result<Plan, ApiError> {
    let now = state.clock.now();
    match plan(state, now, req.tenant, req.tier, req.caller.token(), &req.ask, req.seed).await? {
        Ok(plan) => Ok(plan),
        Err(r) => Err(refused(state, req.caller, req.tenant, &req.what, r).await),
    }
}

/// The second half of [`admit_and_commit`]: commits with `first`, planning
/// again after each commit that lost a race.
pub async fn commit_admitted<T, F, Fut>(
    state: &AppState,
    req: &Request<'_>,
    first: Plan,
    mut commit: F,
) -> Result<T, ApiError>
where
    F: FnMut(Plan) -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let (mut plan, mut lost) = (first, 0);
    loop {
        match commit(plan).await {
            Err(e) if is_limit(&e) => {
                lost += 1;
                plan = raced(state, req.caller, req.tenant, req.tier, &req.what, &req.ask, req.seed, lost)
                    .await?;
            }
            other => return other,
        }
    }
}

/// The problem code a refusal is answered with.
pub fn problem_code(code: RefusalCode) -> ProblemCode {
    match code {
        RefusalCode::QuotaExceeded => ProblemCode::QuotaExceeded,
        RefusalCode::RateLimited => ProblemCode::RateLimited,
        RefusalCode::Forbidden => ProblemCode::Forbidden,
    }
}

/// Answers a refusal (and audits it as a quota denial).
pub async fn refused(
    state: &AppState,
    caller: &Caller,
    tenant: &TenantId,
    what: &str,
    r: Refusal,
) -> ApiError {
    let code = problem_code(r.code);
    let entry = Audit::by(caller, "quota.denied", what.to_owned())
        .tenant(tenant)
        .outcome(Outcome::Denied, code)
        .detail(format!("{} {}: {}", r.level.as_str(), r.limit, r.detail));
    audit(state, entry).await;
    ApiError::Problem { code, detail: r.detail, retry_after_s: r.retry_after_s }
}

/// When the global spend cap is reached, no new compute starts except for
/// internal tenants: runs admitted earlier stay queued. `Some((seconds to
/// the cap's period end, why))` when the run must wait.
pub async fn compute_stopped(state: &AppState, tenant: &TenantId) -> Result<Option<(u64, String)>, ApiError> {
    let Some(switches) =
        mapi_runs::get::<KillSwitchDoc>(&*state.store, KillSwitchDoc::ID).await?.map(|k| k.switches)
    else {
        return Ok(None);
    };
    let Some(cap) = switches.spend_cap_micros else { return Ok(None) };
    let tier =
        mapi_runs::get::<TenantDoc>(&*state.store, tenant.as_str()).await?.map_or(Tier::Public, |t| t.tier);
    if tier == Tier::Internal {
        return Ok(None);
    }
    let now = state.clock.now();
    let period = switches.spend_cap_period;
    let spend = counters::read(&*state.store, &counters::platform_period(period, now)).await?.spend_micros;
    if spend < cap {
        return Ok(None);
    }
    let wait = period.end(now).since(now).as_secs().max(1);
    Ok(Some((
        wait,
        format!(
            "the platform's {} spend cap is reached: no new compute starts until it resets",
            period.as_str()
        ),
    )))
}
