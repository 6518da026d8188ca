//! The promotion gate of model endpoints: a pure state machine that moves a
//! new (canary) revision's share of the scores step by step and rolls it
//! back on errors or latency. No I/O, no clock: each call is given an
//! observation (the time, the smoke test's result, the split the host
//! shows, each revision's cumulative counts) and answers the next state and
//! what to ask of the host.
//!
//! Rules:
//! - First the smoke test: its failure rolls back at once (the canary never
//!   gets traffic); its success starts the first step.
//! - Steps (5 → 25 → 50 → 100 % by default): each lasts at least
//!   `min_step_time` and `min_requests` scores to the canary, both counted
//!   only from when the host was seen at that step's percent. A step whose
//!   split the host shows otherwise is asked again (a lost answer) and
//!   starts over once seen; an observation without the host's state changes
//!   nothing. A step never advances unobserved.
//! - At any observation the canary rolls back at once when its errors since
//!   the smoke test are more than a `max_error_rate` revision would make
//!   with probability `1 - confidence` (a one-sided Poisson test at the
//!   rate times `max(requests, min_sample)`): a revision clearly above 1 %
//!   is stopped within its first steps, one at 0.1 % almost never is, and
//!   one near 1 % may go either way —
//!   or, with at least `min_latency_sample` scores in the step (a p99 of
//!   fewer is just their maximum), its p99 exceeds `max_p99_ratio` × the
//!   stable revision's.
//! - Counts that go backwards (statistics reset) rebase the step: time and
//!   requests start again from there, so nothing is promoted on them.
//! - Reaching the last step's percent, observed, is `Promoted`; a rollback
//!   is `RolledBack` with its reason, and asks for 0 % until the host shows
//!   it. Both are final: later observations change nothing.
//! - `rollback` (by hand) and `override_gate` (skip to 100 %) act at once
//!   from any state that is not final.
//! - A step longer than `max_step_time` without enough scores holds and is
//!   reported `stalled` (waiting for traffic); it is never promoted on time alone.

use std::time::Duration;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

/// The gate's thresholds.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Policy {
    /// The canary's percent at each step; the last is 100.
    pub steps: Vec<u32>,
    pub min_step_time: Duration,
    pub max_step_time: Duration,
    pub min_requests: u64,
    /// The error test assumes at least this many requests, so a few early
    /// errors do not roll back a healthy revision.
    pub min_sample: u64,
    /// Errors per request above which the canary rolls back (0.01 = 1 %).
    pub max_error_rate: f64,
    /// How sure the gate must be that the rate is above `max_error_rate` (0.99).
    pub confidence: f64,
    /// The canary's p99 over the stable revision's above which it rolls back.
    pub max_p99_ratio: f64,
    /// The fewest scores in a step for its p99 to be judged.
    pub min_latency_sample: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            steps: vec![5, 25, 50, 100],
            min_step_time: Duration::from_secs(60),
            max_step_time: Duration::from_secs(1800),
            min_requests: 50,
            min_sample: 100,
            max_error_rate: 0.01,
            confidence: 0.99,
            max_p99_ratio: 1.2,
            min_latency_sample: 100,
        }
    }
}

/// One revision's cumulative counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub requests: u64,
    pub errors: u64,
    /// The p99 latency in ms, when known.
    pub p99_ms: Option<f64>,
}

/// What the caller saw.
#[derive(Clone, Debug, PartialEq)]
pub struct Observation {
    pub now: Timestamp,
    /// `None` until the smoke test ran.
    pub smoke: Option<Result<(), String>>,
    /// The canary's percent as the host shows it; `None` when it could not be read.
    pub observed_canary_percent: Option<u32>,
    pub canary: Totals,
    pub stable: Totals,
}

/// Where a promotion stands.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "snake_case")]
pub enum Phase {
    Smoke,
    /// At step `index`; `since` is when the host was first seen at its percent
    /// (`None` until then), `base` the canary's counts at that moment.
    Step {
        index: usize,
        since: Option<Timestamp>,
        base: Totals,
        seen: Totals,
        stalled: bool,
    },
    Promoted,
    RolledBack {
        reason: String,
    },
}

