//! Charging, in one place: what each billable kind of work costs, and the
//! one set of writes that records it.
//!
//! Each kind has one pure function that prices the work and returns a
//! [`Charge`]: [`attempt`] (a run's attempt, its class for its wall time),
//! [`item`] (an item of an item job, class S for its time) and [`score`] (a
//! score of an endpoint, request- or instance-billed). A charge holds the
//! ledger's change (an attempt's entry, created once; an item's share of
//! its job's minute; a score's minute document as it becomes), what it adds
//! to the usage rollups, and the bumps of the usage counters: charged and
//! committed vCPU-ms and spend on the tenant's, the platform's (the spend
//! cap's) and the token's day and month, and for items the tenant's count
//! of items. The caller buffers it with [`Charge::write`] in the commit
//! that makes the work's end count (the attempt's finalization, the item's
//! marker, the score's statistics), so the ledger, the rollups and the
//! counters cannot disagree. Every time is the caller's `now` (the
//! platform's clock), never the system's.
//!
//! A new billable kind (an endpoint's instance time, a plugin's run) is a
//! new function here and a new [`Ledger`] case, and nothing else.
//!
//! Architecture invariant: ledger entries, usage rollups and the counters'
//! charged, committed, spend and items fields are written by
//! [`Charge::write`] only; nothing here does I/O but the buffering of a
//! transaction's writes.

use std::time::Duration;

use mapi_cost::{CURRENT, REQUEST_BILLING_2026_11, ScoreCharge};
use mapi_domain::endpoint::Accelerator;
use mapi_domain::{AttemptNo, JobId, ProjectId, ResourceClass, RunId, TenantId, Timestamp};
use mapi_quota::Period;
use mapi_quota::counters::{self, Bumps, field, pick};
use mapi_schema::usage::{self, Line, Totals};
use mapi_schema::{
    Doc, InstanceLedgerEntry, ItemLedgerEntry, ItemLedgerMinute, ItemSums, LedgerEntry, ScoreLedgerEntry,
};
use mapi_store::{StoreError, Txn};

/// Who pays for work: its tenant and project, and the public id of the API
/// token it was asked with (`None`: a person's session).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Payer<'a> {
    pub tenant: &'a TenantId,
    pub project: &'a ProjectId,
    pub token: Option<&'a str>,
}

/// The charge of one piece of work, to write in the commit that ends it.
#[must_use = "a charge records nothing until it is written in a commit"]
#[derive(Clone, Debug, PartialEq)]
pub struct Charge {
    ledger: Ledger,
    bumps: Bumps,
    amount_micros: i64,
    vcpu_ms: u64,
}

/// What a charge changes in the ledgers.
#[derive(Clone, Debug, PartialEq)]
enum Ledger {
    /// A run's attempt: its entry, created once (a second finalization's
    /// commit fails on it, so the attempt is never charged twice).
    Attempt(Box<LedgerEntry>),
    /// An item: added to its job's minute document (merged and incremented,
    /// no read, so items ending together never conflict).
    Item(Box<ItemLedgerEntry>),
    /// A score: its minute document as it becomes with the score in it (the
    /// caller read it in the transaction), and what the score added.
    Score { minute: Box<ScoreLedgerEntry>, added: Totals, seed: String, at: Timestamp, priced: ScoreCharge },
    /// An endpoint's idle instance time of one window: its entry, created once.
    Instance(Box<InstanceLedgerEntry>),
}

