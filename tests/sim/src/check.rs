//! The invariants, each named, checked after every step.
//!
//! The checker keeps a mirror of the store: after each step it re-reads
//! (without faults) every document the step's commits named, so a check
//! sees what is durable, whatever the requests were told. From the mirror,
//! the world's own records (what was acknowledged, what the executor did)
//! and the object store's write counts:
//!
//! - `acknowledged_work_is_kept`: every run and job a submit acknowledged exists, and stays.
//! - `one_run_per_idempotency_key`: a retried submit never makes a second run or job.
//! - `runs_move_along_the_state_machine`: a run's history only grows, each entry a legal
//!   transition from the one before, and its state is its last entry's.
//! - `final_states_stay_final`: a run in a final state never changes state again.
//! - `finalized_attempts_are_metered_once`: a finalized attempt has its ledger entry, and a
//!   ledger entry, once written, never changes.
//! - `ledger_equals_counters`: each tenant's metered spend and vCPU-ms for a month are the sums of
//!   its ledger entries of that month (runs, items and scores), and the platform's spend of the
//!   month (which the spend cap reads) is the sum over every tenant.
//! - `reservations_are_released`: a tenant's `active_runs` counter is the number of its runs
//!   holding a reservation that are not final; no counter goes negative.
//! - `quotas_hold`: right after an admission, a tenant's unfinished runs are within its
//!   concurrent-runs limit (tier and policy as stored).
//! - `no_event_changes_a_finished_attempt`: an attempt's progress never changes once it is
//!   finalized.
//! - `each_item_ends_once`: an item's end object is written once per round.
//! - `job_counts_add_up`: a job's finished items never exceed its items; a final job accounts for
//!   every item.
//! - `the_execution_that_ran_is_the_attempts`: an execution that took an attempt's bootstrap
//!   (did its work) is the one the finalized attempt records, so what ran is what was polled and
//!   metered.
//! - `each_bootstrap_is_written_once`: no task's bootstrap is written a second time (a copy written
//!   after a worker took the first lets a second execution do the same work).
//! - `finalized_attempts_leave_no_bootstrap`: once everything finished, no bootstrap of an attempt
//!   finalized after running is left for a late execution to take.
//! - `no_execution_outlives_its_attempt`: no execution is still running fifteen minutes after its
//!   attempt was finalized or its run became final (at most one execution per attempt survives).
//! - `everything_finishes` (liveness): once faults stop, every run and job is final within the bound.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use mapi_domain::{RunState, TenantId, Tier, Timestamp};
use mapi_executor::ExecutionHandle;
use mapi_jobs::{JobCountsDoc, JobDoc};
use mapi_lifecycle::RunDoc;
use mapi_quota::counters::CounterDoc;
use mapi_schema::{
    AttemptDoc, ItemLedgerEntry, ItemLedgerMinute, LedgerEntry, ProgressDoc, ScoreLedgerEntry, TenantDoc,
};
use mapi_store::typed::Doc;
use mapi_store::{DocKey, Document, Fields, Store};

use crate::rng::SharedRng;
use crate::world::World;

/// How long an execution may run on after its attempt was done with.
const OUTLIVE: Duration = Duration::from_secs(15 * 60);

/// One invariant broken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
    pub step: u64,
    pub at: Timestamp,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at step {} ({}): {}", self.invariant, self.step, self.at, self.detail)
    }
}

#[derive(Debug, Clone)]
struct Acked {
    tenant: String,
    /// Job items (0 for a run).
    items: usize,
    /// Rounds `retry-failed` started (jobs).
    rounds: u32,
}

/// An attempt as first seen finalized.
#[derive(Debug)]
struct Finalized {
    at: Timestamp,
    /// Its progress then.
    progress: Option<Fields>,
    /// The execution it records.
    handle: Option<ExecutionHandle>,
}

/// A ledger entry's (tenant, month) and (spend µ$, vCPU-ms).
type Charged = ((String, String), (i64, i64));

