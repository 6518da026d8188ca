//! Usage counters: what is running, reserved and charged, per tenant, per
//! token and for the whole platform, per UTC day, month and minute.
//!
//! Counters change only through the store's increments, in the same commit
//! as the run, ledger entry or state change they account for.
//!
//! Ids name the scope and the period: `tenant:acme`, `tenant:acme@2026-11-30`,
//! `tenant:acme@2026-11`, `tenant:acme@m29933581`, `token:1a2b3c4d5e6f@2026-11`,
//! `platform`, `platform@2026-11-30`. Those are the counters' *names*.
//!
//! # Shards
//!
//! A Firestore document sustains about one write a second, so no counter is
//! one document: counter `c` is the sum of its shards `c#0` … `c#{N-1}`
//! ([`PLATFORM_SHARDS`] for the platform's, [`OWNER_SHARDS`] for a tenant's
//! or a token's) and of the document named `c` itself, the *legacy* part
//! that counters written before they were sharded left behind (it is still
//! counted, and reservations that name it give back into it, so a running
//! deployment upgrades without losing a count; nothing new is added to it).
//! [`Sharded`] is one counter as read (one batch read for all of them).
//!
//! - An increment with no limit (a charge, a request count with no limit)
//!   goes to the shard a hash of its seed (the run's id) picks, so a retried
//!   commit lands on the same shard.
//! - An increment with a limit `L` gives each shard a fixed share of `L`
//!   minus the legacy part (`⌊B/N⌋`, plus one for the first `B mod N`
//!   shards), so the shares add up to the limit. Admission reads the
//!   counter, checks the whole sum against `L` (the refusal and its detail
//!   come from that), then takes what it asks from the shards that have
//!   room under their share, starting at the seed's shard: each take is a
//!   guarded increment `at_most` the shard's share. Shards never pass their
//!   shares through admissions, so the sum never passes the limit, and the
//!   increments still read nothing, so admissions of different runs do not
//!   conflict. The cost: two admissions that race for the last room of one
//!   shard fail one commit (`LimitReached`) while another shard may still
//!   have room; the submit path plans again from a fresh read, which then
//!   picks that shard (or refuses when the sum is at the limit). A small
//!   limit (2 runs over 4 shards) is not refused early: a take uses any
//!   shard with room, and there is room somewhere whenever the sum is under
//!   the limit.
//! - What an admission took is recorded shard by shard
//!   ([`Reservation::slots`], [`Reservation::holds`]), and given back to the
//!   same shards.
//!
//! The alternative, reading every shard inside the admission's transaction
//! and writing one, is exact too but puts all `N` platform shards in the
//! read set of every admission: any two admissions of the platform would
//! conflict and retry, which is the single hot document again, as aborts.
//!
//! Architecture invariant: no counter document is written by every submit:
//! the platform's counters are spread over 16 shards, a tenant's and a
//! token's over 4, and the shard is chosen by the run (or dataset) id.
//!
//! # Which counters, and who writes them
//!
//! | Counter `C` | Shards (`C#k`) | Written by |
//! |---|---|---|
//! | `platform` | 16 | every run admitted and ended (`active_runs`) |
//! | `platform@{day}`, `platform@{month}` | 16 | every metered charge (`charged_vcpu_ms`, `committed_vcpu_ms`, `spend_micros`) |
//! | `tenant:T` | 4 | T's runs admitted and ended, uploads (`storage_bytes`), items reserved and finished (`active_items`, `items`) |
//! | `tenant:T@{day}`, `tenant:T@{month}` | 4 | T's vCPU reservations and charges |
//! | `tenant:T@m{minute}` | 4 | T's submits (`requests`) |
//! | `token:ID@{period}` | 4 | submits with a budgeted token, and their charges |
//!
//! Every counter is also read under its own unsharded name `counters/{C}`, the
//! legacy part: nothing new is added to it, and only reservations that name it
//! give back into it.
//!
//! So the platform's admissions and charges stand about 16 writes a second
//! before a counter document is hot, and one tenant's (or one token's) about 4.
//!
//! # Reading
//!
//! Admission reads every shard of the counters its request's checks look at,
//! and their legacy documents, in one batch read outside any transaction,
//! with the tenant's policy and the kill switches (see `mapi_quota::plan`): a
//! run with a budgeted token reads 42 counter documents, 17 of them the
//! platform's slots; an upload reads 10. The platform's spend (17 more) is
//! read only while a spend cap is set. That read is the price of spreading
//! the writes. A retry's renewal
//! reads only its budgets' shards, inside the finalize transaction.
//!
//! # Reservations
//!
//! What a run holds is its reservation, stored on the run:
//!
//! - `slots`: one slot in the tenant's and the platform's `active_runs`, and the
//!   shard of each that gave it;
//! - `holds`: its class × timeout in vCPU-ms on each vCPU budget (the tenant's
//!   day and month, the token's period), shard by shard, with the limit each was
//!   admitted against.
//!
//! A vCPU limit is measured against `committed` = reserved + charged.
//!
//! - Admission: `mapi_quota::admit` decides on the sums; the same limits become
//!   guarded increments of the shards with room, written in the run's own
//!   commit. Two submits racing for the last room of one shard fail one commit
//!   (`StoreError::LimitReached`); that submit is planned again from a fresh read
//!   (up to 4 times), which takes another shard or names the limit now reached.
//! - Metering (`meter`): each attempt's charge is added once, with its ledger
//!   entry, to `charged_vcpu_ms`, `committed_vcpu_ms` and `spend_micros` of the
//!   day and month it is metered in (the run's shard of each).
//! - A retry renews the reservation against the same limits: the finalize
//!   transaction reads its budget counters' shards, gives the old holds back and
//!   takes the new hold as an admission would, the attempt's charge counted (or
//!   the run fails with `QUOTA_EXCEEDED`).
//! - The run's end gives the reservation back to the shards that hold it.
//!
//! Architecture invariant: every counter change is written in the same commit as
//! the document whose existence it counts (the run, the dataset, the ledger
//! entry, the item marker), so counters never drift from what they count.

