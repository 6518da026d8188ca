//! Usage counters: what is running, reserved and charged, per tenant, per
//! token and for the whole platform, per UTC day, month and minute.
//!
//! Counters change only through the store's increments, in the same commit
//! as the run, ledger entry or state change they account for. Admission
//! uses guarded increments (`at_most` the limit), so racing submits never
//! over-admit and never conflict: the limit is checked where the counter is
//! written, not where it was read.
//!
//! Ids name the scope and the period: `tenant:acme`, `tenant:acme@2026-11-30`,
//! `tenant:acme@2026-11`, `tenant:acme@m29933581`, `token:1a2b3c4d5e6f@2026-11`,
//! `platform`, `platform@2026-11-30`.

use mapi_domain::{TenantId, Timestamp};
use mapi_quota::Period;
use mapi_store::{StoreError, Txn};
use serde::{Deserialize, Serialize};

use crate::{Doc, key};

/// One counter document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CounterDoc {
    /// Runs admitted and not yet ended.
    #[serde(default)]
    pub active_runs: i64,
    /// vCPU-milliseconds reserved by admitted runs, released when they end.
    #[serde(default)]
    pub reserved_vcpu_ms: i64,
    /// vCPU-milliseconds metered.
    #[serde(default)]
    pub charged_vcpu_ms: i64,
    /// Reserved plus charged: what a vCPU limit is guarded against.
    #[serde(default)]
    pub committed_vcpu_ms: i64,
    /// Cost metered, in micros.
    #[serde(default)]
    pub spend_micros: i64,
    /// Requests counted (in a minute counter).
    #[serde(default)]
    pub requests: i64,
    /// Bytes stored.
    #[serde(default)]
    pub storage_bytes: i64,
    /// Items of item jobs handed to the queue and not yet finished (a
    /// tenant's `tenant:T` counter; guarded by its concurrent-items limit).
    #[serde(default)]
    pub active_items: i64,
    /// Items of item jobs finished (in the day and month counters).
    #[serde(default)]
    pub items: i64,
}

impl CounterDoc {
    /// Reserved and charged vCPU-milliseconds: what a budget is measured against.
    pub fn vcpu_ms(&self) -> u64 {
        u64::try_from(self.committed_vcpu_ms).unwrap_or(0)
    }
}

/// The fields a counter has.
pub mod field {
    pub const ACTIVE: &str = "active_runs";
    pub const RESERVED: &str = "reserved_vcpu_ms";
    pub const CHARGED: &str = "charged_vcpu_ms";
    pub const COMMITTED: &str = "committed_vcpu_ms";
    pub const SPEND: &str = "spend_micros";
    pub const REQUESTS: &str = "requests";
    pub const STORAGE: &str = "storage_bytes";
    pub const ACTIVE_ITEMS: &str = "active_items";
    pub const ITEMS: &str = "items";
}

/// Reads counter `id` outside a transaction (zeros when absent).
pub async fn read(store: &dyn mapi_store::Store, id: &str) -> Result<CounterDoc, StoreError> {
    Ok(crate::get::<CounterDoc>(store, id).await?.unwrap_or_default())
}

/// Counters are named by id; the document carries no id field of its own.
impl Doc for CounterDoc {
    const COLLECTION: &'static str = "counters";
    fn doc_id(&self) -> String {
        String::new()
    }
}

pub fn tenant(t: &TenantId) -> String {
    format!("tenant:{t}")
}

pub fn tenant_period(t: &TenantId, period: Period, now: Timestamp) -> String {
    format!("tenant:{t}@{}", period.key(now))
}

pub fn tenant_minute(t: &TenantId, now: Timestamp) -> String {
    format!("tenant:{t}@m{}", now.as_secs().div_euclid(60))
}

pub fn token_period(token: &str, period: Period, now: Timestamp) -> String {
    format!("token:{token}@{}", period.key(now))
}

pub const PLATFORM: &str = "platform";

pub fn platform_period(period: Period, now: Timestamp) -> String {
    format!("platform@{}", period.key(now))
}

/// What an admitted run holds until it ends.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Reservation {
    pub vcpu_ms: u64,
    /// Counters whose reserved (and committed) vCPU-milliseconds hold `vcpu_ms`.
    pub budgets: Vec<String>,
    /// The limit each budget was admitted against (committed vCPU-ms at
    /// most), so a retry is admitted against the same limits.
    #[serde(default)]
    pub at_most: Vec<Option<i64>>,
    /// Counters whose `active_runs` holds one slot.
    pub slots: Vec<String>,
}