/// What the checker knows.
#[derive(Debug, Default)]
pub struct Checker {
    pub violations: Vec<Violation>,
    reported: BTreeSet<(&'static str, String)>,
    mirror: BTreeMap<DocKey, Document>,
    runs: BTreeMap<String, Acked>,
    jobs: BTreeMap<String, Acked>,
    keys: BTreeMap<(String, String), String>,
    seen: BTreeMap<String, RunDoc>,
    /// Each attempt (`{run}:{attempt}`) seen finalized.
    finalized: BTreeMap<String, Finalized>,
    ledger: BTreeMap<String, Fields>,
    /// What each ledger entry (runs' and items') adds to its tenant's month.
    charged: BTreeMap<DocKey, Charged>,
    /// (tenant, month) → (spend µ$, vCPU-ms), the sums of `charged`.
    sums: BTreeMap<(String, String), (i64, i64)>,
    /// Tenants whose admission was acknowledged this step.
    admitted: Vec<String>,
    step: u64,
    now: Timestamp,
}

impl Checker {
    fn violate(&mut self, invariant: &'static str, subject: &str, detail: String) {
        // One report per invariant and subject: a broken run is not reported at every step.
        if self.reported.insert((invariant, subject.to_owned())) {
            self.violations.push(Violation { invariant, detail, step: self.step, at: self.now });
        }
    }

    fn get<T: Doc + serde::de::DeserializeOwned>(&self, id: &str) -> Option<T> {
        let key = DocKey::new(T::COLLECTION, id).ok()?;
        self.mirror.get(&key)?.decode().ok()
    }

    fn stored<T: Doc>(&self, id: &str) -> bool {
        DocKey::new(T::COLLECTION, id).is_ok_and(|k| self.mirror.contains_key(&k))
    }

    fn all<T: Doc + serde::de::DeserializeOwned>(&self) -> impl Iterator<Item = (&DocKey, T)> + '_ {
        let start = DocKey::new(T::COLLECTION, "!").expect("a key");
        self.mirror
            .range(start..)
            .take_while(|(k, _)| k.collection() == T::COLLECTION)
            .filter_map(|(k, d)| d.decode().ok().map(|t| (k, t)))
    }

    /// A run acknowledged; `admitted` when this answer admitted it (a
    /// replay admits nothing, so the quota then may be lower than its use).
    pub fn ack_run(&mut self, tenant: &str, key: &str, id: &str, admitted: bool, step: u64) {
        self.step = step;
        self.ack(tenant, key, id, 0, false);
        if admitted {
            self.admitted.push(tenant.to_owned());
        }
    }

    pub fn ack_job(&mut self, tenant: &str, key: &str, id: &str, items: usize, step: u64) {
        self.step = step;
        self.ack(tenant, key, id, items, true);
    }

    fn ack(&mut self, tenant: &str, key: &str, id: &str, items: usize, job: bool) {
        if let Some(first) = self.keys.get(&(tenant.to_owned(), key.to_owned()))
            && first != id
        {
            let detail = format!("{tenant}'s Idempotency-Key {key} answered {first} and then {id}");
            self.violate("one_run_per_idempotency_key", key, detail);
        }
        self.keys.insert((tenant.to_owned(), key.to_owned()), id.to_owned());
        let acked = Acked { tenant: tenant.to_owned(), items, rounds: 0 };
        if job {
            self.jobs.entry(id.to_owned()).or_insert(acked);
        } else {
            self.runs.entry(id.to_owned()).or_insert(acked);
        }
    }

    pub fn job_round(&mut self, id: &str) {
        if let Some(j) = self.jobs.get_mut(id) {
            j.rounds += 1;
        }
    }

    /// A run of `tenant` to cancel: one not final when there is one.
    pub fn pick_run(&self, rng: &SharedRng, tenant: &str) -> Option<String> {
        let mine: Vec<&String> =
            self.runs.iter().filter(|(_, a)| a.tenant == tenant).map(|(id, _)| id).collect();
        let open: Vec<&String> = mine
            .iter()
            .copied()
            .filter(|id| self.seen.get(*id).is_some_and(|r| !r.state().is_terminal()))
            .collect();
        let from = if open.is_empty() { mine } else { open };
        (!from.is_empty()).then(|| rng.with(|r| (*r.pick(&from)).clone()))
    }

