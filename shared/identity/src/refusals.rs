//! Anonymous refusals: counted one by one, audited once per source a minute.
//!
//! An anonymous refusal names no one (a `mapi_…` token whose hash matches
//! nothing, a bearer that is no credential, a session token that does not
//! verify, a session where sessions are not configured), so an entry per
//! refusal would hold no one to account, and would let anyone turn random
//! bearers into unthrottled durable writes. So each one is counted in
//! `mapi_auth_refused_total{reason}`, and the audit log keeps, per source
//! (the request's keyed IP hash, [`crate::RequestMeta::ip_hash`]) and UTC
//! minute of the injected clock:
//!
//! - the source's first refusal of the minute, written at once with its
//!   detail, so a single failed sign-in is visible immediately;
//! - one `auth.refused_summary` entry counting the rest, once the minute is
//!   over: written by the next anonymous refusal after the minute boundary,
//!   or by [`flush`].
//!
//! At most [`MAX_SOURCES`] sources are tracked a minute; refusals of further
//! sources fold into one "other sources" tally, so a minute costs at most
//! `MAX_SOURCES + 1` first entries and as many summaries, however many
//! sources an attacker rotates through. The bound is per process: each
//! instance keeps its own window.
//!
//! A refusal of a known principal (a revoked or expired token, a token over
//! its rate limit) does not come here: it is audited one by one, naming the
//! token's owner and tenant.
//!
//! Architecture invariant: [`Window`] is pure; [`RefusalLog`] locks it only
//! to decide, and every write happens after the lock is released.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use mapi_domain::Timestamp;
use mapi_metrics::{AuthRefusal, AuthRefusedLabels, Metrics};
use mapi_problem::ProblemCode;
use mapi_schema::Outcome;

use crate::{Audit, IdentityState, RequestMeta, audit};

/// The most sources tracked one by one in a minute. Each costs a map entry
/// (a 16-character hash and a count) and at most two audit entries; the
/// refusals of sources beyond it share one "other sources" tally.
pub const MAX_SOURCES: usize = 1_000;

/// What to do with one anonymous refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The source's first this minute: write its entry now.
    WriteFirst,
    /// Counted in memory, for the minute's summary.
    Counted,
}

/// Whose refusals a summary counts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// One source: the keyed hash of its IP address (`None`: the request
    /// showed no address).
    Ip(Option<String>),
    /// Every source over [`MAX_SOURCES`] in the minute, together.
    Other,
}

/// The refusals of one source in one minute beyond its first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    pub source: Source,
    /// The minute, counted from the epoch (`secs / 60`).
    pub minute: i64,
    /// Refusals after the first, which was written when it happened.
    pub more: u64,
}

impl Summary {
    /// The audit entry: `auth.refused_summary`, the count first in the detail.
    fn into_audit(self) -> Audit {
        let start = Timestamp::from_secs(self.minute.saturating_mul(60)).to_rfc3339();
        let (from, ip_hash) = match self.source {
            Source::Ip(hash) => ("this source".to_owned(), hash),
            Source::Other => (format!("sources beyond the {MAX_SOURCES} tracked"), None),
        };
        let detail = format!(
            "{} more anonymous authentication refusals from {from} in the minute starting {start}",
            self.more
        );
        let mut entry = Audit::anonymous("auth.refused_summary", "credentials")
            .outcome(Outcome::Denied, ProblemCode::Unauthenticated)
            .detail(detail);
        entry.meta = RequestMeta { ip_hash, user_agent_hash: None };
        entry
    }
}

/// The open minute's tallies: for each source, the refusals after its first.
#[derive(Debug)]
pub struct Window {
    minute: i64,
    sources: BTreeMap<Option<String>, u64>,
    /// `Some` once a source beyond [`MAX_SOURCES`] was refused.
    other: Option<u64>,
}

impl Default for Window {
    fn default() -> Self {
        Window { minute: i64::MIN, sources: BTreeMap::new(), other: None }
    }
}

impl Window {
    /// Opens `minute` if it is later than the open one, closing that one:
    /// a summary for each source refused more than once in it. A minute
    /// that is not later (a clock stepped back) changes nothing.
    pub fn roll(&mut self, minute: i64) -> Vec<Summary> {
        if minute <= self.minute {
            return Vec::new();
        }
        let closed = std::mem::replace(&mut self.minute, minute);
        let mut summaries: Vec<Summary> = std::mem::take(&mut self.sources)
            .into_iter()
            .filter(|(_, more)| *more > 0)
            .map(|(hash, more)| Summary { source: Source::Ip(hash), minute: closed, more })
            .collect();
        if let Some(more) = self.other.take().filter(|more| *more > 0) {
            summaries.push(Summary { source: Source::Other, minute: closed, more });
        }
        summaries
    }

    /// Counts one refusal of `source` (an IP hash) in the open minute.
    pub fn record(&mut self, source: Option<&str>) -> Decision {
        let key = source.map(str::to_owned);
        if let Some(more) = self.sources.get_mut(&key) {
            *more += 1;
            return Decision::Counted;
        }
        if self.sources.len() < MAX_SOURCES {
            self.sources.insert(key, 0);
            return Decision::WriteFirst;
        }
        match &mut self.other {
            Some(more) => {
                *more += 1;
                Decision::Counted
            }
            None => {
                self.other = Some(0);
                Decision::WriteFirst
            }
        }
    }
}

/// The process's window of anonymous refusals, and the counter they are
/// counted in. One per platform state, shared by every request.
#[derive(Debug)]
pub struct RefusalLog {
    window: Mutex<Window>,
    metrics: Metrics,
}

