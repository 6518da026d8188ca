//! The promotion gate of model endpoints: a pure state machine that moves a
//! new (canary) revision's share of the traffic step by step and rolls it
//! back on errors or latency. No I/O and no clock: each call is given an
//! [`Observation`] (the time, the smoke test's result, the split the host
//! shows, each revision's cumulative counts) and answers the next [`Gate`]
//! and the [`Decision`] to carry out at the host. The caller stores the gate
//! (it is plain serde data) and calls again a few seconds later.
//!
//! Rules:
//! - **Smoke test first.** The canary has 0 % until the caller reports its
//!   smoke test: an error rolls back at once (the canary never gets
//!   traffic), a pass asks for the first step; no result yet holds.
//! - **Steps.** The canary's percent climbs through [`Policy::steps`]
//!   (5 → 25 → 50 → 100 by default). A step advances only when, counted from
//!   when the host was *observed* at the step's percent, at least
//!   `min_step_time` has passed, the canary answered at least `min_requests`
//!   requests, its error rate over those requests is at most
//!   `pass_error_rate_ppm` (half the rollback limit by default) and its p99
//!   is known whenever the stable revision's is (a policy that asks for no
//!   requests, as one person trying `mapi dev` has, advances on its time
//!   alone; errors and latency still roll back). Observed at 100 %,
//!   the canary is [`Phase::Promoted`]: the last step is the promotion, it
//!   does not last.
//! - **Errors roll back at once**, at any observation of any step: when the
//!   canary's errors since the step began exceed `max_error_rate_ppm` of
//!   `max(requests, min_sample)`. Below `min_sample` requests the limit is
//!   the fixed count `min_sample × rate` (10 errors by default), so one error
//!   among 3 requests does not roll back a healthy revision while a burst
//!   does. Between the two rates a step neither rolls back nor advances: it
//!   holds for more evidence, so a small sample that looks bad is judged on
//!   more requests, and a revision near the limit (say 2 % against 1 %) is
//!   not promoted on a lucky minute of traffic.
//! - **Latency rolls back at once** when the canary has at least
//!   `max(min_requests, min_latency_sample)` requests in the step (a p99 of
//!   fewer is about their maximum), both p99s are known and the canary's
//!   exceeds `max_p99_ratio` × the stable revision's *and* the stable one's
//!   plus `p99_slack` (10 ms by default): a fast server's p99 doubles from
//!   4 to 8 ms on one busy moment of its host, which is noise, not a
//!   regression worth a rollback. A step with fewer
//!   requests advances on its errors alone; the next, larger step judges the
//!   latency, so only a last step short of that sample reaches 100 % unjudged.
//! - **Counts are cumulative totals.** The gate keeps the canary's totals at
//!   the step's start and at the last observation; totals that go backwards
//!   (the caller's counters were reset) rebase the step: its time and counts
//!   start again there, so nothing is promoted on them.
//! - **Lost answers.** The gate keeps a *desired* percent; the decision is
//!   `Hold` exactly when the host is observed at it and otherwise repeats
//!   `SetCanary(desired)` (idempotent). A step's time and requests count only
//!   from when the host was observed at its percent, start over if the host
//!   is seen elsewhere, and an observation without the host's state
//!   (`None`) never advances a step (the rollback checks still apply).
//! - **Final states.** `Promoted` (the canary is the new stable) and
//!   `RolledBack { reason }` (desired 0 %) are final: later observations and
//!   commands change nothing, and the decision keeps asking for 100 % or 0 %
//!   until the host shows it. A rolled-back gate never asks for traffic.
//! - **Commands.** [`Gate::override_gate`] (permission checked by the caller)
//!   promotes at once and asks for 100 %; [`Gate::rollback`] rolls back at
//!   once and asks for 0 %; both from any state that is not final.
//! - **Stalls.** A step held longer than `max_step_time` (waiting for
//!   traffic, for a sample that clears the error limit, or for the host to
//!   show the split) is reported `stalled` and keeps holding: time alone
//!   never promotes, and never rolls back.
//! - **Policy.** Steps must rise strictly from above 0 to 100; a gate given
//!   any other policy rolls back with that reason rather than guess.