    pub fn pick_job(&self, rng: &SharedRng, tenant: &str) -> Option<String> {
        let mine: Vec<&String> =
            self.jobs.iter().filter(|(_, a)| a.tenant == tenant).map(|(id, _)| id).collect();
        (!mine.is_empty()).then(|| rng.with(|r| (*r.pick(&mine)).clone()))
    }

    /// Acknowledged runs, jobs and their items.
    /// For each acknowledged run that succeeded: the time from its last
    /// event applied (`last_applied`) to its `succeeded` transition.
    pub fn end_lags(&self, last_applied: &BTreeMap<String, Timestamp>) -> BTreeMap<String, Duration> {
        let mut out = BTreeMap::new();
        for id in self.runs.keys() {
            let Some(run) = self.get::<RunDoc>(id) else { continue };
            let succeeded = run.history().iter().rev().find(|t| t.to == RunState::Succeeded).map(|t| t.at);
            if let (Some(done), Some(last)) = (succeeded, last_applied.get(id)) {
                out.insert(id.clone(), done.since(*last));
            }
        }
        out
    }

    pub fn sizes(&self) -> (usize, usize, usize) {
        (self.runs.len(), self.jobs.len(), self.jobs.values().map(|j| j.items).sum())
    }

    /// Whether every acknowledged run and job is final.
    pub fn all_final(&self) -> bool {
        self.runs.keys().all(|id| self.seen.get(id).is_some_and(|r| r.state().is_terminal()))
            && self.jobs.keys().all(|id| self.job_final(id) == Some(true))
    }

    /// The job's state from its documents: `None` when it is not stored.
    fn job_final(&self, id: &str) -> Option<bool> {
        let job: JobDoc = self.get(id)?;
        let c = self.job_counts(id);
        let done = job.fanout.finished_at.is_some();
        let (state, _) = mapi_jobs::derive(
            job.items,
            job.fanout.enqueued,
            done,
            job.cancel_requested_at.is_some(),
            c.succeeded.max(0) as u64,
            c.failed.max(0) as u64,
        );
        Some(state.is_final())
    }

    fn job_counts(&self, id: &str) -> JobCountsDoc {
        let shards: Vec<JobCountsDoc> = (0..mapi_schema::JOB_SHARDS)
            .filter_map(|s| self.get::<JobCountsDoc>(&format!("{id}:{s}")))
            .collect();
        JobCountsDoc::sum(&shards)
    }

    /// The sum of counter `name` over its shards and its legacy document.
    fn counter(&self, name: &str) -> CounterDoc {
        let start = DocKey::new(CounterDoc::COLLECTION, name).expect("a counter key");
        let mut sum = CounterDoc::default();
        for (k, d) in self.mirror.range(start..) {
            if k.collection() != CounterDoc::COLLECTION {
                break;
            }
            let id = k.id();
            if id != name && !id.strip_prefix(name).is_some_and(|rest| rest.starts_with('#')) {
                if id > name && !id.starts_with(name) {
                    break;
                }
                continue;
            }
            if let Ok(c) = d.decode::<CounterDoc>() {
                sum.active_runs += c.active_runs;
                sum.charged_vcpu_ms += c.charged_vcpu_ms;
                sum.spend_micros += c.spend_micros;
                sum.reserved_vcpu_ms += c.reserved_vcpu_ms;
            }
        }
        sum
    }
}