impl Charge {
    /// Buffers the charge in `tx`: the ledger's change, what it adds to the
    /// usage rollups of its tenant and project, and the counters' bumps.
    pub fn write(&self, tx: &mut Txn<'_>) -> Result<(), StoreError> {
        match &self.ledger {
            Ledger::Attempt(e) => {
                mapi_schema::tx_create(tx, &**e)?;
                record(tx, (&e.tenant, &e.project), e.at, &e.doc_id(), &usage::of_run(e))?;
            }
            Ledger::Item(e) => {
                let minute = ItemLedgerMinute::of(e);
                let key = mapi_schema::key::<ItemLedgerMinute>(&minute.doc_id())?;
                let mut fields = mapi_store::encode(&minute)?;
                fields.retain(|name, _| !ItemSums::FIELDS.contains(&name.as_str()));
                tx.merge(&key, fields);
                for (f, n) in ItemSums::of(&e.charge) {
                    tx.increment(&key, f, n, None);
                }
                record(tx, (&e.tenant, &e.project), e.at, &e.doc_id(), &usage::of_item(e))?;
            }
            Ledger::Score { minute, added, seed, at, .. } => {
                mapi_schema::tx_put(tx, &**minute)?;
                let line = usage::score_line(&minute.accelerator, minute.token.as_deref());
                record(tx, (&minute.tenant, &minute.project), *at, seed, &(line, added.clone()))?;
            }
            Ledger::Instance(e) => {
                mapi_schema::tx_create(tx, &**e)?;
                record(tx, (&e.tenant, &e.project), e.at, &e.doc_id(), &usage::of_instance(e))?;
            }
        }
        self.bumps.apply(tx)
    }

    /// The counters' bumps this charge writes.
    pub fn bumps(&self) -> &Bumps {
        &self.bumps
    }

    /// What it adds to spend, in micro-units (a score's: the change in its
    /// minute's rounded amount, so a minute's scores add up exactly).
    pub fn amount_micros(&self) -> i64 {
        self.amount_micros
    }

    /// The vCPU-milliseconds it charges.
    pub fn vcpu_ms(&self) -> u64 {
        self.vcpu_ms
    }

    /// A score's price, in nano-units (what its endpoint's statistics add).
    pub fn score_nanos(&self) -> Option<u64> {
        match &self.ledger {
            Ledger::Score { priced, .. } => Some(priced.nanos),
            Ledger::Attempt(_) | Ledger::Item(_) | Ledger::Instance(_) => None,
        }
    }
}

/// The usage counters a charge made at `now` adds to: the tenant's, the
/// platform's (which the spend cap reads) and the token's, each for the day
/// and the month.
pub fn counters_of(payer: &Payer<'_>, now: Timestamp) -> Vec<String> {
    let mut ids = Vec::with_capacity(6);
    for period in [Period::Day, Period::Month] {
        ids.push(counters::tenant_period(payer.tenant, period, now));
        ids.push(counters::platform_period(period, now));
        if let Some(t) = payer.token {
            ids.push(counters::token_period(t, period, now));
        }
    }
    ids
}

/// The bumps of `vcpu_ms` and `micros` charged to the counters `names`, in
/// the shard of each that `seed` (the ledger entry's id) picks.
fn charged(names: &[String], seed: &str, vcpu_ms: u64, micros: i64) -> Bumps {
    let mut b = Bumps::default();
    let vcpu = i64::try_from(vcpu_ms).unwrap_or(i64::MAX);
    for name in names {
        b.add_to(name, seed, field::CHARGED, vcpu);
        b.add_to(name, seed, field::COMMITTED, vcpu);
        b.add_to(name, seed, field::SPEND, micros);
    }
    b
}

/// A run's attempt `attempt` of `tasks` tasks of `class`, each with `gpus`
/// accelerators, that ran for `wall`, ended at `now`.
pub fn attempt(
    payer: &Payer<'_>,
    run: &RunId,
    attempt: AttemptNo,
    (class, gpus, tasks): (ResourceClass, u32, u32),
    wall: Duration,
    now: Timestamp,
) -> Charge {
    let charge = CURRENT.charge_used(class, gpus, tasks, wall);
    let (amount_micros, vcpu_ms) = (charge.amount_micros, charge.vcpu_ms);
    let bumps = charged(&counters_of(payer, now), run.as_str(), vcpu_ms, amount_micros);
    let entry = LedgerEntry {
        tenant: payer.tenant.clone(),
        project: payer.project.clone(),
        run: run.clone(),
        attempt,
        charge,
        token: payer.token.map(str::to_owned),
        at: now,
    };
    Charge { ledger: Ledger::Attempt(Box::new(entry)), bumps, amount_micros, vcpu_ms }
}