use std::time::Duration;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

/// The gate's thresholds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// The canary's percent at each step, rising; the last is 100 (the promotion).
    pub steps: Vec<u32>,
    /// The least time a step lasts, from when the host shows its percent.
    pub min_step_time: Duration,
    /// How long a step may hold before it is reported stalled.
    pub max_step_time: Duration,
    /// The fewest requests the canary answers in a step before it advances.
    pub min_requests: u64,
    /// The error limit is taken of at least this many requests (the small-sample rule).
    pub min_sample: u64,
    /// Errors per million requests above which the canary rolls back (10 000 = 1 %).
    pub max_error_rate_ppm: u32,
    /// Errors per million requests a step's traffic may show at most to advance.
    pub pass_error_rate_ppm: u32,
    /// The canary's p99 over the stable revision's above which it rolls back.
    pub max_p99_ratio: f64,
    /// The fewest requests in a step (with `min_requests`) for the canary's p99 to be judged.
    pub min_latency_sample: u64,
    /// How far above the stable revision's p99 the canary's may be whatever the ratio.
    pub p99_slack: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            steps: vec![5, 25, 50, 100],
            min_step_time: Duration::from_secs(60),
            max_step_time: Duration::from_secs(30 * 60),
            min_requests: 50,
            min_sample: 1000,
            max_error_rate_ppm: 10_000,
            pass_error_rate_ppm: 5_000,
            max_p99_ratio: 1.2,
            min_latency_sample: 100,
            p99_slack: Duration::from_millis(10),
        }
    }
}

impl Policy {
    /// Why no promotion can run on this policy, if none can.
    fn flaw(&self) -> Option<String> {
        let rising = self.steps.windows(2).all(|w| w[0] < w[1]);
        let valid = rising && self.steps.first().is_some_and(|&p| p > 0) && self.steps.last() == Some(&100);
        (!valid).then(|| format!("the gate's steps {:?} do not rise from above 0 % to 100 %", self.steps))
    }

    /// The step after `percent` (100 past the last).
    fn step_after(&self, percent: u32) -> u32 {
        self.steps.iter().copied().find(|&p| p > percent).unwrap_or(100)
    }
}

/// Whether `c.errors` exceed `ppm` of `requests`.
fn over(c: Counts, ppm: u32, requests: u64) -> bool {
    u128::from(c.errors) * 1_000_000 > u128::from(ppm) * u128::from(requests)
}

/// One revision's cumulative counts, as the caller's statistics hold them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub requests: u64,
    pub errors: u64,
    /// The p99 latency in ms, when known.
    pub p99_ms: Option<f64>,
}

/// What the caller saw, once per call.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub now: Timestamp,
    /// `None` until the smoke test has an answer.
    pub smoke: Option<Result<(), String>>,
    /// The canary's percent as the host shows it; `None` when it could not be read.
    pub observed_canary_percent: Option<u32>,
    pub canary: Totals,
    pub stable: Totals,
}

/// Requests and errors, without the latency.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub requests: u64,
    pub errors: u64,
}

impl Counts {
    fn of(t: &Totals) -> Counts {
        Counts { requests: t.requests, errors: t.errors }
    }

    fn since(self, base: Counts) -> Counts {
        Counts {
            requests: self.requests.saturating_sub(base.requests),
            errors: self.errors.saturating_sub(base.errors),
        }
    }

    /// Either count is below `earlier`'s: the counters were reset.
    fn went_back_from(self, earlier: Counts) -> bool {
        self.requests < earlier.requests || self.errors < earlier.errors
    }
}

