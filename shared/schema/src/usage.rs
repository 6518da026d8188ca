//! Usage rollups: the ledgers summed per UTC day, written in the commit of
//! each ledger change, so a usage report reads a bounded number of
//! documents however long the ledgers grow.
//!
//! # Documents
//!
//! A rollup is the sum of [`ROLLUP_SHARDS`] documents of collection
//! [`ROLLUP_COLLECTION`], one set per scope and day: `{tenant}@{day}#{k}`
//! for the whole tenant and `{tenant}:{project}@{day}#{k}` for one project
//! (`day` as `2026-12-05`). Each change of a ledger adds to one shard of
//! each of the two, the one its seed picks (the ledger entry's id, or the
//! score's seed), so concurrent charges of one tenant rarely write the same
//! document. A month's report of one scope reads at most 31 × 4 documents,
//! in one batch read.
//!
//! Writes are the store's increments: they read nothing, so they never make
//! a ledger commit conflict with another.
//!
//! # Fields
//!
//! Each field holds one measure of one [`Line`] (kind, resource class and
//! token): `l{hex}_{measure}`, where `hex` is the line's text
//! (`run|S|1a2b3c4d5e6f`, `item|S` without a token) in lower-case hex, so
//! any class or token is a valid field name, and `measure` one of
//! [`MEASURES`]. A day of a tenant with `t` tokens, `c` classes and 3 kinds
//! has at most `3 × c × (t + 1) × 8` fields.
//!
//! # Runs
//!
//! A run is counted (`runs`) by the entry of its first attempt, so a report
//! counts each run once, in the day, class and token of that attempt.
//!
//! # History from before rollups
//!
//! [`RollupsSince`] records the minute the first ledger entry with a
//! rollup was written (every process makes sure of it, once, before its
//! first ledger write): ledger entries from before it have no rollup,
//! entries from it on all have one; while it is not recorded, no rollup
//! exists. A report reads the rollups and, for the part of its period
//! before that instant only, the ledger entries themselves (a fixed amount
//! of history that stops growing at the upgrade).

use mapi_cost::Charge;
use mapi_domain::{AttemptNo, ProjectId, TenantId, Timestamp};
use mapi_quota::counters::shard_id;
use mapi_store::{Document, StoreError};
use serde::{Deserialize, Serialize};

use crate::{Doc, ItemLedgerEntry, LedgerEntry, ScoreLedgerEntry};

/// The collection of rollups.
pub const ROLLUP_COLLECTION: &str = "usage_rollups";

/// How many documents one scope's day is spread over.
pub const ROLLUP_SHARDS: u32 = 4;

/// What kind of charge a line sums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Attempts of runs.
    Run,
    /// Items of item jobs.
    Item,
    /// Scores of endpoints.
    Score,
    /// Endpoints' idle instance time.
    Instance,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Run, Kind::Item, Kind::Score, Kind::Instance];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Item => "item",
            Kind::Score => "score",
            Kind::Instance => "instance",
        }
    }
}

/// One line of a rollup: a kind of charge, on one resource class (an
/// endpoint's `endpoint-cpu` or `endpoint-l4`), by one token (`None`: by
/// people's sessions).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Line {
    pub kind: Kind,
    pub class: String,
    pub token: Option<String>,
}

impl Line {
    /// The line's text: `kind|class` or `kind|class|token`.
    fn text(&self) -> String {
        match &self.token {
            Some(t) => format!("{}|{}|{t}", self.kind.as_str(), self.class),
            None => format!("{}|{}", self.kind.as_str(), self.class),
        }
    }

    fn parse(text: &str) -> Option<Line> {
        let mut parts = text.splitn(3, '|');
        let kind = parts.next()?;
        let kind = Kind::ALL.into_iter().find(|k| k.as_str() == kind)?;
        let class = parts.next()?.to_owned();
        Some(Line { kind, class, token: parts.next().map(str::to_owned) })
    }

    /// The field that holds `measure` of this line.
    pub fn field(&self, measure: &str) -> String {
        let hex: String = self.text().bytes().map(|b| format!("{b:02x}")).collect();
        format!("l{hex}_{measure}")
    }

    /// The line and measure a field holds; `None` for any other field.
    pub fn of_field(field: &str) -> Option<(Line, &str)> {
        let (hex, measure) = field.strip_prefix('l')?.split_once('_')?;
        if hex.len() % 2 != 0 || !MEASURES.contains(&measure) {
            return None;
        }
        let bytes = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
            .collect::<Option<Vec<u8>>>()?;
        Some((Line::parse(std::str::from_utf8(&bytes).ok()?)?, measure))
    }
}