/// Re-reads what the step wrote, then checks every invariant.
pub fn after_step(world: &mut World, step: u64) {
    let touched = world.store.take_touched();
    let keys: Vec<DocKey> = touched.into_iter().collect();
    let store = world.store.reliable().clone();
    let read = world
        .drive(async move {
            let mut docs = Vec::with_capacity(keys.len());
            for chunk in keys.chunks(100) {
                let got = store.get(chunk, None).await.expect("the checker reads the store");
                docs.extend(chunk.iter().cloned().zip(got));
            }
            docs
        })
        .unwrap_or_else(|_| unreachable!("the checker's reads have no crash points"));
    let now = world.now();
    let c = &mut world.checker;
    c.step = step;
    c.now = now;
    // Each check reads only what this step wrote, so a step costs the
    // same early and late in a seed.
    let mut touched = Touched::default();
    for (key, doc) in read {
        touched.0.entry(key.collection().to_owned()).or_default().push(key.id().to_owned());
        match doc {
            Some(d) => {
                c.mirror.insert(key, d);
            }
            None => {
                c.mirror.remove(&key);
            }
        }
    }
    let has = |c: &str| touched.0.contains_key(c);
    check_runs(c, touched.ids(RunDoc::COLLECTION));
    check_attempts(c, &touched);
    let ledgers = [LedgerEntry::COLLECTION, ItemLedgerEntry::COLLECTION, ItemLedgerMinute::COLLECTION];
    if ledgers.iter().any(|l| has(l)) {
        sum_ledgers(c, &touched);
    }
    if has(CounterDoc::COLLECTION) || ledgers.iter().any(|l| has(l)) {
        check_ledger(c);
    }
    if has(CounterDoc::COLLECTION) || has(RunDoc::COLLECTION) {
        check_reservations(c);
    }
    check_admissions(c);
    check_acknowledged(c);
    if has(JobDoc::COLLECTION) || has(JobCountsDoc::COLLECTION) {
        check_jobs(world);
    }
    check_executions(world);
}

/// The ids a step wrote, by collection.
#[derive(Default)]
struct Touched(BTreeMap<String, Vec<String>>);

impl Touched {
    fn ids(&self, collection: &str) -> &[String] {
        self.0.get(collection).map_or(&[], Vec::as_slice)
    }
}

fn check_acknowledged(c: &mut Checker) {
    let missing: Vec<String> = c
        .runs
        .keys()
        .filter(|id| !c.stored::<RunDoc>(id))
        .chain(c.jobs.keys().filter(|id| !c.stored::<JobDoc>(id)))
        .cloned()
        .collect();
    for id in missing {
        c.violate("acknowledged_work_is_kept", &id, format!("{id} was acknowledged and is not stored"));
    }
}

fn check_runs(c: &mut Checker, touched: &[String]) {
    let runs: Vec<RunDoc> = touched.iter().filter_map(|id| c.get::<RunDoc>(id)).collect();
    for run in runs {
        let id = run.id().to_string();
        let history = run.history();
        let before = c.seen.get(&id).map(|r| r.history().len()).unwrap_or(0);
        if let Some(old) = c.seen.get(&id).cloned() {
            if old.state().is_terminal() && run.state() != old.state() {
                let detail = format!("{id} was {} and is now {}", old.state(), run.state());
                c.violate("final_states_stay_final", &id, detail);
            }
            if history.len() < old.history().len() || history[..old.history().len()] != *old.history() {
                c.violate("runs_move_along_the_state_machine", &id, format!("{id}'s history was rewritten"));
            }
        }
        for (i, t) in history.iter().enumerate().skip(before.max(1)) {
            let from = history[i - 1].to;
            let legal = t.from == Some(from) && from.check(t.to, t.reason).is_ok();
            if !legal {
                let detail = format!("{id}: {:?} → {} ({}) after {from}", t.from, t.to, t.reason);
                c.violate("runs_move_along_the_state_machine", &id, detail);
            }
        }
        if history.last().map(|t| t.to) != Some(run.state()) {
            let detail = format!("{id} is {} but its history ends elsewhere", run.state());
            c.violate("runs_move_along_the_state_machine", &id, detail);
        }
        c.seen.insert(id, run);
    }
}