/// Increments to write in one commit, in order (the first guard that would
/// pass its limit fails the commit, so the order is the order of the checks).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bumps {
    steps: Vec<(String, &'static str, i64, Option<i64>)>,
}

impl Bumps {
    pub fn add(&mut self, id: &str, field: &'static str, delta: i64) {
        self.steps.push((id.to_owned(), field, delta, None));
    }

    /// An increment that fails the commit rather than pass `at_most`.
    pub fn guarded(&mut self, id: &str, field: &'static str, delta: i64, at_most: Option<i64>) {
        self.steps.push((id.to_owned(), field, delta, at_most));
    }

    pub fn extend(&mut self, other: Bumps) {
        self.steps.extend(other.steps);
    }

    /// Buffers the increments in `tx`.
    pub fn apply(&self, tx: &mut Txn<'_>) -> Result<(), StoreError> {
        for (id, field, delta, at_most) in &self.steps {
            tx.increment(&key::<CounterDoc>(id)?, field, *delta, *at_most);
        }
        Ok(())
    }

    /// What giving back `reservation` takes.
    pub fn release(reservation: &Reservation) -> Bumps {
        let mut b = Bumps::default();
        let vcpu = i64::try_from(reservation.vcpu_ms).unwrap_or(i64::MAX);
        for id in &reservation.budgets {
            b.add(id, field::RESERVED, -vcpu);
            b.add(id, field::COMMITTED, -vcpu);
        }
        for id in &reservation.slots {
            b.add(id, field::ACTIVE, -1);
        }
        b
    }

    /// Renews `reservation` for a run's next attempt, which holds
    /// `vcpu_ms`: the last attempt's share is metered now, so the old hold
    /// is given back and the new one taken, guarded by the limits it was
    /// admitted against. The commit fails if the retry would pass one.
    pub fn renew(reservation: &mut Reservation, vcpu_ms: u64) -> Bumps {
        let mut b = Bumps::default();
        let old = i64::try_from(reservation.vcpu_ms).unwrap_or(i64::MAX);
        let new = i64::try_from(vcpu_ms).unwrap_or(i64::MAX);
        for (i, id) in reservation.budgets.iter().enumerate() {
            let at_most = reservation.at_most.get(i).copied().flatten();
            b.add(id, field::RESERVED, -old);
            b.add(id, field::COMMITTED, -old);
            b.add(id, field::RESERVED, new);
            b.guarded(id, field::COMMITTED, new, at_most);
        }
        reservation.vcpu_ms = vcpu_ms;
        b
    }

    /// What a metered charge adds to the counters `ids`.
    pub fn charge(ids: &[String], vcpu_ms: u64, micros: i64) -> Bumps {
        let mut b = Bumps::default();
        let vcpu = i64::try_from(vcpu_ms).unwrap_or(i64::MAX);
        for id in ids {
            b.add(id, field::CHARGED, vcpu);
            b.add(id, field::COMMITTED, vcpu);
            b.add(id, field::SPEND, micros);
        }
        b
    }
}

/// A vCPU budget counter's id in words, for a run's error.
pub fn describe(id: &str) -> String {
    let Some((owner, period)) = id.split_once('@') else { return format!("the limit of {id}") };
    let whose = if owner.starts_with("token:") {
        "the token's vCPU-second budget"
    } else if owner.starts_with("tenant:") {
        "the tenant's vCPU-seconds limit"
    } else {
        "the platform's limit"
    };
    format!("{whose} for {period} (UTC)")
}

/// The vCPU-milliseconds an attempt reserves: its class for the run's whole
/// timeout, per task.
pub fn reserve_ms(class: mapi_domain::ResourceClass, task_count: u32, timeout_s: u32) -> u64 {
    u64::from(class.vcpu()) * u64::from(task_count) * u64::from(timeout_s) * 1000
}

/// Takes a run's reservation, for a run that is ending: the increments
/// that give it back (empty when it held none).
pub fn end_reservation(run: &mut crate::RunDoc) -> Bumps {
    run.reservation.take().map(|r| Bumps::release(&r)).unwrap_or_default()
}