/// What an item that ran for `took` costs, in micro-units: class S, one
/// task. Its marker records it, and [`item`] charges it as recorded.
pub fn item_cost(took: Duration) -> i64 {
    CURRENT.charge(ResourceClass::S, 1, took).amount_micros
}

/// Item `idx` of `job` in `round`, which ran `duration_ms` and cost
/// `cost_micros` (as its marker records them), ended at `now`. Besides
/// the charge, the tenant's day and month count the item.
pub fn item(
    payer: &Payer<'_>,
    (job, idx, round): (&JobId, u64, u32),
    (duration_ms, cost_micros): (u64, i64),
    now: Timestamp,
) -> Charge {
    let mut charge = CURRENT.charge(ResourceClass::S, 1, Duration::from_millis(duration_ms));
    charge.amount_micros = cost_micros;
    let vcpu_ms = charge.vcpu_ms;
    let entry = ItemLedgerEntry {
        tenant: payer.tenant.clone(),
        project: payer.project.clone(),
        job: job.clone(),
        idx,
        round,
        charge,
        token: payer.token.map(str::to_owned),
        at: now,
    };
    // The counters' shards are picked by the item's ledger id.
    let seed = entry.doc_id();
    let mut bumps = Bumps::default();
    for period in Period::ALL {
        bumps.add_to(&counters::tenant_period(payer.tenant, period, now), &seed, field::ITEMS, 1);
    }
    bumps.extend(charged(&counters_of(payer, now), &seed, vcpu_ms, cost_micros));
    Charge { ledger: Ledger::Item(Box::new(entry)), bumps, amount_micros: cost_micros, vcpu_ms }
}

/// What a score answered in `ms` on `accelerator` costs, and the price
/// list's name: a `cpu` endpoint is request-billed (the time rounded up to
/// 100 ms on the instance's vCPU and memory, plus the request fee); an `l4`
/// endpoint is instance-billed, and a score is its own time on the instance
/// (the instance's idle time between scores is not in it).
pub fn score_price(accelerator: Accelerator, ms: u64) -> (ScoreCharge, &'static str) {
    let (vcpus, mib) = accelerator.resources();
    match accelerator {
        Accelerator::Cpu => {
            let rates = REQUEST_BILLING_2026_11;
            (rates.score(vcpus, mib / 1024, ms), rates.version)
        }
        Accelerator::L4 => (CURRENT.instance_score(vcpus, mib / 1024, ms), CURRENT.version),
    }
}

/// One score that took `took` (answered, or failed when `error`), added to
/// `minute`, its endpoint's ledger document of the minute, token and shard
/// (as the caller's transaction read it, or empty). `seed` picks the
/// rollups' and counters' shards.
pub fn score(
    payer: &Payer<'_>,
    mut minute: ScoreLedgerEntry,
    (accelerator, took, error): (Accelerator, Duration, bool),
    seed: &str,
    now: Timestamp,
) -> Charge {
    let ms = u64::try_from(took.as_millis()).unwrap_or(u64::MAX).max(1);
    let (priced, table) = score_price(accelerator, ms);
    let before = minute.cost_micros();
    minute.add(error, &priced, table);
    let amount_micros = minute.cost_micros() - before;
    let bumps = charged(&counters_of(payer, now), seed, priced.vcpu_ms, amount_micros);
    let added = Totals {
        cost_micros: amount_micros,
        vcpu_ms: priced.vcpu_ms,
        gib_ms: priced.gib_ms,
        accelerator_ms: priced.accelerator_ms,
        scores: 1,
        ..Totals::default()
    };
    let ledger = Ledger::Score { minute: Box::new(minute), added, seed: seed.to_owned(), at: now, priced };
    Charge { ledger, bumps, amount_micros, vcpu_ms: priced.vcpu_ms }
}

