//! Seeded promotions in virtual time: one seed draws a canary's behaviour, a
//! traffic rate and a host that loses changes, applies some a tick late,
//! fails reads and answers stale ones; the caller's counters are sometimes
//! reset. Every 5 s of virtual time the gate observes and its decision goes
//! to the host. `ROLLOUT_SEED=n` replays seed `n` alone.
//!
//! Checked at every tick (each message names its seed):
//! - the desired percent is 0 or a step, and a `SetCanary` asks for it;
//! - a final state stays equal to itself; a rolled-back gate asks for 0 % or nothing;
//! - the desired percent only rises, except to 0 on a rollback;
//! - a promotion happens only on an observation of the host at 100 %;
//! - a smoke-failing canary never gets traffic;
//! - **the host is never at 100 % while the canary is bad if it was already
//!   bad when the host was first shown the step before 100 %** (the step
//!   whose evidence promotes it): failing and slow canaries are bad from
//!   the start, so they never reach 100 %; a flapping one that turns bad
//!   during that last step or after its promotion may.
//!
//! And at the end: healthy canaries are promoted within [`HEALTHY_BOUND`],
//! failing, slow and smoke-failing ones rolled back for that reason,
//! low-traffic ones never promoted and reported stalled.

use std::time::Duration;

use mapi_entropy::SeededEntropy;

use super::*;

const TICK: Duration = Duration::from_secs(5);
const HORIZON: Duration = Duration::from_secs(2 * 3600);
/// A healthy canary with enough traffic is promoted within this time (the
/// slowest of 200 000 seeds took 26 min: stale reads restart a step's window).
const HEALTHY_BOUND: Duration = Duration::from_secs(30 * 60);
const STABLE_P99_MS: f64 = 100.0;
const HEALTHY_ERROR_RATE: f64 = 0.001;

/// Draws from a seeded [`SeededEntropy`].
struct Rng(SeededEntropy);

impl Rng {
    fn unit(&self) -> f64 {
        let b = mapi_entropy::bytes::<8>(&self.0).expect("seeded entropy never fails");
        (u64::from_le_bytes(b) >> 11) as f64 / (1u64 << 53) as f64
    }

    fn range(&self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.unit()
    }

    fn chance(&self, p: f64) -> bool {
        self.unit() < p
    }

    /// Successes among `n` trials of probability `p`: geometric skips for
    /// small means, the normal approximation for large ones.
    fn binomial(&self, n: u64, p: f64) -> u64 {
        if p <= 0.0 || n == 0 {
            return 0;
        }
        if p >= 1.0 {
            return n;
        }
        let (nf, q) = (n as f64, p.min(1.0 - p));
        let k = if nf * q > 30.0 {
            let z = (-2.0 * (1.0 - self.unit()).ln()).sqrt() * (std::f64::consts::TAU * self.unit()).cos();
            (nf * q + z * (nf * q * (1.0 - q)).sqrt()).round().clamp(0.0, nf) as u64
        } else {
            let (mut k, mut at) = (0u64, 0u64);
            loop {
                at += ((1.0 - self.unit()).ln() / (1.0 - q).ln()) as u64 + 1;
                if at > n {
                    break k;
                }
                k += 1;
            }
        };
        if q < p { n - k } else { k }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Healthy,
    /// The canary's p99 is `factor` × the stable one's.
    Slow {
        factor: f64,
    },
    Failing {
        rate: f64,
    },
    /// Healthy until `bad_from` s after the start, then failing at `rate`.
    Flapping {
        bad_from: i64,
        rate: f64,
    },
    SmokeFails,
    /// Healthy, with far too little traffic for a step.
    LowTraffic,
}

impl Kind {
    fn draw(rng: &Rng) -> Kind {
        match (rng.unit() * 6.0) as u32 {
            0 => Kind::Healthy,
            1 => Kind::Slow { factor: rng.range(1.5, 3.0) },
            2 => Kind::Failing { rate: rng.range(0.02, 0.20) },
            3 => Kind::Flapping { bad_from: rng.range(30.0, 480.0) as i64, rate: rng.range(0.02, 0.20) },
            4 => Kind::SmokeFails,
            _ => Kind::LowTraffic,
        }
    }

    /// Since when (s from the start) the canary is bad, if ever.
    fn bad_from(self) -> Option<i64> {
        match self {
            Kind::Slow { .. } | Kind::Failing { .. } => Some(0),
            Kind::Flapping { bad_from, .. } => Some(bad_from),
            Kind::Healthy | Kind::SmokeFails | Kind::LowTraffic => None,
        }
    }