fn check_attempts(c: &mut Checker, touched: &Touched) {
    let now = c.now;
    let progress_of = |c: &Checker, id: &str| {
        DocKey::new(ProgressDoc::COLLECTION, id).ok().and_then(|k| c.mirror.get(&k)).map(|d| d.fields.clone())
    };
    for id in touched.ids(AttemptDoc::COLLECTION) {
        if c.finalized.contains_key(id) {
            continue;
        }
        if let Some(a) = c.get::<AttemptDoc>(id).filter(|a| a.finalized) {
            let progress = progress_of(c, id);
            c.finalized.insert(id.clone(), Finalized { at: now, progress, handle: a.handle });
        }
    }
    let unmetered: Vec<String> = c
        .finalized
        .keys()
        .filter(|id| {
            DocKey::new(LedgerEntry::COLLECTION, id.as_str()).is_ok_and(|k| !c.mirror.contains_key(&k))
        })
        .cloned()
        .collect();
    for id in &unmetered {
        let detail = format!("attempt {id} is finalized with no ledger entry");
        c.violate("finalized_attempts_are_metered_once", id, detail);
    }
    let changed: Vec<String> = touched
        .ids(ProgressDoc::COLLECTION)
        .iter()
        .filter(|id| c.finalized.get(*id).is_some_and(|f| progress_of(c, id) != f.progress))
        .cloned()
        .collect();
    for id in changed {
        c.violate(
            "no_event_changes_a_finished_attempt",
            &id,
            format!("attempt {id}'s progress changed after it was finalized"),
        );
    }
    let entries: Vec<(String, Fields)> = touched
        .ids(LedgerEntry::COLLECTION)
        .iter()
        .filter_map(|id| {
            let key = DocKey::new(LedgerEntry::COLLECTION, id.as_str()).ok()?;
            Some((id.clone(), c.mirror.get(&key)?.fields.clone()))
        })
        .collect();
    for (id, fields) in entries {
        match c.ledger.get(&id) {
            Some(first) if *first != fields => {
                c.violate(
                    "finalized_attempts_are_metered_once",
                    &id,
                    format!("ledger entry {id} was written again"),
                );
            }
            Some(_) => {}
            None => {
                c.ledger.insert(id, fields);
            }
        }
    }
}

/// Keeps the per-(tenant, month) sums of the ledgers current with what
/// this step wrote to them.
fn sum_ledgers(c: &mut Checker, touched: &Touched) {
    let of_charge = |c: &mapi_cost::Charge| (c.amount_micros, c.vcpu_ms);
    let mut now_in = charges::<LedgerEntry>(c, touched, |e| (&e.tenant, e.at, of_charge(&e.charge)));
    now_in.extend(charges::<ItemLedgerEntry>(c, touched, |e| (&e.tenant, e.at, of_charge(&e.charge))));
    now_in.extend(charges::<ItemLedgerMinute>(c, touched, |e| {
        (&e.tenant, e.at, (e.sums.amount_micros, e.sums.vcpu_ms))
    }));
    now_in
        .extend(charges::<ScoreLedgerEntry>(c, touched, |e| (&e.tenant, e.at, (e.cost_micros(), e.vcpu_ms))));
    for (key, charged) in now_in {
        if let Some((month, (micros, vcpu))) = c.charged.remove(&key) {
            let s = c.sums.entry(month).or_default();
            s.0 -= micros;
            s.1 -= vcpu;
        }
        if let Some((month, (micros, vcpu))) = &charged {
            let s = c.sums.entry(month.clone()).or_default();
            s.0 += micros;
            s.1 += vcpu;
        }
        if let Some(charged) = charged {
            c.charged.insert(key, charged);
        }
    }
}

/// What each of the step's entries of ledger `T` charges now (`None` once gone).
fn charges<T: Doc + serde::de::DeserializeOwned>(
    c: &Checker,
    touched: &Touched,
    of: impl Fn(&T) -> (&TenantId, Timestamp, (i64, u64)),
) -> Vec<(DocKey, Option<Charged>)> {
    let charged = |e: &T| {
        let (tenant, at, (micros, vcpu)) = of(e);
        let month = mapi_quota::Period::Month.key(at);
        let vcpu = i64::try_from(vcpu).unwrap_or(i64::MAX);
        ((tenant.to_string(), month), (micros, vcpu))
    };
    let ids = touched.ids(T::COLLECTION).iter();
    ids.filter_map(|id| {
        Some((DocKey::new(T::COLLECTION, id.as_str()).ok()?, c.get::<T>(id).map(|e| charged(&e))))
    })
    .collect()
}