/// What to ask of the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Hold,
    /// Set the canary's share (the stable revision has the rest).
    SetCanary(u32),
}

/// A promotion's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub phase: Phase,
    pub started_at: Timestamp,
    pub updated_at: Timestamp,
    /// The canary's counts when its first step began (rebased on a reset).
    pub origin: Totals,
}

/// The fewest errors a revision erring at `rate` makes among `requests`
/// only with probability below `1 - confidence` (Poisson tail).
pub fn error_limit(rate: f64, requests: u64, confidence: f64) -> u64 {
    let lambda = rate * requests as f64;
    let (mut k, mut pmf, mut cdf) = (0u64, (-lambda).exp(), 0.0);
    loop {
        cdf += pmf;
        if 1.0 - cdf < 1.0 - confidence || k > requests {
            return k + 1;
        }
        k += 1;
        pmf *= lambda / k as f64;
    }
}

impl Gate {
    pub fn start(now: Timestamp) -> Gate {
        Gate { phase: Phase::Smoke, started_at: now, updated_at: now, origin: Totals::default() }
    }

    /// The canary percent this state wants the host at.
    pub fn desired_percent(&self) -> u32 {
        self.desired(&Policy::default())
    }

    fn desired(&self, policy: &Policy) -> u32 {
        match &self.phase {
            Phase::Smoke | Phase::RolledBack { .. } => 0,
            Phase::Step { index, .. } => policy.steps.get(*index).copied().unwrap_or(100),
            Phase::Promoted => 100,
        }
    }

    pub fn is_final(&self) -> bool {
        matches!(self.phase, Phase::Promoted | Phase::RolledBack { .. })
    }

    pub fn is_promoted(&self) -> bool {
        self.phase == Phase::Promoted
    }

    pub fn rolled_back_reason(&self) -> Option<&str> {
        match &self.phase {
            Phase::RolledBack { reason } => Some(reason),
            _ => None,
        }
    }