/// A step under way.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The canary's percent in this step.
    pub percent: u32,
    /// When the gate asked for this step.
    pub entered_at: Timestamp,
    /// The canary's totals the rollback checks count from (the step's start, or its last rebase).
    pub entered: Counts,
    /// The canary's totals at the last observation (a drop below them is a reset).
    pub seen: Counts,
    /// Since when the host has been observed at `percent`; `None` until then.
    pub shown: Option<Shown>,
    /// Held longer than `max_step_time`.
    pub stalled: bool,
}

/// When the host was first observed at a step's percent, and the canary's totals then.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Shown {
    pub since: Timestamp,
    pub base: Counts,
}

/// Where a promotion stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    /// Waiting for the smoke test; the canary has 0 %.
    Smoke,
    Step(Step),
    /// Final: the canary is the new stable revision.
    Promoted {
        at: Timestamp,
    },
    /// Final: the stable revision takes all traffic back.
    RolledBack {
        at: Timestamp,
        reason: String,
    },
}

/// What to ask of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Decision {
    /// The host shows the desired split: nothing to do.
    Hold,
    /// Set the canary's percent (the stable revision has the rest); idempotent.
    SetCanary(u32),
}

/// A promotion's state. Built by [`Gate::start`] and moved only by its
/// commands, so its phase and desired percent always agree.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    phase: Phase,
    started_at: Timestamp,
}

impl Gate {
    /// A promotion whose canary was just deployed at 0 %.
    pub fn start(now: Timestamp) -> Gate {
        Gate { phase: Phase::Smoke, started_at: now }
    }

    pub fn phase(&self) -> &Phase {
        &self.phase
    }

    pub fn started_at(&self) -> Timestamp {
        self.started_at
    }

    /// The canary percent this state wants the host at.
    pub fn desired_percent(&self) -> u32 {
        match &self.phase {
            Phase::Smoke | Phase::RolledBack { .. } => 0,
            Phase::Step(s) => s.percent,
            Phase::Promoted { .. } => 100,
        }
    }

    pub fn is_final(&self) -> bool {
        matches!(self.phase, Phase::Promoted { .. } | Phase::RolledBack { .. })
    }

    pub fn is_promoted(&self) -> bool {
        matches!(self.phase, Phase::Promoted { .. })
    }

    pub fn rolled_back_reason(&self) -> Option<&str> {
        match &self.phase {
            Phase::RolledBack { reason, .. } => Some(reason),
            _ => None,
        }
    }

    /// `smoke`, `shifting`, `stalled`, `promoted` or `rolled_back`.
    pub fn phase_name(&self) -> &'static str {
        match &self.phase {
            Phase::Smoke => "smoke",
            Phase::Step(s) if s.stalled => "stalled",
            Phase::Step(_) => "shifting",
            Phase::Promoted { .. } => "promoted",
            Phase::RolledBack { .. } => "rolled_back",
        }
    }

    /// Rolls back at once (by hand, or because the host failed the revision).
    pub fn rollback(&self, now: Timestamp, reason: &str) -> (Gate, Decision) {
        if self.is_final() {
            return (self.clone(), Decision::Hold);
        }
        (self.with(rolled_back(now, reason.to_owned())), Decision::SetCanary(0))
    }

    /// Skips the gate: promoted at once, the canary asked for 100 %.
    pub fn override_gate(&self, now: Timestamp) -> (Gate, Decision) {
        if self.is_final() {
            return (self.clone(), Decision::Hold);
        }
        (self.with(Phase::Promoted { at: now }), Decision::SetCanary(100))
    }

    /// The next state from an observation, and what to ask of the host.
    pub fn observe(&self, policy: &Policy, obs: &Observation) -> (Gate, Decision) {
        let now = obs.now;
        let next = match (&self.phase, policy.flaw()) {
            (Phase::Promoted { .. } | Phase::RolledBack { .. }, _) => self.clone(),
            (_, Some(flaw)) => self.with(rolled_back(now, flaw)),
            (Phase::Smoke, None) => match &obs.smoke {
                None => self.clone(),
                Some(Err(m)) => self.with(rolled_back(now, format!("the smoke test failed: {m}"))),
                Some(Ok(())) => self.with(enter(policy.step_after(0), now, Counts::of(&obs.canary))),
            },
            (Phase::Step(s), None) => self.with(step(policy, s, obs)),
        };
        let decision = match obs.observed_canary_percent {
            Some(p) if p == next.desired_percent() => Decision::Hold,
            _ => Decision::SetCanary(next.desired_percent()),
        };
        (next, decision)
    }

    fn with(&self, phase: Phase) -> Gate {
        Gate { phase, started_at: self.started_at }
    }
}