use crate::Period;
use mapi_domain::{TenantId, Timestamp};
use mapi_store::{DocKey, Document, StoreError, Txn};
use serde::{Deserialize, Serialize};

use mapi_store::typed::{Doc, key};

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
    /// Bytes that left the platform for the tenant (download links,
    /// exports, score responses, webhook bodies), in the month counter.
    #[serde(default)]
    pub egress_bytes: i64,
}

impl CounterDoc {
    /// Reserved and charged vCPU-milliseconds: what a budget is measured against.
    pub fn vcpu_ms(&self) -> u64 {
        u64::try_from(self.committed_vcpu_ms).unwrap_or(0)
    }

    /// The value of the field `field_name` (one of [`field`]'s; 0 for any other).
    pub fn get(&self, field_name: &str) -> i64 {
        match field_name {
            field::ACTIVE => self.active_runs,
            field::RESERVED => self.reserved_vcpu_ms,
            field::CHARGED => self.charged_vcpu_ms,
            field::COMMITTED => self.committed_vcpu_ms,
            field::SPEND => self.spend_micros,
            field::REQUESTS => self.requests,
            field::STORAGE => self.storage_bytes,
            field::ACTIVE_ITEMS => self.active_items,
            field::ITEMS => self.items,
            field::EGRESS => self.egress_bytes,
            _ => 0,
        }
    }

    /// Adds `delta` to the field `field_name` (one of [`field`]'s; others
    /// are ignored).
    pub fn add(&mut self, field_name: &str, delta: i64) {
        let slot = match field_name {
            field::ACTIVE => &mut self.active_runs,
            field::RESERVED => &mut self.reserved_vcpu_ms,
            field::CHARGED => &mut self.charged_vcpu_ms,
            field::COMMITTED => &mut self.committed_vcpu_ms,
            field::SPEND => &mut self.spend_micros,
            field::REQUESTS => &mut self.requests,
            field::STORAGE => &mut self.storage_bytes,
            field::ACTIVE_ITEMS => &mut self.active_items,
            field::ITEMS => &mut self.items,
            field::EGRESS => &mut self.egress_bytes,
            _ => return,
        };
        *slot = slot.saturating_add(delta);
    }

