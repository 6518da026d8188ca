//! The simulator in CI: many seeds, each an hour of platform time under
//! faults, every invariant after every step; the same seed gives the same
//! trace; and replaying one seed from the environment.
//!
//! `MAPI_SIM_SEEDS=N` sets how many seeds `seeds_keep_every_invariant`
//! runs (default 1,000); `MAPI_SIM_SEED=S` makes `replay` run seed `S`
//! with its trace printed (`MAPI_SIM_VERBOSE=1`).

use mapi_sim::{Settings, run, run_many};

fn env(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[test]
fn seeds_keep_every_invariant() {
    let n = env("MAPI_SIM_SEEDS").unwrap_or(1000);
    let s = run_many(1, n, 2, 100);
    let mut failures = String::new();
    for r in &s.failed {
        for v in &r.violations {
            failures.push_str(&format!("\n  seed {}: {v}", r.seed));
        }
        failures.push_str(&format!("\n  replay: {}", r.replay_line()));
    }
    assert!(failures.is_empty(), "{} of {n} seeds broke an invariant:{failures}", s.failed.len());
    assert!(s.least_faults >= 100, "seed {} injected only {} faults", s.least_faults_seed, s.least_faults);
    assert!(s.simulated.as_secs() >= 3600 * n, "{n} seeds simulated only {} s", s.simulated.as_secs());
}

/// Seeds whose traces showed one attempt's work done by two executions.
const TWO_RAN: &str =
    "two executions did one attempt's work: a bootstrap left after finalization, or written twice";

/// Seeds where the attempt was finalized on the report of an execution
/// that did nothing while another took its work and had not spoken yet.
const UNHEARD_TAKER: &str =
    "finalized on a silent execution's report while the one that took the work had not spoken yet";

/// Seeds that once broke an invariant, each with the bug it found (fixed).
const REGRESSIONS: &[(u64, &str)] = &[
    (8, "a replayed job submit did not re-enqueue a fan-out that never began"),
    (449, "a dispatch resubmitted an attempt whose worker had spoken, after its execution vanished"),
    (
        513,
        "a twin took the work and died silent while the recorded execution, stopped before it started, was finalized",
    ),
    (760, "as 449, on a second attempt"),
    (909, "a duplicate execution took the bootstrap; its events were refused and the work lost"),
    (955, "as 449, after a crash mid-dispatch"),
    (2588, "a duplicate execution started after its attempt was finalized took the bootstrap left there"),
    (2624, UNHEARD_TAKER),
    (3567, UNHEARD_TAKER),
    (4123, TWO_RAN),
    (4921, TWO_RAN),
    (5401, UNHEARD_TAKER),
    (5617, UNHEARD_TAKER),
    (7120, TWO_RAN),
    (7161, TWO_RAN),
    (7734, UNHEARD_TAKER),
    (8569, "a redelivered dispatch wrote again the bootstrap a vanished worker had taken"),
    (8957, UNHEARD_TAKER),
    (8992, TWO_RAN),
    (9002, TWO_RAN),
    (9340, UNHEARD_TAKER),
    (9840, UNHEARD_TAKER),
];

#[test]
fn regression_seeds_keep_every_invariant() {
    for (seed, bug) in REGRESSIONS {
        let r = run(Settings::seed(*seed));
        assert!(
            r.violations.is_empty(),
            "seed {seed} ({bug}): {:#?}\n  replay: {}",
            r.violations,
            r.replay_line()
        );
    }
}

#[test]
fn a_seed_replays_to_the_same_trace() {
    for seed in [7, 1234] {
        let a = run(Settings::seed(seed));
        let b = run(Settings::seed(seed));
        assert_eq!((a.trace_hash, a.steps), (b.trace_hash, b.steps), "seed {seed} ran two ways");
        assert!(a.steps > 100, "seed {seed} did almost nothing: {} steps", a.steps);
    }
    let other = run(Settings::seed(8));
    assert_ne!(other.trace_hash, run(Settings::seed(7)).trace_hash, "two seeds, one trace");
}

#[test]
fn replay() {
    let Some(seed) = env("MAPI_SIM_SEED") else { return };
    let r = run(Settings::seed(seed));
    eprintln!("seed {seed}: {} steps, trace {:016x}, faults {:?}", r.steps, r.trace_hash, r.faults);
    assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
}

/// In the cloud configuration (Cloud Scheduler's tick once a minute, Cloud
/// Tasks, Pub/Sub pushes), a run that succeeds does so within seconds of
/// its last event: the follow-up ticks (`MAPI_TICK_FOLLOW_UP_S`, 3 s) and
/// the meter's short wait for a complete event, not the scheduler's minute,
/// set the pace. Without faults (late pushes and lost deliveries each add
/// their own delay), over every run of a few seeds' hours of workload.
#[test]
fn a_run_succeeds_within_seconds_of_its_last_event() {
    const TARGET: std::time::Duration = std::time::Duration::from_secs(5);
    let mut lags = Vec::new();
    for seed in 1..=3 {
        let r = run(Settings { intensity: 0, tick_follow_up_s: 3, ..Settings::seed(seed) });
        assert!(r.violations.is_empty(), "seed {seed}: {:#?}", r.violations);
        lags.extend(r.end_lags.into_iter().map(|(run, lag)| (lag, seed, run)));
    }
    lags.sort();
    assert!(lags.len() >= 20, "too few runs succeeded to measure: {}", lags.len());
    let (worst, seed, run) = lags.last().cloned().expect("lags");
    let median = lags[lags.len() / 2].0;
    eprintln!("{} runs: median {median:?}, worst {worst:?} (seed {seed}, {run})", lags.len());
    assert!(
        worst <= TARGET,
        "seed {seed}: {run} succeeded {worst:?} after its last event (target {TARGET:?})"
    );
}