impl RefusalLog {
    /// Counts into `metrics.auth_refused`.
    pub fn new(metrics: &Metrics) -> RefusalLog {
        RefusalLog { window: Mutex::new(Window::default()), metrics: metrics.clone() }
    }

    fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

fn minute_of(t: Timestamp) -> i64 {
    t.as_secs().div_euclid(60)
}

async fn write_summaries<S: IdentityState + ?Sized>(state: &S, summaries: Vec<Summary>) {
    for summary in summaries {
        audit(state, summary.into_audit()).await;
    }
}

/// Records an anonymous refusal whose entry would be `entry` (its
/// `meta.ip_hash` is the source): counts it under `reason`, writes the
/// summaries of a minute that has ended, and writes `entry` if it is its
/// source's first this minute.
pub(crate) async fn record<S: IdentityState + ?Sized>(state: &S, reason: AuthRefusal, entry: Audit) {
    let log = state.refusals();
    log.metrics.auth_refused.get_or_create(&AuthRefusedLabels { reason }).inc();
    let minute = minute_of(state.clock().now());
    let (summaries, decision) = {
        let mut window = log.window();
        let summaries = window.roll(minute);
        (summaries, window.record(entry.meta.ip_hash.as_deref()))
    };
    write_summaries(state, summaries).await;
    if decision == Decision::WriteFirst {
        audit(state, entry).await;
    }
}

/// Writes the summaries of every minute that ended by `now`. For a periodic
/// caller (so a burst's summary does not wait for the next refusal) and for
/// shutdown, which passes a time past the open minute (`now + 60 s`) to
/// close it too.
pub async fn flush<S: IdentityState + ?Sized>(state: &S, now: Timestamp) {
    let summaries = state.refusals().window().roll(minute_of(now));
    write_summaries(state, summaries).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(i: usize) -> String {
        format!("{i:016x}")
    }

    fn sorted(mut summaries: Vec<Summary>) -> Vec<Summary> {
        summaries.sort_by_key(|s| match &s.source {
            Source::Ip(h) => (0, h.clone()),
            Source::Other => (1, None),
        });
        summaries
    }

    #[test]
    fn the_first_refusal_of_a_source_in_a_minute_is_written_the_rest_summarised() {
        let mut w = Window::default();
        assert_eq!(w.roll(100), vec![], "nothing open yet");
        assert_eq!(w.record(Some("a")), Decision::WriteFirst);
        for _ in 0..4 {
            assert_eq!(w.record(Some("a")), Decision::Counted);
        }
        assert_eq!(w.record(Some("b")), Decision::WriteFirst);
        assert_eq!(w.record(None), Decision::WriteFirst, "no address is a source of its own");
        assert_eq!(w.record(None), Decision::Counted);
        assert_eq!(w.roll(100), vec![], "the same minute stays open");
        assert_eq!(w.roll(99), vec![], "a clock stepped back closes nothing");
        assert_eq!(w.record(Some("a")), Decision::Counted);
        let summaries = sorted(w.roll(101));
        assert_eq!(
            summaries,
            vec![
                Summary { source: Source::Ip(None), minute: 100, more: 1 },
                Summary { source: Source::Ip(Some("a".into())), minute: 100, more: 5 },
            ],
            "b was refused once: its first entry says it all"
        );
        assert_eq!(w.record(Some("a")), Decision::WriteFirst, "a new minute, a new first entry");
        assert_eq!(w.roll(105), vec![], "one refusal: no summary");
    }

    #[test]
    fn sources_beyond_the_bound_share_one_tally() {
        let mut w = Window::default();
        w.roll(7);
        let mut firsts = 0;
        for round in 0..3 {
            for i in 0..MAX_SOURCES + 500 {
                if w.record(Some(&hash(i))) == Decision::WriteFirst {
                    firsts += 1;
                }
            }
            assert_eq!(firsts, MAX_SOURCES + 1, "round {round}: MAX_SOURCES firsts and one for the others");
        }
        assert_eq!(w.sources.len(), MAX_SOURCES, "memory is bounded");
        let summaries = w.roll(8);
        assert_eq!(summaries.len(), MAX_SOURCES + 1, "one summary per tracked source and one for the others");
        let other = summaries.iter().find(|s| s.source == Source::Other).expect("the others' summary");
        assert_eq!(other.more, 3 * 500 - 1);
        assert!(summaries.iter().filter(|s| s.source != Source::Other).all(|s| s.more == 2));
        assert_eq!(w.record(Some(&hash(MAX_SOURCES + 1))), Decision::WriteFirst, "the bound is per minute");
    }

    #[test]
    fn a_summary_names_its_source_minute_and_count() {
        let minute = Timestamp::parse_rfc3339("2026-12-01T08:00:00Z").expect("time").as_secs() / 60;
        let entry = Summary { source: Source::Ip(Some("abcd".into())), minute, more: 999 }.into_audit();
        assert_eq!(entry.action, "auth.refused_summary");
        assert_eq!(entry.meta.ip_hash.as_deref(), Some("abcd"));
        assert_eq!(entry.problem, Some(ProblemCode::Unauthenticated));
        let detail = entry.detail.expect("detail");
        assert!(
            detail.starts_with("999 more ") && detail.contains("2026-12-01T08:00:00.000000Z"),
            "{detail}"
        );
        let other = Summary { source: Source::Other, minute, more: 3 }.into_audit();
        assert_eq!(other.meta.ip_hash, None);
        assert!(other.detail.expect("detail").contains("beyond the 1000 tracked"));
    }
}
