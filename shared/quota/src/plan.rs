//! The plan of an admission: which counters a request is checked against,
//! the check itself ([`admit`](crate::admit)) on what they hold, and the
//! increments that reserve what it asks in the same commit as the request.
//!
//! Pure: the caller reads [`CounterNames::list`] (with the tenant's policy
//! and the kill switches) in one batch, and passes what it read.

use mapi_domain::{TenantId, Tier, Timestamp};

use crate::counters::{self, Bumps, CounterDoc, Hold, Reservation, Sharded, field};
use crate::{Ask, KillSwitches, Limits, Period, Policy, Refusal, TokenBudget, Usage, admit, effective};

/// The counters one admission looks at, in the order [`CounterNames::list`]
/// gives them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterNames {
    names: Vec<String>,
}

/// Positions in [`CounterNames::list`].
const TOTAL: usize = 0;
const DAY: usize = 1;
const MONTH: usize = 2;
const MINUTE: usize = 3;
const PLATFORM: usize = 4;
const PLATFORM_DAY: usize = 5;
const PLATFORM_MONTH: usize = 6;
const TOKEN: usize = 7;

impl CounterNames {
    /// The tenant's counters (now, this day, month and minute), the
    /// platform's (now, both spend periods: the kill switches say which
    /// counts), and the token's budget period when it has a budget.
    pub fn of(tenant: &TenantId, now: Timestamp, token: Option<(&str, &TokenBudget)>) -> CounterNames {
        let mut names = vec![
            counters::tenant(tenant),
            counters::tenant_period(tenant, Period::Day, now),
            counters::tenant_period(tenant, Period::Month, now),
            counters::tenant_minute(tenant, now),
            counters::PLATFORM.to_owned(),
            counters::platform_period(Period::Day, now),
            counters::platform_period(Period::Month, now),
        ];
        names.extend(token.map(|(id, b)| counters::token_period(id, b.period, now)));
        CounterNames { names }
    }

    /// The names, to read with one batch ([`counters::keys`]).
    pub fn list(&self) -> &[String] {
        &self.names
    }
}

/// What admission read: the counters of [`CounterNames`], in its order,
/// the tenant's policy and the kill switches.
#[derive(Debug, Clone)]
pub struct Read<'a> {
    pub counters: &'a [Sharded],
    pub policy: Option<&'a Policy>,
    pub switches: &'a KillSwitches,
}

/// Who asks for what.
#[derive(Debug, Clone)]
pub struct Asked<'a> {
    pub now: Timestamp,
    /// The tenant's, as the caller's authorization read it.
    pub tier: Tier,
    /// The calling token's budget, when it has one.
    pub budget: Option<&'a TokenBudget>,
    /// The platform's limits in force (its defaults and the operator's caps).
    pub platform: &'a Limits,
    pub ask: &'a Ask,
    /// The new document's id: picks the counter shards the takes start from.
    pub seed: &'a str,
}

/// What an admitted request writes, and the limits it was admitted under.
#[derive(Debug, Clone)]
pub struct Plan {
    pub bumps: Bumps,
    pub reservation: Option<Reservation>,
    /// The tenant's limits in force (its policy's, else its tier's).
    pub limits: Limits,
}

/// The check passed on the sums, but counter `0` has no shard with room
/// under its share (another admission took it since the read): the caller
/// reads again and plans again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0} has no shard with room now: retry")]
pub struct NoRoom(pub String);

fn clamp_u32(n: i64) -> u32 {
    u32::try_from(n).unwrap_or(if n < 0 { 0 } else { u32::MAX })
}

fn limit_ms(seconds: Option<u64>) -> Option<i64> {
    seconds.map(|s| i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX))
}

fn limit(n: Option<impl Into<u64>>) -> Option<i64> {
    n.map(|n| i64::try_from(n.into()).unwrap_or(i64::MAX))
}