    /// `smoke`, `shifting`, `stalled`, `promoted` or `rolled_back`.
    pub fn phase_name(&self) -> &'static str {
        match &self.phase {
            Phase::Smoke => "smoke",
            Phase::Step { stalled: true, .. } => "stalled",
            Phase::Step { .. } => "shifting",
            Phase::Promoted => "promoted",
            Phase::RolledBack { .. } => "rolled_back",
        }
    }

    fn with(&self, phase: Phase, now: Timestamp) -> Gate {
        Gate { phase, started_at: self.started_at, updated_at: now, origin: self.origin }
    }

    /// Rolls back at once (by hand, or because the host failed the revision).
    pub fn rollback(&self, now: Timestamp, reason: &str) -> (Gate, Decision) {
        if self.is_final() {
            return (self.clone(), self.repeat(None));
        }
        (self.with(Phase::RolledBack { reason: reason.to_owned() }, now), Decision::SetCanary(0))
    }

    /// Skips the gate: the canary goes to 100 % at once.
    pub fn override_gate(&self, now: Timestamp) -> (Gate, Decision) {
        if self.is_final() {
            return (self.clone(), self.repeat(None));
        }
        (self.with(Phase::Promoted, now), Decision::SetCanary(100))
    }

    /// For a final state: ask again for its split until the host shows it.
    fn repeat(&self, observed: Option<u32>) -> Decision {
        let want = match self.phase {
            Phase::Promoted => 100,
            _ => 0,
        };
        if observed == Some(want) { Decision::Hold } else { Decision::SetCanary(want) }
    }

    /// The next state from an observation.
    pub fn observe(&self, policy: &Policy, obs: &Observation) -> (Gate, Decision) {
        let now = obs.now;
        match &self.phase {
            Phase::Promoted | Phase::RolledBack { .. } => {
                (self.clone(), self.repeat(obs.observed_canary_percent))
            }
            Phase::Smoke => match &obs.smoke {
                None => (self.clone(), Decision::Hold),
                Some(Err(e)) => self.rollback(now, &format!("smoke test failed: {e}")),
                Some(Ok(())) => {
                    let first = Phase::Step {
                        index: 0,
                        since: None,
                        base: obs.canary,
                        seen: obs.canary,
                        stalled: false,
                    };
                    let mut next = self.with(first, now);
                    next.origin = obs.canary;
                    let want = next.desired(policy);
                    (next, Decision::SetCanary(want))
                }
            },
            Phase::Step { index, since, base, seen, stalled } => {
                self.step(policy, obs, (*index, *since, *base, *seen, *stalled))
            }
        }
    }

    fn step(
        &self,
        policy: &Policy,
        obs: &Observation,
        (index, since, base, seen, stalled): (usize, Option<Timestamp>, Totals, Totals, bool),
    ) -> (Gate, Decision) {
        let now = obs.now;
        let want = policy.steps.get(index).copied().unwrap_or(100);
        let Some(observed) = obs.observed_canary_percent else {
            // The host could not be read: nothing is known, nothing changes.
            return (self.clone(), Decision::Hold);
        };
        if observed != want {
            // Not (yet) at this step's split: ask again; nothing counts.
            let phase = Phase::Step { index, since: None, base: obs.canary, seen: obs.canary, stalled };
            return (self.with(phase, now), Decision::SetCanary(want));
        }
        let (since, base) = match since {
            Some(t) if obs.canary.requests >= seen.requests && obs.canary.errors >= seen.errors => (t, base),
            // First seen at this split, or the counts were reset: the step starts here.
            _ => {
                let phase = Phase::Step {
                    index,
                    since: Some(now),
                    base: obs.canary,
                    seen: obs.canary,
                    stalled: false,
                };
                let mut next = self.with(phase, now);
                if obs.canary.requests < seen.requests || obs.canary.errors < seen.errors {
                    next.origin = obs.canary;
                }
                return (next, Decision::Hold);
            }
        };
        let requests = obs.canary.requests - base.requests;
        let total = obs.canary.requests.saturating_sub(self.origin.requests);
        let errors = obs.canary.errors.saturating_sub(self.origin.errors);
        if errors >= error_limit(policy.max_error_rate, total.max(policy.min_sample), policy.confidence) {
            let rate = 100.0 * errors as f64 / total.max(1) as f64;
            let reason = format!(
                "error rate {rate:.1} % ({errors} of {total}) at {want} % is above {:.1} %",
                100.0 * policy.max_error_rate
            );
            return self.rollback(now, &reason);
        }
        if requests >= policy.min_requests.max(policy.min_latency_sample)
            && let (Some(c), Some(s)) = (obs.canary.p99_ms, obs.stable.p99_ms)
            && s > 0.0
            && c > policy.max_p99_ratio * s
        {
            let reason = format!(
                "p99 {c:.0} ms at {want} % exceeds {:.1} × the stable revision's {s:.0} ms",
                policy.max_p99_ratio
            );
            return self.rollback(now, &reason);
        }
        let elapsed = now.since(since);
        if elapsed >= policy.min_step_time && requests >= policy.min_requests {
            if index + 1 >= policy.steps.len() {
                return (self.with(Phase::Promoted, now), Decision::Hold);
            }
            let phase = Phase::Step {
                index: index + 1,
                since: None,
                base: obs.canary,
                seen: obs.canary,
                stalled: false,
            };
            let next = self.with(phase, now);
            let want = next.desired(policy);
            return (next, Decision::SetCanary(want));
        }
        let stalled = elapsed >= policy.max_step_time;
        let phase = Phase::Step { index, since: Some(since), base, seen: obs.canary, stalled };
        (self.with(phase, now), Decision::Hold)
    }
}

#[cfg(test)]
mod tests;