    /// Field by field, `self + other` (saturating).
    pub fn plus(&self, other: &CounterDoc) -> CounterDoc {
        CounterDoc {
            active_runs: self.active_runs.saturating_add(other.active_runs),
            reserved_vcpu_ms: self.reserved_vcpu_ms.saturating_add(other.reserved_vcpu_ms),
            charged_vcpu_ms: self.charged_vcpu_ms.saturating_add(other.charged_vcpu_ms),
            committed_vcpu_ms: self.committed_vcpu_ms.saturating_add(other.committed_vcpu_ms),
            spend_micros: self.spend_micros.saturating_add(other.spend_micros),
            requests: self.requests.saturating_add(other.requests),
            storage_bytes: self.storage_bytes.saturating_add(other.storage_bytes),
            active_items: self.active_items.saturating_add(other.active_items),
            items: self.items.saturating_add(other.items),
            egress_bytes: self.egress_bytes.saturating_add(other.egress_bytes),
        }
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
    pub const EGRESS: &str = "egress_bytes";
}

/// Reads counter `name` outside a transaction: the sum of its shards and
/// its legacy document (zeros when there are none).
pub async fn read(store: &dyn mapi_store::Store, name: &str) -> Result<CounterDoc, StoreError> {
    let names = [name.to_owned()];
    Ok(read_all(store, &names).await?.pop().map(|c| c.total()).unwrap_or_default())
}

/// Reads counters `names` outside a transaction, in one batch read.
pub async fn read_all(store: &dyn mapi_store::Store, names: &[String]) -> Result<Vec<Sharded>, StoreError> {
    let docs = store.get(&keys(names)?, None).await?;
    Sharded::decode_all(names, &docs)
}

/// The documents counters `names` are read from, in the order
/// [`Sharded::decode_all`] expects them: for each name, its legacy
/// document, then its shards.
pub fn keys(names: &[String]) -> Result<Vec<DocKey>, StoreError> {
    names.iter().flat_map(|n| Sharded::doc_ids(n)).map(|id| key::<CounterDoc>(&id)).collect()
}

/// How many shards the platform's counters have.
pub const PLATFORM_SHARDS: u32 = 16;
/// How many shards a tenant's or a token's counters have.
pub const OWNER_SHARDS: u32 = 4;

/// How many shards counter `name` has.
pub fn shards_of(name: &str) -> u32 {
    let owner = name.split_once('@').map_or(name, |(owner, _)| owner);
    if owner == PLATFORM { PLATFORM_SHARDS } else { OWNER_SHARDS }
}

/// The id of shard `k` of counter `name`.
pub fn shard_id(name: &str, k: u32) -> String {
    format!("{name}#{k}")
}

/// The counter a document id belongs to: `tenant:acme#2` → `tenant:acme`
/// (a legacy document is its counter's own name).
pub fn counter_of(id: &str) -> &str {
    match id.rsplit_once('#') {
        Some((name, k)) if !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()) => name,
        _ => id,
    }
}

/// The shard of `n` that `seed` picks (FNV-1a, so every process and
/// version picks the same one for the same seed).
pub fn pick(seed: &str, n: u32) -> u32 {
    let hash =
        seed.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    u32::try_from(hash % u64::from(n.max(1))).unwrap_or(0)
}

/// One counter as read: its legacy document and its shards.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sharded {
    pub name: String,
    /// The document named after the counter, written before counters were
    /// sharded: counted, given back into, never added to.
    pub legacy: CounterDoc,
    /// Shard `k` at index `k`.
    pub shards: Vec<CounterDoc>,
}

/// Part of an increment with a limit: `amount` on `shard`, which must not
/// pass `at_most` (its share of the limit; `None` when there is no limit).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Take {
    pub shard: String,
    pub amount: i64,
    pub at_most: Option<i64>,
}

impl Sharded {
    /// The documents counter `name` is the sum of: legacy first, then shards.
    pub fn doc_ids(name: &str) -> Vec<String> {
        std::iter::once(name.to_owned()).chain((0..shards_of(name)).map(|k| shard_id(name, k))).collect()
    }

    /// Decodes counters `names` from `docs`, read in the order of [`keys`].
    pub fn decode_all(names: &[String], docs: &[Option<Document>]) -> Result<Vec<Sharded>, StoreError> {
        let mut out = Vec::with_capacity(names.len());
        let mut rest = docs;
        for name in names {
            let n = 1 + shards_of(name) as usize;
            let Some((mine, tail)) = rest.split_at_checked(n) else {
                return Err(StoreError::InvalidArgument(format!(
                    "counter {name}: {} documents read, {n} needed",
                    rest.len()
                )));
            };
            rest = tail;
            let mut decoded = mine
                .iter()
                .map(|d| {
                    d.as_ref().map(|d| d.decode::<CounterDoc>()).transpose().map(Option::unwrap_or_default)
                })
                .collect::<Result<Vec<_>, _>>()?;
            let shards = decoded.split_off(1);
            let legacy = decoded.pop().unwrap_or_default();
            out.push(Sharded { name: name.clone(), legacy, shards });
        }
        Ok(out)
    }

    /// The document `id` of this counter (its legacy document or a shard).
    pub fn doc_mut(&mut self, id: &str) -> Option<&mut CounterDoc> {
        if id == self.name {
            return Some(&mut self.legacy);
        }
        let k: usize = id.strip_prefix(self.name.as_str())?.strip_prefix('#')?.parse().ok()?;
        self.shards.get_mut(k)
    }