/// What is in use now, from the sums of the counters read.
fn usage(sums: &[CounterDoc], switches: &KillSwitches) -> Usage {
    let spend = if switches.spend_cap_period == Period::Day { PLATFORM_DAY } else { PLATFORM_MONTH };
    Usage {
        token_vcpu_ms: sums.get(TOKEN).map_or(0, CounterDoc::vcpu_ms),
        tenant_requests_this_minute: clamp_u32(sums[MINUTE].requests),
        tenant_active_runs: clamp_u32(sums[TOTAL].active_runs),
        tenant_vcpu_ms_day: sums[DAY].vcpu_ms(),
        tenant_vcpu_ms_month: sums[MONTH].vcpu_ms(),
        tenant_storage_bytes: u64::try_from(sums[TOTAL].storage_bytes).unwrap_or(0),
        platform_active_runs: clamp_u32(sums[PLATFORM].active_runs),
        platform_spend_micros: sums[spend].spend_micros,
    }
}

/// Checks `asked` against what `read` holds and plans its reservation:
/// `Ok(Err(refusal))` names the first limit it would exceed.
///
/// The same limits become guards on the increments of the shards with
/// room, in the order of the checks. The check passed, so every take finds
/// room unless the shards' counts are uneven past their shares (see
/// [`counters`]): that is [`NoRoom`], a race to be planned again.
///
/// # Panics
/// If `read.counters` is not what [`CounterNames::of`] named (seven
/// counters, and the token's when `asked.budget` is set).
pub fn plan(read: &Read<'_>, asked: &Asked<'_>) -> Result<Result<Plan, Refusal>, NoRoom> {
    let c = read.counters;
    assert_eq!(c.len(), TOKEN + usize::from(asked.budget.is_some()), "the counters CounterNames::of named");
    let sums: Vec<CounterDoc> = c.iter().map(Sharded::total).collect();
    let limits = effective(asked.tier, read.policy);
    let usage = usage(&sums, read.switches);
    let checked =
        admit(asked.now, asked.tier, asked.budget, &limits, asked.platform, read.switches, &usage, asked.ask);
    if let Err(refusal) = checked {
        return Ok(Err(refusal));
    }
    let take = |c: &Sharded, field: &str, amount: i64, limit: Option<i64>| {
        c.take(field, amount, limit, asked.seed).ok_or_else(|| NoRoom(c.name.clone()))
    };
    let mut bumps = Bumps::default();
    let requests = take(&c[MINUTE], field::REQUESTS, 1, limit(limits.requests_per_minute))?;
    let reservation = match asked.ask {
        Ask::Run { vcpu_ms, .. } => {
            let held = i64::try_from(*vcpu_ms).unwrap_or(i64::MAX);
            let mut holds = Vec::new();
            let mut budget_takes = |bumps: &mut Bumps, c: &Sharded, max: Option<i64>| {
                for t in take(c, field::COMMITTED, held, max)? {
                    bumps.add(&t.shard, field::RESERVED, t.amount);
                    bumps.guarded(&t.shard, field::COMMITTED, t.amount, t.at_most);
                    let vcpu_ms = u64::try_from(t.amount).unwrap_or(0);
                    holds.push(Hold { shard: t.shard, vcpu_ms, at_most: t.at_most, limit: max });
                }
                Ok::<_, NoRoom>(())
            };
            if let (Some(token), Some(b)) = (c.get(TOKEN), asked.budget) {
                budget_takes(&mut bumps, token, limit_ms(Some(b.vcpu_seconds)))?;
            }
            bumps.take(field::REQUESTS, &requests);
            let tenant_slot = take(&c[TOTAL], field::ACTIVE, 1, limit(limits.concurrent_runs))?;
            bumps.take(field::ACTIVE, &tenant_slot);
            budget_takes(&mut bumps, &c[DAY], limit_ms(limits.vcpu_seconds_per_day))?;
            budget_takes(&mut bumps, &c[MONTH], limit_ms(limits.vcpu_seconds_per_month))?;
            let platform_slot = take(&c[PLATFORM], field::ACTIVE, 1, limit(asked.platform.concurrent_runs))?;
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
            bumps.take(field::REQUESTS, &requests);
            None
        }
        Ask::Upload { bytes } => {
            bumps.take(field::REQUESTS, &requests);
            let bytes = i64::try_from(*bytes).unwrap_or(i64::MAX);
            bumps.take(field::STORAGE, &take(&c[TOTAL], field::STORAGE, bytes, limit(limits.storage_bytes))?);
            None
        }
    };
    Ok(Ok(Plan { bumps, reservation, limits }))
}

#[cfg(test)]
mod tests {
    use mapi_domain::ResourceClass;