/// What a rollup's fields measure, and a usage report's totals.
pub const MEASURES: [&str; 8] =
    ["cost_micros", "vcpu_ms", "gib_ms", "accelerator_ms", "runs", "attempts", "items", "scores"];

/// Sums over ledger entries.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Totals {
    pub cost_micros: i64,
    pub vcpu_ms: u64,
    /// Memory: GiB-milliseconds.
    pub gib_ms: u64,
    pub accelerator_ms: u64,
    /// Runs metered, each once: counted where its first attempt was metered.
    pub runs: u64,
    /// Attempts metered.
    pub attempts: u64,
    /// Items of item jobs metered (one per item and round).
    #[serde(default)]
    pub items: u64,
    /// Scores of endpoints metered.
    #[serde(default)]
    pub scores: u64,
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl Totals {
    /// The value of `measure` (one of [`MEASURES`]; 0 for any other).
    pub fn get(&self, measure: &str) -> i64 {
        match measure {
            "cost_micros" => self.cost_micros,
            "vcpu_ms" => to_i64(self.vcpu_ms),
            "gib_ms" => to_i64(self.gib_ms),
            "accelerator_ms" => to_i64(self.accelerator_ms),
            "runs" => to_i64(self.runs),
            "attempts" => to_i64(self.attempts),
            "items" => to_i64(self.items),
            "scores" => to_i64(self.scores),
            _ => 0,
        }
    }

    /// Adds `n` to `measure` (others are ignored; counts never go below 0).
    pub fn add_to(&mut self, measure: &str, n: i64) {
        let up = |slot: &mut u64| *slot = u64::try_from(to_i64(*slot).saturating_add(n)).unwrap_or(0);
        match measure {
            "cost_micros" => self.cost_micros = self.cost_micros.saturating_add(n),
            "vcpu_ms" => up(&mut self.vcpu_ms),
            "gib_ms" => up(&mut self.gib_ms),
            "accelerator_ms" => up(&mut self.accelerator_ms),
            "runs" => up(&mut self.runs),
            "attempts" => up(&mut self.attempts),
            "items" => up(&mut self.items),
            "scores" => up(&mut self.scores),
            _ => {}
        }
    }

    /// Field by field, `self += other`.
    pub fn add(&mut self, other: &Totals) {
        for m in MEASURES {
            self.add_to(m, other.get(m));
        }
    }
}

fn charged(c: &Charge) -> Totals {
    Totals {
        cost_micros: c.amount_micros,
        vcpu_ms: c.vcpu_ms,
        gib_ms: c.gib_ms,
        accelerator_ms: c.accelerator_ms,
        ..Totals::default()
    }
}

/// What a run attempt's entry adds.
pub fn of_run(e: &LedgerEntry) -> (Line, Totals) {
    let line = Line { kind: Kind::Run, class: e.charge.class.to_string(), token: e.token.clone() };
    let runs = u64::from(e.attempt == AttemptNo::FIRST);
    (line, Totals { attempts: 1, runs, ..charged(&e.charge) })
}

/// What an item's entry adds.
pub fn of_item(e: &ItemLedgerEntry) -> (Line, Totals) {
    let line = Line { kind: Kind::Item, class: e.charge.class.to_string(), token: e.token.clone() };
    (line, Totals { items: 1, ..charged(&e.charge) })
}

/// What an endpoint's idle instance time of one window adds.
pub fn of_instance(e: &crate::InstanceLedgerEntry) -> (Line, Totals) {
    let line = Line { kind: Kind::Instance, class: format!("endpoint-{}", e.accelerator), token: None };
    let totals = Totals {
        cost_micros: mapi_cost::nanos_to_micros(e.cost_nanos),
        vcpu_ms: e.vcpu_ms,
        gib_ms: e.gib_ms,
        accelerator_ms: e.accelerator_ms,
        ..Totals::default()
    };
    (line, totals)
}

/// The line of an endpoint's scores.
pub fn score_line(accelerator: &str, token: Option<&str>) -> Line {
    Line { kind: Kind::Score, class: format!("endpoint-{accelerator}"), token: token.map(str::to_owned) }
}

/// What a whole minute's score entry holds (for ledgers from before rollups).
pub fn of_score_entry(e: &ScoreLedgerEntry) -> (Line, Totals) {
    let totals = Totals {
        cost_micros: e.cost_micros(),
        vcpu_ms: e.vcpu_ms,
        gib_ms: e.gib_ms,
        accelerator_ms: e.accelerator_ms,
        scores: e.requests,
        ..Totals::default()
    };
    (score_line(&e.accelerator, e.token.as_deref()), totals)
}

/// The scope a rollup sums over.
#[derive(Clone, Copy, Debug)]
pub enum Scope<'a> {
    Tenant(&'a TenantId),
    Project(&'a TenantId, &'a ProjectId),
}