/// The idle instance time of endpoint `endpoint` on `accelerator`, kept at
/// least `min_instances` warm, in the window `[from, to)`: its instances
/// were up `instance` in total, of which its scores took `busy` (and
/// charged themselves). An `l4` endpoint is instance-billed: all its idle
/// time is charged at instance prices. A `cpu` endpoint is request-billed:
/// only its minimum instances' idle time is billed (at most
/// `min_instances` × the window), at the idle rate; with no minimum it
/// charges nothing here.
pub fn instance(
    payer: &Payer<'_>,
    (endpoint, accelerator, min_instances): (&str, Accelerator, u32),
    (from, to): (Timestamp, Timestamp),
    (instance, busy): (Duration, Duration),
    now: Timestamp,
) -> Charge {
    let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    let (instance_ms, busy_ms) = (ms(instance), ms(busy));
    let window_ms = u64::try_from(to.since(from).as_millis()).unwrap_or(u64::MAX);
    let idle_ms = match accelerator {
        Accelerator::L4 => instance_ms.saturating_sub(busy_ms),
        Accelerator::Cpu => {
            instance_ms.saturating_sub(busy_ms).min(u64::from(min_instances).saturating_mul(window_ms))
        }
    };
    let (vcpus, mib) = accelerator.resources();
    let priced = match accelerator {
        _ if idle_ms == 0 => ScoreCharge::default(),
        Accelerator::L4 => CURRENT.instance_score(vcpus, mib / 1024, idle_ms),
        Accelerator::Cpu => REQUEST_BILLING_2026_11.idle(vcpus, mib / 1024, idle_ms),
    };
    let table = match accelerator {
        Accelerator::L4 => CURRENT.version,
        Accelerator::Cpu => REQUEST_BILLING_2026_11.version,
    };
    let amount_micros = mapi_cost::nanos_to_micros(priced.nanos);
    let entry = InstanceLedgerEntry {
        tenant: payer.tenant.clone(),
        project: payer.project.clone(),
        endpoint: endpoint.to_owned(),
        accelerator: accelerator.as_str().to_owned(),
        from,
        to,
        instance_ms,
        busy_ms,
        idle_ms,
        price_table: table.to_owned(),
        vcpu_ms: priced.vcpu_ms,
        gib_ms: priced.gib_ms,
        accelerator_ms: priced.accelerator_ms,
        cost_nanos: priced.nanos,
        at: now,
    };
    let bumps = charged(&counters_of(payer, now), &entry.doc_id(), priced.vcpu_ms, amount_micros);
    Charge { ledger: Ledger::Instance(Box::new(entry)), bumps, amount_micros, vcpu_ms: priced.vcpu_ms }
}

/// `bytes` that left the platform for `tenant` at `now` (a score's answer,
/// a webhook's body, an export), added to the tenant's egress of the month
/// in the shard `seed` picks. Unguarded: what left is counted even past the
/// limit; admission refuses what would leave next
/// (`mapi_quota::Ask::Egress`, and a score once the month's is spent).
pub fn egress(tenant: &TenantId, bytes: u64, seed: &str, now: Timestamp) -> Bumps {
    let mut b = Bumps::default();
    let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
    b.add_to(&counters::tenant_period(tenant, Period::Month, now), seed, field::EGRESS, bytes);
    b
}

/// Buffers in `tx` what `line` adds (`totals`) to the rollups of `tenant`
/// and of its `project` for the day of `at`, in the shards `seed` picks.
fn record(
    tx: &mut Txn<'_>,
    (tenant, project): (&TenantId, &ProjectId),
    at: Timestamp,
    seed: &str,
    (line, totals): &(Line, Totals),
) -> Result<(), StoreError> {
    let day = Period::Day.key(at);
    let k = pick(seed, usage::ROLLUP_SHARDS) as usize;
    for scope in [usage::Scope::Tenant(tenant), usage::Scope::Project(tenant, project)] {
        let Some(id) = scope.doc_ids(&day).into_iter().nth(k) else { continue };
        let key = mapi_store::DocKey::new(usage::ROLLUP_COLLECTION, id)?;
        for m in usage::MEASURES {
            let n = totals.get(m);
            if n != 0 {
                tx.increment(&key, &line.field(m), n, None);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