    use super::*;
    use crate::counters::CounterDoc;

    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-12-01T10:00:00Z").expect("time")
    }

    /// The counters `names` as read, with `active` runs on the tenant's
    /// shard 0 and nothing else.
    fn read_with(names: &CounterNames, active: i64) -> Vec<Sharded> {
        let mut c: Vec<Sharded> = names
            .list()
            .iter()
            .map(|n| Sharded {
                name: n.clone(),
                legacy: CounterDoc::default(),
                shards: vec![CounterDoc::default(); counters::shards_of(n) as usize],
            })
            .collect();
        c[TOTAL].shards[0].active_runs = active;
        c
    }

    fn run() -> Ask {
        Ask::Run { class: ResourceClass::S, task_count: 1, vcpu_ms: 60_000, plugin: false }
    }

    fn plan_for(tier: Tier, c: &[Sharded], ask: &Ask) -> Result<Result<Plan, Refusal>, NoRoom> {
        let (switches, platform) = (KillSwitches::default(), crate::platform_limits());
        let read = Read { counters: c, policy: None, switches: &switches };
        plan(&read, &Asked { now: now(), tier, budget: None, platform: &platform, ask, seed: "run_1" })
    }

    #[test]
    fn an_admitted_run_holds_a_tenant_and_a_platform_slot_and_its_compute() {
        let t = TenantId::parse("acme").expect("tenant");
        let names = CounterNames::of(&t, now(), None);
        assert_eq!(names.list().len(), TOKEN, "no token counter without a budget");
        let plan = plan_for(Tier::Public, &read_with(&names, 0), &run()).expect("room").expect("admitted");
        let r = plan.reservation.expect("a run reserves");
        assert_eq!(r.vcpu_ms, 60_000);
        assert_eq!(r.slots.len(), 2, "{:?}", r.slots);
        assert!(
            r.slots[0].starts_with("tenant:acme#") && r.slots[1].starts_with("platform#"),
            "{:?}",
            r.slots
        );
        assert_eq!(r.holds.iter().map(|h| h.vcpu_ms).sum::<u64>(), 2 * 60_000, "day and month");
        assert_eq!(plan.limits.concurrent_runs, Some(2), "the public tier's");
    }

    #[test]
    fn a_refusal_names_the_limit_and_writes_nothing() {
        let t = TenantId::parse("acme").expect("tenant");
        let names = CounterNames::of(&t, now(), None);
        let full = read_with(&names, 2);
        let r = plan_for(Tier::Public, &full, &run()).expect("checked").expect_err("at the limit");
        assert_eq!(r.limit, "concurrent_runs");
        let job = plan_for(Tier::Public, &full, &Ask::Job { items: 10 }).expect("checked");
        let job = job.expect("a job takes no run slot");
        assert!(job.reservation.is_none());
        let big = plan_for(Tier::Public, &full, &Ask::Job { items: 1_001 }).expect("checked");
        assert_eq!(big.expect_err("over the tier's items per job").limit, "max_items_per_job");
    }

    #[test]
    fn a_slot_comes_from_a_shard_with_room_when_the_seeds_is_full() {
        let t = TenantId::parse("acme").expect("tenant");
        let names = CounterNames::of(&t, now(), None);
        // The public tier allows 2 runs: shares over 4 shards are 1, 1, 0, 0.
        let first = plan_for(Tier::Public, &read_with(&names, 0), &run()).expect("room").expect("admitted");
        let seeds = first.reservation.expect("reserved").slots[0].clone();
        let k: usize = seeds.rsplit_once('#').expect("a shard").1.parse().expect("index");
        let mut c = read_with(&names, 0);
        c[TOTAL].shards[k].active_runs = 1;
        let other: u32 = if k == 0 { 1 } else { 0 };
        let second = plan_for(Tier::Public, &c, &run()).expect("room").expect("admitted");
        let slot = &second.reservation.expect("reserved").slots[0];
        assert_eq!(slot, &counters::shard_id("tenant:acme", other), "the other shard with a share");
        c[TOTAL].shards[other as usize].active_runs = 1;
        let third = plan_for(Tier::Public, &c, &run()).expect("checked");
        assert_eq!(third.expect_err("both shares taken").limit, "concurrent_runs");
    }
}