impl Scope<'_> {
    /// The rollup's name for `day` (a `Period::Day` key).
    fn name(self, day: &str) -> String {
        match self {
            Scope::Tenant(t) => format!("{t}@{day}"),
            Scope::Project(t, p) => format!("{t}:{p}@{day}"),
        }
    }

    /// The ids of the documents that hold this scope's rollup of `day`.
    pub fn doc_ids(self, day: &str) -> Vec<String> {
        let name = self.name(day);
        (0..ROLLUP_SHARDS).map(|k| shard_id(&name, k)).collect()
    }
}

/// The lines a rollup document holds (fields that are not a line's are skipped).
pub fn lines_of(doc: &Document) -> Vec<(Line, Totals)> {
    let mut lines: std::collections::BTreeMap<Line, Totals> = std::collections::BTreeMap::new();
    for (field, value) in &doc.fields {
        if let (Some((line, measure)), Some(n)) = (Line::of_field(field), value.as_i64()) {
            lines.entry(line).or_default().add_to(measure, n);
        }
    }
    lines.into_iter().collect()
}

/// The instant rollups start: ledger entries from it on have one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RollupsSince {
    pub at: Timestamp,
}

impl Doc for RollupsSince {
    const COLLECTION: &'static str = ROLLUP_COLLECTION;
    fn doc_id(&self) -> String {
        Self::ID.to_owned()
    }
}

impl RollupsSince {
    /// The document's id: no rollup's (those start with a tenant id, a
    /// lower-case letter).
    pub const ID: &'static str = "_since";

    /// Makes sure the instant is recorded (`now`, the first time), and
    /// returns it. Every process that writes ledger entries calls it before
    /// its first, so no entry without a rollup is written after it.
    ///
    /// The instant is the start of the minute of `now`: an endpoint's score
    /// entries are per minute and dated by its start, so every entry is
    /// wholly on one side of it. (An entry of that minute written by a
    /// process of the version before, which wrote no rollups, is counted in
    /// no report: upgrades are at most one such minute.)
    pub async fn ensure(store: &dyn mapi_store::Store, now: Timestamp) -> Result<Timestamp, StoreError> {
        let now = ScoreLedgerEntry::minute_of(now);
        let mine = RollupsSince { at: now };
        if let Some(s) = Self::read(store).await? {
            return Ok(s);
        }
        let create = mapi_store::Write::Put {
            key: mine.key()?,
            fields: mapi_store::encode(&mine)?,
            precondition: mapi_store::Precondition::Absent,
        };
        match store.commit(None, &[create]).await {
            Ok(_) => Ok(now),
            Err(StoreError::AlreadyExists(_)) => Ok(Self::read(store).await?.map_or(now, |s| s)),
            Err(e) => Err(e),
        }
    }

    /// The instant, if recorded.
    pub async fn read(store: &dyn mapi_store::Store) -> Result<Option<Timestamp>, StoreError> {
        Ok(crate::get::<RollupsSince>(store, Self::ID).await?.map(|s| s.at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_names_its_line_and_measure_whatever_the_class_or_token() {
        for token in [None, Some("1a2b3c4d5e6f"), Some(""), Some("a|b c_d"), Some("é")] {
            for class in ["S", "endpoint-l4", "x_y"] {
                let line =
                    Line { kind: Kind::Score, class: class.to_owned(), token: token.map(str::to_owned) };
                for m in MEASURES {
                    let field = line.field(m);
                    assert!(
                        field.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'),
                        "{field} is an identifier"
                    );
                    assert_eq!(Line::of_field(&field), Some((line.clone(), m)), "{field}");
                }
            }
        }
        for other in ["cost_micros", "l7_runs", "lzz_runs", "l72756e7c53_colour", "l_runs", "l7275_runs"] {
            assert_eq!(Line::of_field(other), None, "{other}");
        }
    }

    #[test]
    fn totals_add_measure_by_measure() {
        let mut t = Totals { cost_micros: 5, vcpu_ms: 7, runs: 1, ..Totals::default() };
        t.add(&Totals { cost_micros: -2, vcpu_ms: 3, items: 4, scores: 9, ..Totals::default() });
        assert_eq!(
            t,
            Totals { cost_micros: 3, vcpu_ms: 10, runs: 1, items: 4, scores: 9, ..Totals::default() }
        );
        for (i, m) in MEASURES.iter().enumerate() {
            let mut one = Totals::default();
            one.add_to(m, i64::try_from(i).expect("small") + 1);
            assert_eq!(one.get(m), i64::try_from(i).expect("small") + 1, "{m}");
        }
    }
}