fn rolled_back(at: Timestamp, reason: String) -> Phase {
    Phase::RolledBack { at, reason }
}

fn enter(percent: u32, now: Timestamp, counts: Counts) -> Phase {
    Phase::Step(Step { percent, entered_at: now, entered: counts, seen: counts, shown: None, stalled: false })
}

/// One observation of a step: reset, rollback checks, the host's split, advance, stall.
fn step(policy: &Policy, s: &Step, obs: &Observation) -> Phase {
    let now = obs.now;
    let counts = Counts::of(&obs.canary);
    let mut s = Step { stalled: now.since(s.entered_at) >= policy.max_step_time, ..s.clone() };
    if counts.went_back_from(s.seen) {
        // Reset counters: the step's counts (and time, once shown) start again here.
        s.entered = counts;
        s.seen = counts;
        s.shown = s.shown.map(|_| Shown { since: now, base: counts });
        return Phase::Step(s);
    }
    s.seen = counts;
    if let Some(reason) = verdict(policy, s.percent, counts.since(s.entered), obs) {
        return rolled_back(now, reason);
    }
    match obs.observed_canary_percent {
        // Unknown: keep what was shown, advance nothing.
        None => {}
        Some(p) if p != s.percent => s.shown = None,
        Some(_) => {
            let shown = *s.shown.get_or_insert(Shown { since: now, base: counts });
            if s.percent == 100 {
                return Phase::Promoted { at: now };
            }
            if ready(policy, now.since(shown.since), counts.since(shown.base), obs) {
                return enter(policy.step_after(s.percent), now, counts);
            }
        }
    }
    Phase::Step(s)
}

/// The reason to roll back, from the canary's counts in the step and both p99s.
fn verdict(policy: &Policy, percent: u32, step: Counts, obs: &Observation) -> Option<String> {
    if over(step, policy.max_error_rate_ppm, step.requests.max(policy.min_sample)) {
        let rate = 100.0 * step.errors as f64 / step.requests.max(1) as f64;
        return Some(format!(
            "error rate {rate:.1} % ({} of {} requests) at {percent} % exceeds {} %",
            step.errors,
            step.requests,
            f64::from(policy.max_error_rate_ppm) / 10_000.0
        ));
    }
    if step.requests >= policy.min_requests.max(policy.min_latency_sample)
        && let (Some(c), Some(s)) = (obs.canary.p99_ms, obs.stable.p99_ms)
        && s > 0.0
        && c > policy.max_p99_ratio * s
        && c > s + policy.p99_slack.as_secs_f64() * 1000.0
    {
        return Some(format!(
            "p99 latency {c:.0} ms at {percent} % is over {} × and over {} ms above the stable revision's {s:.0} ms",
            policy.max_p99_ratio,
            policy.p99_slack.as_millis()
        ));
    }
    None
}

/// Whether a step shown for `elapsed` with `shown` counts since has its evidence.
fn ready(policy: &Policy, elapsed: Duration, shown: Counts, obs: &Observation) -> bool {
    elapsed >= policy.min_step_time
        && shown.requests >= policy.min_requests
        && !over(shown, policy.pass_error_rate_ppm, shown.requests)
        && (policy.min_requests == 0 || obs.stable.p99_ms.is_none() || obs.canary.p99_ms.is_some())
}

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