    /// The counter's value: its shards and its legacy document added up.
    pub fn total(&self) -> CounterDoc {
        self.shards.iter().fold(self.legacy.clone(), |sum, s| sum.plus(s))
    }

    /// Shard `k`'s share of the limit on `field_name`: the limit less the
    /// legacy part, split evenly, the remainder one each to the first shards.
    pub fn share(&self, field_name: &str, limit: i64, k: usize) -> i64 {
        let n = i64::try_from(self.shards.len().max(1)).unwrap_or(i64::MAX);
        let base = limit.saturating_sub(self.legacy.get(field_name)).max(0);
        let extra = i64::from(i64::try_from(k).unwrap_or(i64::MAX) < base % n);
        base / n + extra
    }

    /// Plans adding `amount` to the field `field_name` without passing
    /// `limit`: from the shard `seed` picks on, each shard with room under
    /// its share takes what it can. `None` when the shards' room is less
    /// than `amount`, which happens only when the sum plus `amount` passes
    /// the limit (the room left under the shares adds up to at least the
    /// room left under the limit). With no limit, all of it goes to the
    /// seed's shard.
    pub fn take(&self, field_name: &str, amount: i64, limit: Option<i64>, seed: &str) -> Option<Vec<Take>> {
        let n = self.shards.len();
        if n == 0 {
            return None;
        }
        let start = pick(seed, u32::try_from(n).unwrap_or(u32::MAX)) as usize;
        let Some(limit) = limit else {
            return Some(vec![Take { shard: shard_id(&self.name, start as u32), amount, at_most: None }]);
        };
        let mut takes = Vec::new();
        let mut left = amount;
        for i in 0..n {
            if left <= 0 {
                break;
            }
            let k = (start + i) % n;
            let share = self.share(field_name, limit, k);
            let room = share.saturating_sub(self.shards[k].get(field_name));
            if room <= 0 {
                continue;
            }
            let part = room.min(left);
            takes.push(Take { shard: shard_id(&self.name, k as u32), amount: part, at_most: Some(share) });
            left -= part;
        }
        (left <= 0).then_some(takes)
    }
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
    /// Whole counters (legacy documents) whose reserved (and committed)
    /// vCPU-milliseconds hold `vcpu_ms`: reservations made before counters
    /// were sharded. New ones record [`Reservation::holds`].
    #[serde(default)]
    pub budgets: Vec<String>,
    /// The limit each of `budgets` was admitted against (committed vCPU-ms
    /// at most), so a retry is admitted against the same limits.
    #[serde(default)]
    pub at_most: Vec<Option<i64>>,
    /// Counter documents (shards, or legacy documents in reservations made
    /// before sharding) whose `active_runs` holds one slot.
    pub slots: Vec<String>,
    /// Budget shards and what each holds: for each budget counter, its
    /// holds add up to `vcpu_ms`.
    #[serde(default)]
    pub holds: Vec<Hold>,
}

/// vCPU-milliseconds a run holds in one shard of a budget counter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Hold {
    /// The shard's document id (`tenant:acme@2026-11#2`).
    pub shard: String,
    pub vcpu_ms: u64,
    /// The shard's share of the limit the run was admitted against.
    pub at_most: Option<i64>,
    /// That limit (committed vCPU-ms at most), so a retry is admitted
    /// against the same one.
    #[serde(default)]
    pub limit: Option<i64>,
}

