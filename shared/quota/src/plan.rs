//! The plan of an admission: which counters a request is checked against,
//! the check itself ([`admit`](crate::admit)) on what they hold, and the
//! increments that reserve what it asks in the same commit as the request.
//!
//! Pure: the caller reads [`CounterNames::list`] (with the tenant's policy
//! and the kill switches) in one batch, and passes what it read.
//!
//! Only the counters the request's checks look at are named, so what
//! admission reads stays small: an upload reads the tenant's total and
//! minute counters; a job adds the tenant's day and month; a run adds the
//! platform's slots. The platform's spend in the cap's period is read only
//! when a cap is set and the tenant is not internal, which the kill
//! switches (read first, with the policy) say.

use mapi_domain::{TenantId, Tier, Timestamp};

use crate::counters::{self, Bumps, CounterDoc, Hold, Reservation, Sharded, field};
use crate::{Ask, KillSwitches, Limits, Period, Policy, Refusal, TokenBudget, Usage, admit, effective};

/// The counters one admission looks at, in the order [`CounterNames::list`]
/// gives them, and where each is in that list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterNames {
    names: Vec<String>,
    day: Option<usize>,
    month: Option<usize>,
    platform: Option<usize>,
    spend: Option<usize>,
    token: Option<usize>,
}

/// Positions in [`CounterNames::list`] of the counters every request reads.
const TOTAL: usize = 0;
const MINUTE: usize = 1;

impl CounterNames {
    /// The counters `ask`'s checks look at: the tenant's (now and this
    /// minute; this day and month for compute), the token's budget period
    /// when it has one (for compute) and the platform's slots (for a run).
    /// The platform's spend is named after the kill switches are read
    /// ([`CounterNames::add_spend`]).
    pub fn of(
        tenant: &TenantId,
        now: Timestamp,
        ask: &Ask,
        token: Option<(&str, &TokenBudget)>,
    ) -> CounterNames {
        let mut c = CounterNames {
            names: vec![counters::tenant(tenant), counters::tenant_minute(tenant, now)],
            day: None,
            month: None,
            platform: None,
            spend: None,
            token: None,
        };
        let compute = !matches!(ask, Ask::Upload { .. } | Ask::Egress { .. });
        if matches!(ask, Ask::Egress { .. }) {
            c.month = Some(c.push(counters::tenant_period(tenant, Period::Month, now)));
        }
        if compute {
            c.day = Some(c.push(counters::tenant_period(tenant, Period::Day, now)));
            c.month = Some(c.push(counters::tenant_period(tenant, Period::Month, now)));
            c.token = token.map(|(id, b)| c.push(counters::token_period(id, b.period, now)));
        }
        if matches!(ask, Ask::Run { .. }) {
            c.platform = Some(c.push(counters::PLATFORM.to_owned()));
        }
        c
    }

    /// Adds the platform's spend counter in the cap's period when the
    /// kill switches set a cap that can stop this request (compute, a tenant
    /// that is not internal), and returns its name to read.
    pub fn add_spend(&mut self, switches: &KillSwitches, tier: Tier, now: Timestamp) -> Option<&str> {
        if self.spend.is_some() || !needs_spend(self, switches, tier) {
            return None;
        }
        let at = self.push(counters::platform_period(switches.spend_cap_period, now));
        self.spend = Some(at);
        Some(&self.names[at])
    }

    fn push(&mut self, name: String) -> usize {
        self.names.push(name);
        self.names.len() - 1
    }

    /// The names, to read with one batch ([`counters::keys`]).
    pub fn list(&self) -> &[String] {
        &self.names
    }
}

/// What admission read: the counters of `names`, in its order, the tenant's
/// policy and the kill switches.
#[derive(Debug, Clone)]
pub struct Read<'a> {
    pub names: &'a CounterNames,
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

/// Whether the spend cap can stop a request that reads `names`.
fn needs_spend(names: &CounterNames, switches: &KillSwitches, tier: Tier) -> bool {
    switches.spend_cap_micros.is_some() && tier != Tier::Internal && names.day.is_some()
}

