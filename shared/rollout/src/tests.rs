use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_secs(1_800_000_000 + s)
}

fn obs(now: i64, observed: Option<u32>, canary: (u64, u64, f64), stable_p99: f64) -> Observation {
    Observation {
        now: t(now),
        smoke: Some(Ok(())),
        observed_canary_percent: observed,
        canary: Totals { requests: canary.0, errors: canary.1, p99_ms: Some(canary.2) },
        stable: Totals { requests: 1000, errors: 0, p99_ms: Some(stable_p99) },
    }
}

/// A gate past its smoke test, at the first step (5 %) as observed at `at`.
fn at_first_step(p: &Policy) -> Gate {
    let g = Gate::start(t(0));
    let (g, d) = g.observe(p, &obs(0, Some(0), (0, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(5));
    let (g, d) = g.observe(p, &obs(1, Some(5), (0, 0, 10.0), 10.0));
    assert_eq!((d, g.phase_name()), (Decision::Hold, "shifting"));
    g
}

#[test]
fn the_smoke_test_comes_first_and_its_failure_rolls_back_at_once() {
    let p = Policy::default();
    let g = Gate::start(t(0));
    let waiting = Observation { smoke: None, ..obs(0, Some(0), (0, 0, 1.0), 1.0) };
    assert_eq!(g.observe(&p, &waiting), (g.clone(), Decision::Hold), "no traffic before the smoke test");
    let failed = Observation { smoke: Some(Err("answered 500".into())), ..waiting };
    let (g, d) = g.observe(&p, &failed);
    assert_eq!(d, Decision::SetCanary(0));
    assert_eq!(g.rolled_back_reason(), Some("smoke test failed: answered 500"));
}

#[test]
fn a_step_needs_its_time_and_its_requests_both() {
    let p = Policy::default();
    let g = at_first_step(&p);
    let (g, d) = g.observe(&p, &obs(30, Some(5), (500, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "enough requests, not enough time");
    let (g, d) = g.observe(&p, &obs(100, Some(5), (500, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(25), "both: next step");
    let (g, d) = g.observe(&p, &obs(101, Some(25), (500, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "the step starts when the host shows it");
    let (_, d) = g.observe(&p, &obs(200, Some(25), (520, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "time, but 20 requests of 50");
}

#[test]
fn the_error_limit_is_the_poisson_tail_of_one_percent() {
    // λ = 1 (100 requests at 1 %): P(X ≥ 4) = 1.9 %, P(X ≥ 5) = 0.37 %.
    assert_eq!(error_limit(0.01, 100, 0.99), 5);
    // λ = 10: P(X ≥ 19) = 0.72 %, P(X ≥ 18) = 1.4 %.
    assert_eq!(error_limit(0.01, 1000, 0.99), 19);
    assert_eq!(error_limit(0.0, 100, 0.99), 1, "at a zero rate any error is too many");
}

#[test]
fn errors_clearly_over_one_percent_roll_back_and_a_few_early_ones_do_not() {
    let p = Policy::default();
    let g = at_first_step(&p);
    // 2 errors in 3 requests: judged as among at least 100, where 1 % makes up to 4.
    let (g, d) = g.observe(&p, &obs(10, Some(5), (3, 2, 10.0), 10.0));
    assert_eq!(d, Decision::Hold);
    let (g, d) = g.observe(&p, &obs(20, Some(5), (10, 5, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(0), "5 errors: a 1 % revision makes that with < 1 % probability");
    assert!(g.rolled_back_reason().expect("rolled back").contains("error rate 50.0 % (5 of 10) at 5 %"));
}

#[test]
fn a_slow_canary_rolls_back_once_its_p99_means_something() {
    let p = Policy::default();
    let g = at_first_step(&p);
    let (g, d) = g.observe(&p, &obs(10, Some(5), (60, 0, 30.0), 10.0));
    assert_eq!(d, Decision::Hold, "60 requests: a p99 of so few is their maximum, not judged");
    let (g, d) = g.observe(&p, &obs(20, Some(5), (100, 0, 13.0), 10.0));
    assert_eq!(d, Decision::SetCanary(0));
    assert!(g.rolled_back_reason().expect("rolled back").contains("p99 13 ms"));
}

#[test]
fn an_unobserved_split_is_asked_again_and_never_advances() {
    let p = Policy::default();
    let g = at_first_step(&p);
    let (g2, d) = g.observe(&p, &obs(100, None, (500, 0, 10.0), 10.0));
    assert_eq!((&g2, d), (&g, Decision::Hold), "the host could not be read: nothing changes");
    let (g, d) = g.observe(&p, &obs(200, Some(0), (500, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(5), "the host lost the change: ask again");
    let (_, d) = g.observe(&p, &obs(201, Some(5), (600, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "seen again: the step starts over");
}

#[test]
fn counts_that_go_backwards_rebase_the_step() {
    let p = Policy::default();
    let g = at_first_step(&p);
    let (g, _) = g.observe(&p, &obs(30, Some(5), (400, 0, 10.0), 10.0));
    let (g, d) = g.observe(&p, &obs(100, Some(5), (3, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "reset counters promote nothing");
    let (_, d) = g.observe(&p, &obs(120, Some(5), (100, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "the step's time starts again at the reset");
}

#[test]
fn final_states_stay_final_and_rollback_and_override_act_at_once() {
    let p = Policy::default();
    let g = at_first_step(&p);
    let (rb, d) = g.rollback(t(5), "by hand");
    assert_eq!((d, rb.rolled_back_reason()), (Decision::SetCanary(0), Some("by hand")));
    assert_eq!(rb.observe(&p, &obs(9, Some(5), (900, 0, 1.0), 1.0)).1, Decision::SetCanary(0));
    assert_eq!(rb.observe(&p, &obs(9, Some(0), (900, 0, 1.0), 1.0)), (rb.clone(), Decision::Hold));
    assert_eq!(rb.override_gate(t(10)).0, rb, "a rolled-back promotion cannot be overridden");
    let (ov, d) = g.override_gate(t(5));
    assert_eq!((d, ov.is_promoted()), (Decision::SetCanary(100), true));
    assert_eq!(ov.rollback(t(6), "late").0, ov, "a promoted revision is the stable one now");
}

#[test]
fn a_step_without_traffic_stalls_and_holds() {
    let p = Policy::default();
    let g = at_first_step(&p);
    let (g, d) = g.observe(&p, &obs(4000, Some(5), (3, 0, 10.0), 10.0));
    assert_eq!((d, g.phase_name()), (Decision::Hold, "stalled"));
}

/// SplitMix64, for the scenarios.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Healthy,
    Slow,
    Failing,
    /// Healthy until `bad_after` seconds, then failing.
    Flapping {
        bad_after: i64,
    },
    SmokeFails,
    LowTraffic,
}

/// One seeded promotion: a host that loses some changes and some reads,
/// scores arriving at random, split by the percent the host really has.
fn scenario(seed: u64) -> (Kind, Gate) {
    let mut rng = Rng(seed);
    let kind = match rng.below(6) {
        0 => Kind::Healthy,
        1 => Kind::Slow,
        2 => Kind::Failing,
        // It turns bad while it still shares the traffic (the shifting takes at least 4 minutes).
        3 => Kind::Flapping { bad_after: 30 + rng.below(120) as i64 },
        4 => Kind::SmokeFails,
        _ => Kind::LowTraffic,
    };
    let p = Policy { min_step_time: Duration::from_secs(60), min_requests: 50, ..Policy::default() };
    let (lose_change, lose_read) = (rng.unit() * 0.3, rng.unit() * 0.2);
    let rate = if kind == Kind::LowTraffic { 0.05 } else { 5.0 + rng.unit() * 20.0 }; // scores per second
    let slow = 1.5 + rng.unit() * 1.5;
    let fail_rate = 0.10 + rng.unit() * 0.10;
    let mut gate = Gate::start(t(0));
    let mut host_percent = 0u32;
    let mut canary = Totals::default();
    let mut reached_100_while_bad = false;
    let mut was_final: Option<Gate> = None;
    let stable_p99 = 20.0;
    for tick in 0..2000i64 {
        let now = tick * 5;
        let bad_now = match kind {
            Kind::Failing | Kind::Slow => true,
            Kind::Flapping { bad_after } => now >= bad_after,
            _ => false,
        };
        // Five seconds of scores.
        let arrivals = (rate * 5.0 * (0.5 + rng.unit())) as u64;
        for _ in 0..arrivals {
            if (rng.below(100) as u32) < host_percent {
                canary.requests += 1;
                let err_p =
                    if matches!(kind, Kind::Failing) || (bad_now && matches!(kind, Kind::Flapping { .. })) {
                        fail_rate
                    } else {
                        0.001
                    };
                if rng.unit() < err_p {
                    canary.errors += 1;
                }
            }
        }
        canary.p99_ms =
            Some(if kind == Kind::Slow { stable_p99 * slow } else { stable_p99 * (0.9 + 0.2 * rng.unit()) });
        let observed = if rng.unit() < lose_read { None } else { Some(host_percent) };
        let smoke =
            Some(if kind == Kind::SmokeFails { Err("the example scored 1e6".to_owned()) } else { Ok(()) });
        let o = Observation {
            now: t(now),
            smoke,
            observed_canary_percent: observed,
            canary,
            stable: Totals { requests: 10_000, errors: 10, p99_ms: Some(stable_p99) },
        };
        let before = gate.clone();
        let (next, decision) = gate.observe(&p, &o);
        if let Some(f) = &was_final {
            assert_eq!(&next, f, "seed {seed}: a final state stays final");
        }
        if before.rolled_back_reason().is_some() {
            assert!(
                matches!(decision, Decision::Hold | Decision::SetCanary(0)),
                "seed {seed}: no traffic up after a rollback"
            );
        }
        if let Decision::SetCanary(x) = decision {
            assert!(x == 0 || p.steps.contains(&x), "seed {seed}: percent {x} is not a step");
            if rng.unit() >= lose_change {
                host_percent = x;
            }
        }
        // Bad as measured: failing canaries always, slow ones, flapping ones once bad.
        if host_percent == 100 && bad_now && !next.is_promoted() {
            reached_100_while_bad = true;
        }
        if next.is_promoted() && bad_now {
            reached_100_while_bad = true;
        }
        if next.is_final() && was_final.is_none() {
            was_final = Some(next.clone());
        }
        gate = next;
    }
    assert!(!reached_100_while_bad, "seed {seed}: a {kind:?} canary reached 100 %");
    (kind, gate)
}

#[test]
fn a_thousand_seeded_promotions_never_promote_a_bad_revision_and_always_promote_a_healthy_one() {
    let mut seen = std::collections::BTreeMap::new();
    for seed in 0..1000u64 {
        let (kind, gate) = scenario(seed);
        let name = format!("{kind:?}")
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .trim_end_matches('{')
            .to_owned();
        *seen.entry(name).or_insert(0) += 1;
        match kind {
            Kind::Healthy => {
                assert!(gate.is_promoted(), "seed {seed}: a healthy canary is promoted: {gate:?}")
            }
            Kind::Failing | Kind::SmokeFails | Kind::Flapping { .. } => {
                assert!(
                    gate.rolled_back_reason().is_some(),
                    "seed {seed}: a {kind:?} canary is rolled back: {gate:?}"
                )
            }
            Kind::Slow => assert!(!gate.is_promoted(), "seed {seed}: a slow canary is not promoted"),
            Kind::LowTraffic => {
                assert!(!gate.is_promoted(), "seed {seed}: no promotion without the evidence")
            }
        }
    }
    assert_eq!(seen.len(), 6, "every kind of canary was tried: {seen:?}");
}