fn check_ledger(c: &mut Checker) {
    let sums = c.sums.clone();
    let tenants: BTreeSet<String> = c.all::<TenantDoc>().map(|(_, t)| t.id.to_string()).collect();
    let months: BTreeSet<String> = sums.keys().map(|(_, m)| m.clone()).collect();
    for month in &months {
        let spend: i64 = sums.iter().filter(|((_, m), _)| m == month).map(|(_, (micros, _))| micros).sum();
        let counter = c.counter(&format!("platform@{month}"));
        if counter.spend_micros != spend {
            let detail = format!(
                "in {month} the ledgers hold {spend} µ$, the platform's spend counter {} µ$",
                counter.spend_micros
            );
            c.violate("ledger_equals_counters", &format!("platform@{month}"), detail);
        }
    }
    for tenant in &tenants {
        for month in &months {
            let (spend, vcpu) = sums.get(&(tenant.clone(), month.clone())).copied().unwrap_or_default();
            let counter = c.counter(&format!("tenant:{tenant}@{month}"));
            if counter.spend_micros != spend || counter.charged_vcpu_ms != vcpu {
                let detail = format!(
                    "{tenant} in {month}: the ledgers hold {spend} µ$ and {vcpu} vCPU-ms, the counters {} µ$ and {} vCPU-ms",
                    counter.spend_micros, counter.charged_vcpu_ms
                );
                c.violate("ledger_equals_counters", &format!("{tenant}@{month}"), detail);
            }
        }
    }
}

fn check_reservations(c: &mut Checker) {
    let mut holding: BTreeMap<String, i64> = BTreeMap::new();
    for r in c.seen.values() {
        if !r.state().is_terminal() && r.reservation().as_ref().is_some_and(|res| !res.slots.is_empty()) {
            *holding.entry(r.tenant().to_string()).or_default() += 1;
        }
    }
    let tenants: Vec<String> = c.all::<TenantDoc>().map(|(_, t)| t.id.to_string()).collect();
    for tenant in tenants {
        let counter = c.counter(&format!("tenant:{tenant}"));
        let open = holding.get(&tenant).copied().unwrap_or(0);
        if counter.active_runs != open {
            let detail = format!(
                "{tenant}'s active_runs is {} with {open} unfinished runs holding a slot",
                counter.active_runs
            );
            c.violate("reservations_are_released", &tenant, detail);
        }
    }
    let negative: Vec<String> = c
        .all::<CounterDoc>()
        .filter(|(k, _)| !k.id().contains('#'))
        .map(|(k, _)| k.id().to_owned())
        .filter(|name| {
            let s = c.counter(name);
            s.active_runs < 0 || s.reserved_vcpu_ms < 0 || s.spend_micros < 0
        })
        .collect();
    for name in negative {
        c.violate("reservations_are_released", &name, format!("counter {name} went negative"));
    }
}

fn check_admissions(c: &mut Checker) {
    for tenant in std::mem::take(&mut c.admitted) {
        let Ok(id) = TenantId::parse(&tenant) else { continue };
        let tier = c.get::<TenantDoc>(&tenant).map_or(Tier::Public, |t| t.tier);
        let policy = c.get::<mapi_schema::QuotaPolicyDoc>(&tenant).map(|p| p.policy);
        let limits = mapi_quota::effective(tier, policy.as_ref());
        let open = c
            .seen
            .values()
            .filter(|r| r.tenant() == &id && !r.state().is_terminal() && r.reservation().is_some())
            .count();
        if let Some(max) = limits.concurrent_runs
            && open > max as usize
        {
            let detail = format!("{tenant} has {open} unfinished runs, its limit is {max}");
            c.violate("quotas_hold", &tenant, detail);
        }
    }
}

fn check_jobs(world: &mut World) {
    let c = &mut world.checker;
    let jobs: Vec<(String, Acked)> = c.jobs.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    for (id, acked) in jobs {
        let Some(job) = c.get::<JobDoc>(&id) else { continue };
        let counts = c.job_counts(&id);
        let done = (counts.succeeded + counts.failed).max(0) as u64;
        if done > job.items {
            c.violate(
                "job_counts_add_up",
                &id,
                format!("job {id} counts {done} finished items of {}", job.items),
            );
        }
        let base = mapi_jobs::layout::prefix(&job.tenant, &job.project, &job.id);
        for (key, writes) in world.data.inner.writes_under(&format!("{base}ends/")) {
            if writes > 1 + acked.rounds {
                let detail = format!("{key} was written {writes} times in {} round(s)", 1 + acked.rounds);
                c.violate("each_item_ends_once", &key, detail);
            }
        }
    }
}

