//! Admission: the three levels of quotas (the token's, the tenant's policy
//! or tier defaults, the platform's) and the kill switches.
//!
//! A request is first checked against what is in use now (the sum of each
//! counter's shards), which gives the refusal its detail and Retry-After;
//! then its reservation is written as guarded increments of the shards with
//! room, in the same commit as the run or dataset, each increment at most
//! its shard's share of the limit (see `mapi_quota::counters`). Racing
//! requests therefore never over-admit (the shares add up to the limit, and
//! the store checks each where it writes it) and never conflict with each
//! other (increments read nothing); a race for the last room of one shard
//! fails the commit, and the request is planned again.

use mapi_domain::{TenantId, Tier, Timestamp};
use mapi_identity::{Audit, Caller, audit};
use mapi_platform::AppState;
use mapi_problem::{ApiError, ProblemCode};
use mapi_quota::counters;
use mapi_quota::{
    Ask, Asked, CounterNames, Limits, Period, Read, Refusal, RefusalCode, TokenBudget, platform_limits,
};
use mapi_schema::{BudgetPeriod, KillSwitchDoc, Outcome, QuotaPolicyDoc, TokenDoc};

pub use mapi_quota::Plan;

fn budget_of(token: Option<&TokenDoc>) -> Option<TokenBudget> {
    token.and_then(|t| t.budget.as_ref()).map(|b| TokenBudget {
        vcpu_seconds: b.vcpu_seconds,
        period: match b.period {
            BudgetPeriod::Day => Period::Day,
            BudgetPeriod::Month => Period::Month,
        },
    })
}

/// Reads what admission looks at (the tenant's policy, the kill switches
/// and the shards of the counters `ask`'s checks need, in one batch; the
/// platform's spend in a second read only when a spend cap can stop it),
/// checks `ask` against it and plans its reservation. `tier` is the
/// tenant's, as the caller's authorization read it. `seed` (the run's or
/// dataset's id) picks the counter shards it starts from.
pub async fn plan(
    state: &AppState,
    now: Timestamp,
    tenant: &TenantId,
    tier: Tier,
    token: Option<&TokenDoc>,
    ask: &Ask,
    seed: &str,
) -> Result<Result<Plan, Refusal>, ApiError> {
    let budget = budget_of(token);
    let mut names = CounterNames::of(tenant, now, ask, token.map(TokenDoc::public_id).zip(budget.as_ref()));
    let mut keys = vec![
        mapi_schema::key::<QuotaPolicyDoc>(tenant.as_str())?,
        mapi_schema::key::<KillSwitchDoc>(KillSwitchDoc::ID)?,
    ];
    keys.extend(counters::keys(names.list())?);
    let docs = state.store.get(&keys, None).await?;
    let policy = docs[0].as_ref().map(|d| d.decode::<QuotaPolicyDoc>()).transpose()?.map(|p| p.policy);
    let switches = docs[1].as_ref().map(|d| d.decode::<KillSwitchDoc>()).transpose()?;
    let switches = switches.map(|k| k.switches).unwrap_or_default();
    let mut counters = counters::Sharded::decode_all(names.list(), &docs[2..])?;
    if let Some(spend) = names.add_spend(&switches, tier, now) {
        counters.extend(counters::read_all(&*state.store, &[spend.to_owned()]).await?);
    }
    let platform = Limits {
        concurrent_runs: Some(state.config.platform_concurrent_runs),
        max_items_per_job: Some(state.config.jobs.max_items),
        ..platform_limits()
    };
    let read = Read { names: &names, counters: &counters, policy: policy.as_ref(), switches: &switches };
    let asked = Asked { now, tier, budget: budget.as_ref(), platform: &platform, ask, seed };
    mapi_quota::plan(&read, &asked).map_err(|e| {
        ApiError::unavailable_because(
            "a quota's counters changed while the request was planned: retry",
            1,
            &e.0,
        )
    })
}

pub use mapi_quota::counters::reserve_ms;

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
        RefusalCode::TooLarge => ProblemCode::PayloadTooLarge,
        RefusalCode::OverLimit => ProblemCode::InvalidArgument,
    }
}

/// The line each quota denial logs (the alert on the rate of denials
/// counts it through a log-based metric).
pub const DENIED_LINE: &str = "quota denied";

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
    tracing::info!(tenant = %tenant, level = r.level.as_str(), limit = %r.limit, "{DENIED_LINE}");
    ApiError::Problem { code, detail: r.detail, retry_after_s: r.retry_after_s }
}