/// What is in use now, from the sums of the counters read (zero for a
/// counter not read: no check of this request looks at it).
fn usage(names: &CounterNames, sums: &[CounterDoc]) -> Usage {
    let at = |i: Option<usize>| i.and_then(|i| sums.get(i)).cloned().unwrap_or_default();
    Usage {
        token_vcpu_ms: at(names.token).vcpu_ms(),
        tenant_requests_this_minute: clamp_u32(sums[MINUTE].requests),
        tenant_active_runs: clamp_u32(sums[TOTAL].active_runs),
        tenant_vcpu_ms_day: at(names.day).vcpu_ms(),
        tenant_vcpu_ms_month: at(names.month).vcpu_ms(),
        tenant_storage_bytes: u64::try_from(sums[TOTAL].storage_bytes).unwrap_or(0),
        tenant_egress_bytes_month: u64::try_from(at(names.month).egress_bytes).unwrap_or(0),
        platform_active_runs: clamp_u32(at(names.platform).active_runs),
        platform_spend_micros: at(names.spend).spend_micros,
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
/// If `read.counters` is not what `read.names` lists, or `read.names` was
/// not made for `asked.ask` (with [`CounterNames::add_spend`] called on
/// `read.switches`).
pub fn plan(read: &Read<'_>, asked: &Asked<'_>) -> Result<Result<Plan, Refusal>, NoRoom> {
    let (c, names) = (read.counters, read.names);
    assert_eq!(c.len(), names.list().len(), "the counters read.names lists");
    assert!(
        names.spend.is_some() || !needs_spend(names, read.switches, asked.tier),
        "a spend cap is set: the platform's spend is read (CounterNames::add_spend)"
    );
    let sums: Vec<CounterDoc> = c.iter().map(Sharded::total).collect();
    let limits = effective(asked.tier, read.policy);
    let usage = usage(names, &sums);
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
            let named = |i: Option<usize>| &c[i.expect("a run's counters are named for a run")];
            if let (Some(token), Some(b)) = (names.token.map(|i| &c[i]), asked.budget) {
                budget_takes(&mut bumps, token, limit_ms(Some(b.vcpu_seconds)))?;
            }
            bumps.take(field::REQUESTS, &requests);
            let tenant_slot = take(&c[TOTAL], field::ACTIVE, 1, limit(limits.concurrent_runs))?;
            bumps.take(field::ACTIVE, &tenant_slot);
            budget_takes(&mut bumps, named(names.day), limit_ms(limits.vcpu_seconds_per_day))?;
            budget_takes(&mut bumps, named(names.month), limit_ms(limits.vcpu_seconds_per_month))?;
            let platform_slot =
                take(named(names.platform), field::ACTIVE, 1, limit(asked.platform.concurrent_runs))?;
            bumps.take(field::ACTIVE, &platform_slot);
            Some(Reservation {
                vcpu_ms: *vcpu_ms,
                budgets: Vec::new(),
                at_most: Vec::new(),
                slots: tenant_slot.into_iter().chain(platform_slot).map(|t| t.shard).collect(),
                holds,
            })
        }
        Ask::Job { .. } | Ask::Score { .. } | Ask::Endpoint { .. } => {
            // A job's compute is reserved item by item as the fan-out
            // enqueues them, a score's charged once it is answered, an
            // endpoint's as its instances run; admission takes only the request.
            bumps.take(field::REQUESTS, &requests);
            None
        }
        Ask::Egress { bytes } => {
            bumps.take(field::REQUESTS, &requests);
            let month = &c[names.month.expect("an egress reads the month's counter")];
            let bytes = i64::try_from(*bytes).unwrap_or(i64::MAX);
            bumps.take(
                field::EGRESS,
                &take(month, field::EGRESS, bytes, limit(limits.egress_bytes_per_month))?,
            );
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

/// What a tenant's window of items in flight lets a fan-out step enqueue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItemsTake {
    /// How many items (0: the window is full).
    pub items: u64,
    /// The guarded increments of `active_items` that take them, each at
    /// most its shard's share of the window, to write in the step's commit.
    pub bumps: Bumps,
}

/// Up to `want` items of a tenant's window of `window` items in flight,
/// as `counter` (the tenant's, `counters::tenant`) holds it: what is free
/// now, taken from the shards with room from the one `seed` picks on. A
/// racing step that took the same room first fails the commit's guard, and
/// the step plans again.
pub fn items_window(counter: &Sharded, window: u32, want: u64, seed: &str) -> Result<ItemsTake, NoRoom> {
    let window = i64::from(window);
    let free = u64::try_from(window - counter.total().active_items).unwrap_or(0);
    let items = want.min(free);
    let mut bumps = Bumps::default();
    if items == 0 {
        return Ok(ItemsTake { items, bumps });
    }
    let amount = i64::try_from(items).unwrap_or(i64::MAX);
    // The shards' room adds up to at least what the sum leaves free (their
    // shares add up to the window): less is a bug, not a race.
    let takes = counter.take(field::ACTIVE_ITEMS, amount, Some(window), seed).ok_or_else(|| {
        NoRoom("the tenant's item counter has less room in its shards than in its sum".into())
    })?;
    bumps.take(field::ACTIVE_ITEMS, &takes);
    Ok(ItemsTake { items, bumps })
}

#[cfg(test)]
mod tests {
    use mapi_domain::ResourceClass;

    use super::*;
    use crate::counters::CounterDoc;

    fn now() -> Timestamp {
        Timestamp::parse_rfc3339("2026-12-01T10:00:00Z").expect("time")
    }

    fn acme() -> TenantId {
        TenantId::parse("acme").expect("tenant")
    }

    /// The counters `names` as read, all zero.
    fn zeros(names: &CounterNames) -> Vec<Sharded> {
        names
            .list()
            .iter()
            .map(|n| Sharded {
                name: n.clone(),
                legacy: CounterDoc::default(),
                shards: vec![CounterDoc::default(); counters::shards_of(n) as usize],
            })
            .collect()
    }

    fn run() -> Ask {
        Ask::Run { class: ResourceClass::S, task_count: 1, vcpu_ms: 60_000, plugin: false }
    }

    /// Plans `ask` for acme under `switches`, on counters read as zeros
    /// then changed by `edit`.
    fn plan_with(
        tier: Tier,
        ask: &Ask,
        switches: &KillSwitches,
        edit: impl FnOnce(&CounterNames, &mut [Sharded]),
    ) -> Result<Result<Plan, Refusal>, NoRoom> {
        let mut names = CounterNames::of(&acme(), now(), ask, None);
        names.add_spend(switches, tier, now());
        let mut c = zeros(&names);
        edit(&names, &mut c);
        let platform = crate::platform_limits();
        let read = Read { names: &names, counters: &c, policy: None, switches };
        plan(&read, &Asked { now: now(), tier, budget: None, platform: &platform, ask, seed: "run_1" })
    }

    fn plan_for(
        tier: Tier,
        ask: &Ask,
        edit: impl FnOnce(&CounterNames, &mut [Sharded]),
    ) -> Result<Result<Plan, Refusal>, NoRoom> {
        plan_with(tier, ask, &KillSwitches::default(), edit)
    }

    fn active(n: i64) -> impl FnOnce(&CounterNames, &mut [Sharded]) {
        move |_, c| c[TOTAL].shards[0].active_runs = n
    }

    #[test]
    fn each_request_reads_only_the_counters_its_checks_look_at() {
        let budget = TokenBudget { vcpu_seconds: 10, period: Period::Month };
        let token = Some(("tok1", &budget));
        let count = |ask: &Ask, token| CounterNames::of(&acme(), now(), ask, token).list().to_vec();
        let upload = count(&Ask::Upload { bytes: 1 }, token);
        assert_eq!(upload.len(), 2, "the tenant's total and minute: {upload:?}");
        assert_eq!(count(&Ask::Job { items: 1 }, None).len(), 4, "and the day and month");
        let a_run = count(&run(), token);
        assert_eq!(a_run.len(), 6, "and the token's budget and the platform's slots: {a_run:?}");
        assert!(a_run.iter().all(|n| !n.starts_with("platform@")), "no spend without a cap: {a_run:?}");
        let capped = KillSwitches { spend_cap_micros: Some(1), ..KillSwitches::default() };
        let mut names = CounterNames::of(&acme(), now(), &run(), None);
        assert_eq!(names.add_spend(&capped, Tier::Public, now()), Some("platform@2026-12"));
        assert_eq!(names.add_spend(&capped, Tier::Public, now()), None, "named once");
        let mut internal = CounterNames::of(&acme(), now(), &run(), None);
        assert_eq!(internal.add_spend(&capped, Tier::Internal, now()), None, "the cap does not stop them");
        let mut upload = CounterNames::of(&acme(), now(), &Ask::Upload { bytes: 1 }, None);
        assert_eq!(upload.add_spend(&capped, Tier::Public, now()), None, "an upload starts no compute");
    }

    #[test]
    fn the_spend_cap_refuses_compute_from_the_spend_read() {
        let capped = KillSwitches { spend_cap_micros: Some(500), ..KillSwitches::default() };
        let spent = |names: &CounterNames, c: &mut [Sharded]| {
            c[names.spend.expect("named")].shards[3].spend_micros = 500;
        };
        let r = plan_with(Tier::Public, &run(), &capped, spent).expect("checked");
        assert_eq!(r.expect_err("at the cap").limit, "spend_cap");
        let r = plan_with(Tier::Internal, &run(), &capped, |_, _| {}).expect("checked");
        assert!(r.is_ok(), "internal tenants pass the cap");
    }

    #[test]
    #[should_panic(expected = "a spend cap is set")]
    fn a_plan_without_the_spend_read_under_a_cap_is_refused_loudly() {
        let capped = KillSwitches { spend_cap_micros: Some(500), ..KillSwitches::default() };
        let names = CounterNames::of(&acme(), now(), &run(), None);
        let (c, platform) = (zeros(&names), crate::platform_limits());
        let read = Read { names: &names, counters: &c, policy: None, switches: &capped };
        let asked = Asked {
            now: now(),
            tier: Tier::Public,
            budget: None,
            platform: &platform,
            ask: &run(),
            seed: "r",
        };
        let _ = plan(&read, &asked);
    }

    #[test]
    fn an_admitted_run_holds_a_tenant_and_a_platform_slot_and_its_compute() {
        let plan = plan_for(Tier::Public, &run(), active(0)).expect("room").expect("admitted");
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
        let r = plan_for(Tier::Public, &run(), active(2)).expect("checked").expect_err("at the limit");
        assert_eq!(r.limit, "concurrent_runs");
        let job = plan_for(Tier::Public, &Ask::Job { items: 10 }, active(2)).expect("checked");
        let job = job.expect("a job takes no run slot");
        assert!(job.reservation.is_none());
        let big = plan_for(Tier::Public, &Ask::Job { items: 1_001 }, active(2)).expect("checked");
        assert_eq!(big.expect_err("over the tier's items per job").limit, "max_items_per_job");
    }

    #[test]
    fn a_slot_comes_from_a_shard_with_room_when_the_seeds_is_full() {
        // The public tier allows 2 runs: shares over 4 shards are 1, 1, 0, 0.
        let first = plan_for(Tier::Public, &run(), active(0)).expect("room").expect("admitted");
        let seeds = first.reservation.expect("reserved").slots[0].clone();
        let k: usize = seeds.rsplit_once('#').expect("a shard").1.parse().expect("index");
        let other: u32 = if k == 0 { 1 } else { 0 };
        let taken = move |_: &CounterNames, c: &mut [Sharded]| c[TOTAL].shards[k].active_runs = 1;
        let second = plan_for(Tier::Public, &run(), taken).expect("room").expect("admitted");
        let slot = &second.reservation.expect("reserved").slots[0];
        assert_eq!(slot, &counters::shard_id("tenant:acme", other), "the other shard with a share");
        let both = move |_: &CounterNames, c: &mut [Sharded]| {
            c[TOTAL].shards[k].active_runs = 1;
            c[TOTAL].shards[other as usize].active_runs = 1;
        };
        let third = plan_for(Tier::Public, &run(), both).expect("checked");
        assert_eq!(third.expect_err("both shares taken").limit, "concurrent_runs");
    }

    /// A fan-out step takes what the window has free, no more, from the
    /// shards with room; a full window takes nothing; a shard over its share
    /// (given back into another) does not hide the room of the others.
    #[test]
    fn the_items_window_takes_what_is_free_from_shards_with_room() {
        let name = counters::tenant(&TenantId::parse("acme").expect("tenant"));
        let n = counters::shards_of(&name) as usize;
        let mut counter = Sharded {
            name: name.clone(),
            legacy: CounterDoc::default(),
            shards: vec![CounterDoc::default(); n],
        };
        let take = items_window(&counter, 100, 30, "job_1").expect("room");
        assert_eq!(take.items, 30);
        let all = items_window(&counter, 100, 500, "job_1").expect("room");
        assert_eq!(all.items, 100, "at most the window");
        counter.shards[0].active_items = 60;
        counter.shards[1].active_items = -20;
        let left = items_window(&counter, 100, 500, "job_2").expect("room");
        assert_eq!(left.items, 60, "free is the window less the sum (40)");
        counter.shards[1].active_items = 40;
        counter.legacy.active_items = 0;
        let full = items_window(&counter, 100, 5, "job_3").expect("full");
        assert_eq!(full, ItemsTake { items: 0, bumps: Bumps::default() });
    }
}