impl Reservation {
    /// The budget counters its holds are in, each once, in the order of
    /// the admission's checks: what a renewal reads.
    pub fn hold_counters(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        for h in &self.holds {
            let name = counter_of(&h.shard);
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        names
    }
}

/// Increments to write in one commit, in order (the first guard that would
/// pass its limit fails the commit, so the order is the order of the checks).
/// Ids are counter document ids: shards (or legacy documents).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bumps {
    steps: Vec<(String, &'static str, i64, Option<i64>)>,
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Bumps {
    pub fn add(&mut self, id: &str, field: &'static str, delta: i64) {
        self.steps.push((id.to_owned(), field, delta, None));
    }

    /// An increment of counter `name` with no limit, in the shard `seed` picks.
    pub fn add_to(&mut self, name: &str, seed: &str, field: &'static str, delta: i64) {
        self.add(&shard_id(name, pick(seed, shards_of(name))), field, delta);
    }

    /// An increment that fails the commit rather than pass `at_most`.
    pub fn guarded(&mut self, id: &str, field: &'static str, delta: i64, at_most: Option<i64>) {
        self.steps.push((id.to_owned(), field, delta, at_most));
    }

    /// The planned parts of an increment of `field` (see [`Sharded::take`]).
    pub fn take(&mut self, field: &'static str, takes: &[Take]) {
        for t in takes {
            self.guarded(&t.shard, field, t.amount, t.at_most);
        }
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

    /// What giving back `reservation` takes: each part from the document
    /// that holds it.
    pub fn release(reservation: &Reservation) -> Bumps {
        let mut b = Bumps::default();
        let vcpu = to_i64(reservation.vcpu_ms);
        for id in &reservation.budgets {
            b.add(id, field::RESERVED, -vcpu);
            b.add(id, field::COMMITTED, -vcpu);
        }
        for h in &reservation.holds {
            b.add(&h.shard, field::RESERVED, -to_i64(h.vcpu_ms));
            b.add(&h.shard, field::COMMITTED, -to_i64(h.vcpu_ms));
        }
        for id in &reservation.slots {
            b.add(id, field::ACTIVE, -1);
        }
        b
    }

    /// Renews `reservation` for a run's next attempt, which holds
    /// `vcpu_ms`: the last attempt's share is metered now, so the old hold
    /// is given back and the new one taken, against the limits it was
    /// admitted against. The commit fails if the retry would pass one.
    ///
    /// Sharded budgets are checked like an admission: `read` holds the
    /// reservation's [`Reservation::hold_counters`] as read in the renewing
    /// transaction (so the commit conflicts with whatever changed them), and
    /// `pending` the increments the same commit also writes (the attempt's
    /// charge). With its old holds given back, each counter must have room
    /// for the new amount under its limit; it is then taken from the shards
    /// with room, as at admission. `Err(LimitReached)` names the counter
    /// that would pass its limit.
    pub fn renew(
        reservation: &mut Reservation,
        vcpu_ms: u64,
        read: &[Sharded],
        pending: &Bumps,
        seed: &str,
    ) -> Result<Bumps, StoreError> {
        let mut b = Bumps::default();
        let old = to_i64(reservation.vcpu_ms);
        let new = to_i64(vcpu_ms);
        for (i, id) in reservation.budgets.iter().enumerate() {
            let at_most = reservation.at_most.get(i).copied().flatten();
            b.add(id, field::RESERVED, -old);
            b.add(id, field::COMMITTED, -old);
            b.add(id, field::RESERVED, new);
            b.guarded(id, field::COMMITTED, new, at_most);
        }
        let mut holds = Vec::with_capacity(reservation.holds.len());
        for name in reservation.hold_counters() {
            let Some(mut view) = read.iter().find(|c| c.name == name).cloned() else {
                return Err(StoreError::Internal(
                    format!("renewing a reservation without reading counter {name}").into(),
                ));
            };
            for (id, f, delta, _) in &pending.steps {
                if counter_of(id) == name
                    && let Some(doc) = view.doc_mut(id)
                {
                    doc.add(f, *delta);
                }
            }
            let mine: Vec<&Hold> =
                reservation.holds.iter().filter(|h| counter_of(&h.shard) == name).collect();
            let limit = mine.iter().find_map(|h| h.limit);
            for h in &mine {
                if let Some(doc) = view.doc_mut(&h.shard) {
                    doc.add(field::COMMITTED, -to_i64(h.vcpu_ms));
                }
                b.add(&h.shard, field::RESERVED, -to_i64(h.vcpu_ms));
                b.add(&h.shard, field::COMMITTED, -to_i64(h.vcpu_ms));
            }
            let counter_key = key::<CounterDoc>(&name)?;
            let limit_reached =
                || StoreError::LimitReached { key: counter_key.clone(), field: field::COMMITTED.to_owned() };
            if limit.is_some_and(|l| view.total().committed_vcpu_ms.saturating_add(new) > l) {
                return Err(limit_reached());
            }
            let takes = view.take(field::COMMITTED, new, limit, seed).ok_or_else(limit_reached)?;
            for t in takes {
                b.add(&t.shard, field::RESERVED, t.amount);
                b.guarded(&t.shard, field::COMMITTED, t.amount, t.at_most);
                holds.push(Hold {
                    shard: t.shard,
                    vcpu_ms: u64::try_from(t.amount).unwrap_or(0),
                    at_most: t.at_most,
                    limit,
                });
            }
        }
        reservation.holds = holds;
        reservation.vcpu_ms = vcpu_ms;
        Ok(b)
    }
}

/// A vCPU budget counter's id in words, for a run's error.
pub fn describe(id: &str) -> String {
    let id = counter_of(id);
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

#[cfg(test)]
mod tests;