fn check_executions(world: &mut World) {
    let now = world.now();
    let c = &mut world.checker;
    for e in world.executor.all() {
        let attempt = AttemptDoc::id_of(&e.submit.run, e.submit.attempt);
        // Until its worker speaks, the attempt may record a duplicate that
        // found no bootstrap; what it records when finalized is what is
        // polled and metered.
        if !e.took.is_empty()
            && let Some(recorded) = c.finalized.get(&attempt).and_then(|f| f.handle.clone())
            && recorded != e.handle
        {
            let detail = format!("{} did attempt {attempt}'s work, which records {recorded}", e.handle);
            c.violate("the_execution_that_ran_is_the_attempts", &e.handle.0, detail);
        }
        let (end, _) = e.end();
        if end <= now || !e.known(now) || e.starts_at > now {
            continue;
        }
        let run_final =
            c.seen.get(e.submit.run.as_str()).filter(|r| r.state().is_terminal()).map(RunDoc::updated_at);
        let done_at = c.finalized.get(&attempt).map(|f| f.at).into_iter().chain(run_final).min();
        if let Some(t) = done_at
            && now.since(t) >= OUTLIVE
        {
            let detail = format!(
                "{} of attempt {attempt} still runs {} s after the attempt was done",
                e.handle,
                now.since(t).as_secs()
            );
            c.violate("no_execution_outlives_its_attempt", &e.handle.0, detail);
        }
    }
}

/// Liveness and the jobs' final accounting, at the end of the seed.
pub fn at_end(world: &mut World) {
    let now = world.now();
    let c = &mut world.checker;
    c.now = now;
    let open: Vec<String> = c
        .runs
        .keys()
        .filter(|id| !c.seen.get(*id).is_some_and(|r| r.state().is_terminal()))
        .map(|id| {
            format!("run {id} ({})", c.seen.get(id).map_or("unseen".to_owned(), |r| r.state().to_string()))
        })
        .chain(c.jobs.keys().filter(|id| c.job_final(id) != Some(true)).map(|id| format!("job {id}")))
        .collect();
    if !open.is_empty() {
        let detail = format!(
            "not final {} after the faults stopped: {}",
            humanize(crate::world::LIVENESS),
            open.join(", ")
        );
        c.violate("everything_finishes", "all", detail);
    }
    let jobs: Vec<String> = c.jobs.keys().cloned().collect();
    for id in jobs {
        let Some(job) = c.get::<JobDoc>(&id) else { continue };
        if c.job_final(&id) == Some(true) {
            let counts = c.job_counts(&id);
            let (_, derived) = mapi_jobs::derive(
                job.items,
                job.fanout.enqueued,
                job.fanout.finished_at.is_some(),
                job.cancel_requested_at.is_some(),
                counts.succeeded.max(0) as u64,
                counts.failed.max(0) as u64,
            );
            if derived.succeeded + derived.failed + derived.cancelled != job.items {
                c.violate(
                    "job_counts_add_up",
                    &id,
                    format!("final job {id} accounts for {derived:?} of {} items", job.items),
                );
            }
        }
    }
    check_bootstraps(world);
    let _ = RunState::Queued;
}

fn check_bootstraps(world: &mut World) {
    let live: BTreeSet<String> = world.boot.inner.snapshot().into_iter().map(|(k, _)| k).collect();
    let c = &mut world.checker;
    for (key, writes) in world.boot.inner.writes_under("") {
        if writes > 1 {
            c.violate(
                "each_bootstrap_is_written_once",
                &key,
                format!("bootstrap {key} was written {writes} times"),
            );
        }
    }
    let ran: Vec<String> =
        c.finalized.iter().filter(|(_, f)| f.handle.is_some()).map(|(id, _)| id.clone()).collect();
    for id in ran {
        let Some(row) = c.get::<AttemptDoc>(&id) else { continue };
        for task in 0..row.task_count {
            let key = row.nonce.for_task(task).as_str().to_owned();
            if live.contains(&key) {
                c.violate(
                    "finalized_attempts_leave_no_bootstrap",
                    &id,
                    format!("attempt {id} was finalized and its task {task}'s bootstrap is still there"),
                );
            }
        }
    }
}

fn humanize(d: Duration) -> String {
    format!("{} h", d.as_secs() / 3600)
}