    fn error_rate(self, bad: bool) -> f64 {
        match self {
            Kind::Failing { rate } => rate,
            Kind::Flapping { rate, .. } if bad => rate,
            _ => HEALTHY_ERROR_RATE,
        }
    }

    fn p99_factor(self) -> f64 {
        match self {
            Kind::Slow { factor } => factor,
            _ => 1.0,
        }
    }
}

/// A host that loses some changes, applies some a tick late, fails some
/// reads and answers some with the split it had before.
struct Host {
    percent: u32,
    previous: u32,
    pending: Option<u32>,
    lose: f64,
    late: f64,
    unreadable: f64,
    stale: f64,
}

impl Host {
    fn set(&mut self, percent: u32) {
        if percent != self.percent {
            self.previous = self.percent;
            self.percent = percent;
        }
    }

    fn apply(&mut self, rng: &Rng, decision: Decision) {
        if let Decision::SetCanary(p) = decision
            && !rng.chance(self.lose)
        {
            if rng.chance(self.late) { self.pending = Some(p) } else { self.set(p) }
        }
    }

    fn read(&self, rng: &Rng) -> Option<u32> {
        if rng.chance(self.unreadable) {
            None
        } else if rng.chance(self.stale) {
            Some(self.previous)
        } else {
            Some(self.percent)
        }
    }
}

/// One seeded promotion, checked at every tick; answers its kind and final gate.
fn scenario(seed: u64) -> (Kind, Gate) {
    let rng = Rng(SeededEntropy::new(seed));
    let kind = Kind::draw(&rng);
    let policy = Policy::default();
    let rate = if kind == Kind::LowTraffic { rng.range(0.01, 0.1) } else { rng.range(20.0, 100.0) };
    let mut host = Host {
        percent: 0,
        previous: 0,
        pending: None,
        lose: rng.range(0.0, 0.3),
        late: rng.range(0.0, 0.3),
        unreadable: rng.range(0.0, 0.2),
        stale: rng.range(0.0, 0.1),
    };
    let resets = if rng.chance(0.3) { 0.01 } else { 0.0 };
    let smoke_after = rng.range(0.0, 4.0) as i64;
    let steps_before_100 = policy.steps.len().saturating_sub(2);
    let last_step_before_100 = policy.steps.get(steps_before_100).copied().unwrap_or(0);

    let start = Timestamp::from_secs(1_800_000_000);
    let mut gate = Gate::start(start);
    let (mut canary, mut stable, mut offset) = (Counts::default(), Counts::default(), Counts::default());
    // When the host was first shown the step before 100 % in the window that promoted the canary.
    let mut evidence_from: Option<i64> = None;
    let mut final_for = 0u32;
    for tick in 0..(HORIZON.as_secs() / TICK.as_secs()) {
        let secs = (tick * TICK.as_secs()) as i64;
        let now = start + TICK * tick as u32;
        if let Some(p) = host.pending.take() {
            host.set(p);
        }
        let bad = kind.bad_from().is_some_and(|from| secs >= from);

        // Five seconds of traffic, split by the host's real percent.
        let arrivals = (rate * TICK.as_secs_f64() * rng.range(0.5, 1.5)).round() as u64;
        let to_canary = rng.binomial(arrivals, f64::from(host.percent) / 100.0);
        canary.requests += to_canary;
        canary.errors += rng.binomial(to_canary, kind.error_rate(bad));
        stable.requests += arrivals - to_canary;
        stable.errors += rng.binomial(arrivals - to_canary, HEALTHY_ERROR_RATE);
        if rng.chance(resets) {
            offset = canary;
        }
        let reported = canary.since(offset);
        let jitter = || rng.range(0.95, 1.05);
        let obs = Observation {
            now,
            smoke: (secs / 5 >= smoke_after).then(|| match kind {
                Kind::SmokeFails => Err("the example scored 7.1 where the fit predicted 3.2".to_owned()),
                _ => Ok(()),
            }),
            observed_canary_percent: host.read(&rng),
            canary: Totals {
                requests: reported.requests,
                errors: reported.errors,
                p99_ms: (reported.requests > 0).then(|| STABLE_P99_MS * kind.p99_factor() * jitter()),
            },
            stable: Totals {
                requests: stable.requests,
                errors: stable.errors,
                p99_ms: Some(STABLE_P99_MS * jitter()),
            },
        };

        let (next, decision) = gate.observe(&policy, &obs);
        let desired = next.desired_percent();
        let at = format!("seed {seed} ({kind:?}) at {secs} s");
        assert!(desired == 0 || policy.steps.contains(&desired), "{at}: desired {desired} % is not a step");
        if let Decision::SetCanary(p) = decision {
            assert_eq!(p, desired, "{at}: a change asks for the desired percent");
        }
        if gate.is_final() {
            assert_eq!(next, gate, "{at}: a final state stays final");
        }
        if gate.rolled_back_reason().is_some() {
            assert!(
                matches!(decision, Decision::Hold | Decision::SetCanary(0)),
                "{at}: traffic up after a rollback"
            );
        }
        assert!(
            desired >= gate.desired_percent() || next.rolled_back_reason().is_some(),
            "{at}: the desired percent fell from {} to {desired} without a rollback",
            gate.desired_percent()
        );
        if next.is_promoted() && !gate.is_promoted() {
            assert_eq!(obs.observed_canary_percent, Some(100), "{at}: promoted unobserved");
        }
        if let Phase::Step(s) = gate.phase()
            && s.percent == last_step_before_100
            && desired == 100
            && !gate.is_final()
        {
            evidence_from = s.shown.map(|shown| shown.since.since(start).as_secs() as i64);
            assert!(evidence_from.is_some(), "{at}: advanced from an unobserved step");
        }
        if kind == Kind::SmokeFails {
            assert_eq!((desired, host.percent), (0, 0), "{at}: a smoke-failing canary got traffic");
        }

        host.apply(&rng, decision);
        let bad_all_along = kind.bad_from().zip(evidence_from).is_some_and(|(from, shown)| from <= shown);
        assert!(
            !(host.percent == 100 && bad && bad_all_along),
            "{at}: a canary bad since {:?} s, before the last step was shown at {evidence_from:?} s, is at 100 %",
            kind.bad_from()
        );
        gate = next;
        final_for = if gate.is_final() && host.percent == gate.desired_percent() { final_for + 1 } else { 0 };
        if final_for > 10 {
            break;
        }
    }

    let ended = |gate: &Gate| match gate.phase() {
        Phase::Promoted { at } | Phase::RolledBack { at, .. } => Some(at.since(start)),
        _ => None,
    };
    let reason = gate.rolled_back_reason().unwrap_or_default();
    let end = format!("seed {seed} ({kind:?}) ended {gate:?}");
    match kind {
        Kind::Healthy => {
            assert!(gate.is_promoted(), "{end}: a healthy canary is promoted");
            assert!(
                ended(&gate).is_some_and(|d| d <= HEALTHY_BOUND),
                "{end}: promoted within {HEALTHY_BOUND:?}"
            );
        }
        Kind::Slow { .. } => {
            assert!(reason.starts_with("p99 latency"), "{end}: a slow canary is rolled back")
        }
        Kind::Failing { .. } => {
            assert!(reason.starts_with("error rate"), "{end}: a failing canary is rolled back")
        }
        Kind::Flapping { .. } => {
            assert!(gate.is_promoted() || reason.starts_with("error rate"), "{end}: a flapping canary ends")
        }
        Kind::SmokeFails => {
            assert!(reason.starts_with("the smoke test failed"), "{end}: rolled back at the smoke test")
        }
        Kind::LowTraffic => {
            assert!(!gate.is_final(), "{end}: without traffic nothing is decided");
            assert_eq!(gate.phase_name(), "stalled", "{end}: waiting for traffic is reported");
        }
    }
    (kind, gate)
}

#[test]
fn a_thousand_seeded_promotions_keep_every_invariant() {
    let seeds = match std::env::var("ROLLOUT_SEED").ok().and_then(|s| s.parse::<u64>().ok()) {
        Some(seed) => seed..seed + 1,
        None => 0..1000,
    };
    let mut seen = std::collections::BTreeMap::<&str, u32>::new();
    for seed in seeds.clone() {
        let (kind, gate) = scenario(seed);
        let name = match kind {
            Kind::Healthy => "healthy",
            Kind::Slow { .. } => "slow",
            Kind::Failing { .. } => "failing",
            Kind::Flapping { .. } if gate.is_promoted() => "flapping, bad after its evidence",
            Kind::Flapping { .. } => "flapping, rolled back",
            Kind::SmokeFails => "smoke fails",
            Kind::LowTraffic => "low traffic",
        };
        *seen.entry(name).or_default() += 1;
    }
    if seeds.end - seeds.start > 1 {
        assert_eq!(seen.len(), 7, "every kind of canary was tried: {seen:?}");
    }
}
