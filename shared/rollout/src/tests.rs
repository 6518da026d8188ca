//! One test (or a few) per rule of the gate, each on concrete observations.

use super::*;

fn t(s: i64) -> Timestamp {
    Timestamp::from_secs(1_800_000_000 + s)
}

/// An observation after a passed smoke test: the canary's (requests, errors, p99), the stable p99.
fn obs(now: i64, observed: Option<u32>, canary: (u64, u64, f64), stable_p99: f64) -> Observation {
    Observation {
        now: t(now),
        smoke: Some(Ok(())),
        observed_canary_percent: observed,
        canary: Totals { requests: canary.0, errors: canary.1, p99_ms: Some(canary.2) },
        stable: Totals { requests: 10_000, errors: 10, p99_ms: Some(stable_p99) },
    }
}

/// A gate past its smoke test, at the first step (5 %) as observed at t(1) with `requests` done.
fn at_first_step(p: &Policy, requests: u64) -> Gate {
    let (g, d) = Gate::start(t(0)).observe(p, &obs(0, Some(0), (requests, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::SetCanary(5), 5));
    let (g, d) = g.observe(p, &obs(1, Some(5), (requests, 0, 10.0), 10.0));
    assert_eq!((d, g.phase_name()), (Decision::Hold, "shifting"));
    g
}

/// Walks `g` through a step: shown at `at`, then `requests` more after 60 s; answers the next gate.
fn pass_step(p: &Policy, g: &Gate, at: i64, from: u64, percent: u32) -> (Gate, Decision) {
    let (g, d) = g.observe(p, &obs(at, Some(percent), (from, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "shown at {percent} %");
    g.observe(p, &obs(at + 60, Some(percent), (from + 50, 0, 10.0), 10.0))
}

#[test]
fn the_default_policy_is_the_documented_one() {
    let p = Policy::default();
    assert_eq!(p.steps, [5, 25, 50, 100]);
    assert_eq!((p.min_step_time, p.max_step_time), (Duration::from_secs(60), Duration::from_secs(1800)));
    assert_eq!((p.min_requests, p.min_sample), (50, 1000));
    assert_eq!((p.max_error_rate_ppm, p.pass_error_rate_ppm), (10_000, 5_000));
    assert_eq!((p.max_p99_ratio, p.min_latency_sample, p.p99_slack), (1.2, 100, Duration::from_millis(10)));
}

#[test]
fn the_smoke_test_comes_first_and_its_failure_rolls_back_before_any_traffic() {
    let p = Policy::default();
    let g = Gate::start(t(0));
    let waiting = Observation { smoke: None, ..obs(0, Some(0), (0, 0, 1.0), 1.0) };
    assert_eq!(g.observe(&p, &waiting), (g.clone(), Decision::Hold), "no traffic before the smoke test");
    assert_eq!((g.phase_name(), g.desired_percent()), ("smoke", 0));
    let failed =
        Observation { smoke: Some(Err("the example scored 7.1, the fit said 3.2".into())), ..waiting };
    let (g, d) = g.observe(&p, &failed);
    assert_eq!(d, Decision::Hold, "the host is at 0 % already");
    assert_eq!(
        g.rolled_back_reason(),
        Some("the smoke test failed: the example scored 7.1, the fit said 3.2")
    );
    assert_eq!((g.desired_percent(), g.is_final()), (0, true));
}

#[test]
fn a_passed_smoke_test_asks_for_the_first_step() {
    let p = Policy::default();
    let (g, d) = Gate::start(t(0)).observe(&p, &obs(0, Some(0), (0, 0, 1.0), 1.0));
    assert_eq!((d, g.phase_name(), g.desired_percent()), (Decision::SetCanary(5), "shifting", 5));
}

#[test]
fn a_step_needs_its_time_and_its_requests_both() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g, d) = g.observe(&p, &obs(30, Some(5), (500, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "enough requests, 29 s of 60");
    let (g, d) = g.observe(&p, &obs(61, Some(5), (500, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::SetCanary(25), 25), "both: the next step");
    let (g, d) = g.observe(&p, &obs(66, Some(25), (500, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "the step starts when the host shows it");
    let (g, d) = g.observe(&p, &obs(200, Some(25), (549, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::Hold, 25), "time, but 49 requests of 50");
    let (g, d) = g.observe(&p, &obs(205, Some(25), (550, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::SetCanary(50), 50));
    let (g, d) = pass_step(&p, &g, 210, 550, 50);
    assert_eq!(d, Decision::SetCanary(100));
    assert!(!g.is_promoted(), "asked for 100 %, not yet shown");
}

#[test]
fn reaching_the_last_step_observed_is_promoted() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g, _) = pass_step(&p, &g, 1, 0, 5);
    let (g, _) = pass_step(&p, &g, 100, 50, 25);
    let (g, d) = pass_step(&p, &g, 200, 100, 50);
    assert_eq!(d, Decision::SetCanary(100));
    let (g2, d) = g.observe(&p, &obs(300, Some(50), (150, 0, 10.0), 10.0));
    assert_eq!((d, g2.is_promoted()), (Decision::SetCanary(100), false), "a lost answer is asked again");
    let (g, d) = g2.observe(&p, &obs(305, Some(100), (150, 0, 10.0), 10.0));
    assert_eq!((d, g.phase_name(), g.desired_percent()), (Decision::Hold, "promoted", 100));
    assert_eq!(g.phase(), &Phase::Promoted { at: t(305) });
}

#[test]
fn errors_over_the_limit_roll_back_at_once_in_any_step() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g, _) = pass_step(&p, &g, 1, 0, 5);
    let (g, _) = g.observe(&p, &obs(100, Some(25), (50, 0, 10.0), 10.0));
    // 1200 requests in the step, 13 errors: 1.08 % of 1200 (the sample is past min_sample).
    let (g2, d) = g.observe(&p, &obs(110, Some(25), (1250, 13, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(0));
    assert_eq!(g2.rolled_back_reason(), Some("error rate 1.1 % (13 of 1200 requests) at 25 % exceeds 1 %"));
    let (g3, d) = g.observe(&p, &obs(110, Some(25), (1250, 12, 10.0), 10.0));
    assert_eq!((d, g3.is_final()), (Decision::Hold, false), "12 of 1200 is exactly 1 %: not over it");
}

#[test]
fn a_few_early_errors_are_judged_against_the_least_sample() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    // 1 % of max(3, 1000) is 10: one error among 3 requests is no proof.
    let (g, d) = g.observe(&p, &obs(10, Some(5), (3, 1, 10.0), 10.0));
    assert_eq!((d, g.is_final()), (Decision::Hold, false));
    let (g2, d) = g.observe(&p, &obs(20, Some(5), (30, 10, 10.0), 10.0));
    assert_eq!((d, g2.is_final()), (Decision::Hold, false), "10 errors is the limit, not over it");
    let (g2, d) = g.observe(&p, &obs(20, Some(5), (30, 11, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(0));
    assert_eq!(g2.rolled_back_reason(), Some("error rate 36.7 % (11 of 30 requests) at 5 % exceeds 1 %"));
}

#[test]
fn a_step_between_the_pass_rate_and_the_limit_holds_for_more_evidence() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    // 2 errors in 60 requests after 70 s: no proof of a bad revision, no evidence of a good one.
    let (g, d) = g.observe(&p, &obs(71, Some(5), (60, 2, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::Hold, 5));
    let (g2, d) = g.observe(&p, &obs(76, Some(5), (399, 2, 10.0), 10.0));
    assert_eq!((d, g2.desired_percent()), (Decision::Hold, 5), "2 of 399 is over 0.5 %");
    let (g2, d) = g.observe(&p, &obs(76, Some(5), (400, 2, 10.0), 10.0));
    assert_eq!(
        (d, g2.desired_percent()),
        (Decision::SetCanary(25), 25),
        "2 of 400 is 0.5 %: the step passes"
    );
    // A revision near the limit: 0.9 % of 1000 neither rolls back nor advances.
    let (g2, d) = g.observe(&p, &obs(600, Some(5), (1000, 9, 10.0), 10.0));
    assert_eq!((d, g2.phase_name(), g2.desired_percent()), (Decision::Hold, "shifting", 5));
}

#[test]
fn a_slow_canary_rolls_back_once_its_p99_means_something() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g, d) = g.observe(&p, &obs(10, Some(5), (99, 0, 300.0), 100.0));
    assert_eq!((d, g.is_final()), (Decision::Hold, false), "99 requests: a p99 of so few is not judged");
    let (g2, d) = g.observe(&p, &obs(20, Some(5), (100, 0, 120.0), 100.0));
    assert_eq!((d, g2.is_final()), (Decision::Hold, false), "120 ms is 1.2 × 100 ms: not over it");
    let (g, d) = g.observe(&p, &obs(20, Some(5), (100, 0, 125.0), 100.0));
    assert_eq!(d, Decision::SetCanary(0));
    assert_eq!(
        g.rolled_back_reason(),
        Some("p99 latency 125 ms at 5 % is over 1.2 × and over 10 ms above the stable revision's 100 ms")
    );
}

#[test]
fn a_fast_servers_p99_may_double_within_the_slack() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g2, d) = g.observe(&p, &obs(20, Some(5), (100, 0, 16.0), 8.0));
    assert_eq!((d, g2.is_final()), (Decision::Hold, false), "16 ms is 2 × 8 ms but only 8 ms above it");
    let (g2, d) = g.observe(&p, &obs(20, Some(5), (100, 0, 18.0), 8.0));
    assert_eq!((d, g2.is_final()), (Decision::Hold, false), "10 ms above is within the slack");
    let (g2, d) = g.observe(&p, &obs(20, Some(5), (100, 0, 18.5), 8.0));
    assert_eq!((d, g2.is_final()), (Decision::SetCanary(0), true), "over both: rolled back");
    let none = Policy { p99_slack: Duration::ZERO, ..Policy::default() };
    let (g2, d) = at_first_step(&none, 0).observe(&none, &obs(20, Some(5), (100, 0, 16.0), 8.0));
    assert_eq!((d, g2.is_final()), (Decision::SetCanary(0), true), "without slack the ratio alone judges");
}

#[test]
fn a_p99_is_compared_only_when_both_are_known_and_an_unknown_canary_p99_holds_the_step() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let mut o = obs(70, Some(5), (100, 0, 99.0), 10.0);
    o.stable.p99_ms = None;
    let (g2, d) = g.observe(&p, &o);
    assert_eq!((d, g2.desired_percent()), (Decision::SetCanary(25), 25), "no stable p99: not compared");
    let mut o = obs(70, Some(5), (100, 0, 0.0), 10.0);
    o.canary.p99_ms = None;
    let (g2, d) = g.observe(&p, &o);
    assert_eq!((d, g2.desired_percent()), (Decision::Hold, 5), "the canary's latency is not known yet");
}

#[test]
fn counts_that_go_backwards_rebase_the_step_and_promote_nothing() {
    let p = Policy::default();
    let g = at_first_step(&p, 1000);
    let (g, _) = g.observe(&p, &obs(30, Some(5), (1040, 0, 10.0), 10.0));
    let (g, d) = g.observe(&p, &obs(70, Some(5), (3, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::Hold, 5), "reset counters promote nothing");
    let (g, d) = g.observe(&p, &obs(120, Some(5), (100, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::Hold, 5), "97 requests, but 50 s since the reset");
    let (g, d) = g.observe(&p, &obs(130, Some(5), (100, 0, 10.0), 10.0));
    assert_eq!(
        (d, g.desired_percent()),
        (Decision::SetCanary(25), 25),
        "60 s and 97 requests since the reset"
    );
    // A reset of errors alone is caught as well, and the errors before it count no more.
    let (g, _) = g.observe(&p, &obs(135, Some(25), (100, 9, 10.0), 10.0));
    let (g, d) = g.observe(&p, &obs(140, Some(25), (101, 0, 10.0), 10.0));
    assert_eq!((d, g.is_final()), (Decision::Hold, false));
    let (_, d) = g.observe(&p, &obs(145, Some(25), (120, 11, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(0), "11 errors since the rebase");
}

#[test]
fn a_lost_change_is_asked_again_and_the_step_counts_only_once_shown() {
    let p = Policy::default();
    let (g, d) = Gate::start(t(0)).observe(&p, &obs(0, Some(0), (0, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(5));
    let (g, d) = g.observe(&p, &obs(100, Some(0), (0, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(5), "the host lost the change: asked again");
    let (g, d) = g.observe(&p, &obs(105, Some(5), (0, 0, 10.0), 10.0));
    assert_eq!(d, Decision::Hold, "shown from 105 s");
    let (g, d) = g.observe(&p, &obs(160, Some(5), (100, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::Hold, 5), "55 s shown, though 160 s since asked");
    // The host drops back: the step starts over when it shows the split again.
    let (g, d) = g.observe(&p, &obs(165, Some(0), (100, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(5));
    let (g, _) = g.observe(&p, &obs(170, Some(5), (100, 0, 10.0), 10.0));
    let (g, d) = g.observe(&p, &obs(225, Some(5), (200, 0, 10.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::Hold, 5), "55 s since shown again");
    let (_, d) = g.observe(&p, &obs(230, Some(5), (200, 0, 10.0), 10.0));
    assert_eq!(d, Decision::SetCanary(25));
}

#[test]
fn an_unreadable_host_never_advances_a_step_but_errors_still_roll_back() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g2, d) = g.observe(&p, &obs(100, None, (500, 0, 10.0), 10.0));
    assert_eq!((d, g2.desired_percent()), (Decision::SetCanary(5), 5), "unknown: the change is repeated");
    let (g3, d) = g2.observe(&p, &obs(105, Some(5), (500, 0, 10.0), 10.0));
    assert_eq!((d, g3.desired_percent()), (Decision::SetCanary(25), 25), "the step was shown all along");
    let (g2, d) = g.observe(&p, &obs(100, None, (500, 11, 10.0), 10.0));
    assert_eq!((d, g2.is_final()), (Decision::SetCanary(0), true));
}

#[test]
fn a_rollback_asks_for_zero_until_the_host_shows_it_and_final_states_stay_final() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (rb, d) = g.rollback(t(5), "rolled back by hand");
    assert_eq!(
        (d, rb.rolled_back_reason(), rb.desired_percent()),
        (Decision::SetCanary(0), Some("rolled back by hand"), 0)
    );
    for observed in [Some(5), None, Some(100)] {
        let o = obs(9, observed, (900, 0, 1.0), 1.0);
        assert_eq!(rb.observe(&p, &o), (rb.clone(), Decision::SetCanary(0)), "observed {observed:?}");
    }
    assert_eq!(rb.observe(&p, &obs(9, Some(0), (900, 0, 1.0), 1.0)), (rb.clone(), Decision::Hold));
    assert_eq!(
        rb.override_gate(t(10)),
        (rb.clone(), Decision::Hold),
        "a rolled-back promotion is not overridden"
    );
    assert_eq!(rb.rollback(t(10), "again"), (rb.clone(), Decision::Hold));
    let (ov, _) = g.override_gate(t(5));
    assert_eq!(
        ov.rollback(t(6), "late"),
        (ov.clone(), Decision::Hold),
        "the promoted revision is the stable one"
    );
    assert_eq!(ov.observe(&p, &obs(9, Some(100), (900, 900, 1e6), 1.0)), (ov.clone(), Decision::Hold));
    assert_eq!(ov.observe(&p, &obs(9, Some(50), (900, 0, 1.0), 1.0)).1, Decision::SetCanary(100));
}

#[test]
fn override_skips_to_100_and_rollback_returns_to_stable_from_any_state_that_is_not_final() {
    let p = Policy::default();
    let smoke = Gate::start(t(0));
    let step = at_first_step(&p, 0);
    for g in [&smoke, &step] {
        let (ov, d) = g.override_gate(t(7));
        assert_eq!((d, ov.phase()), (Decision::SetCanary(100), &Phase::Promoted { at: t(7) }));
        let (rb, d) = g.rollback(t(7), "by hand");
        assert_eq!((d, rb.desired_percent(), rb.is_final()), (Decision::SetCanary(0), 0, true));
    }
}

#[test]
fn a_step_without_traffic_stalls_and_time_alone_never_advances_it() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g, d) = g.observe(&p, &obs(1799, Some(5), (3, 0, 10.0), 10.0));
    assert_eq!((d, g.phase_name()), (Decision::Hold, "shifting"));
    let (g, d) = g.observe(&p, &obs(1800, Some(5), (3, 0, 10.0), 10.0));
    assert_eq!(
        (d, g.phase_name(), g.desired_percent()),
        (Decision::Hold, "stalled", 5),
        "30 min in the step"
    );
    let (g, d) = g.observe(&p, &obs(86_400, Some(5), (49, 0, 10.0), 10.0));
    assert_eq!(
        (d, g.phase_name(), g.desired_percent()),
        (Decision::Hold, "stalled", 5),
        "a day: still 49 requests"
    );
    let (g, d) = g.observe(&p, &obs(86_405, Some(5), (50, 0, 10.0), 10.0));
    assert_eq!((d, g.phase_name()), (Decision::SetCanary(25), "shifting"), "the traffic came: the next step");
}

#[test]
fn a_policy_that_asks_for_no_requests_advances_on_time_alone_and_still_rolls_back_on_errors() {
    let p = Policy { min_requests: 0, min_step_time: Duration::from_secs(3), ..Policy::default() };
    let g = at_first_step(&p, 0);
    let mut idle = obs(3, Some(5), (0, 0, 0.0), 10.0);
    idle.canary.p99_ms = None;
    let (held, d) = g.observe(&p, &idle);
    assert_eq!((d, held.desired_percent()), (Decision::Hold, 5), "2 s shown: not yet");
    idle.now = t(4);
    let (g, d) = g.observe(&p, &idle);
    assert_eq!((d, g.desired_percent()), (Decision::SetCanary(25), 25), "3 s shown, no scores, no p99");
    let (g, _) = g.observe(&p, &obs(5, Some(25), (0, 0, 10.0), 10.0));
    let (g, d) = g.observe(&p, &obs(6, Some(25), (20, 20, 10.0), 10.0));
    assert_eq!((d, g.phase_name()), (Decision::SetCanary(0), "rolled_back"), "20 errors in 20 scores");
}

#[test]
fn a_policy_whose_steps_do_not_reach_100_rolls_back_with_that_reason() {
    for steps in [vec![], vec![5, 50], vec![0, 100], vec![50, 25, 100]] {
        let p = Policy { steps: steps.clone(), ..Policy::default() };
        let (g, d) = Gate::start(t(0)).observe(&p, &obs(0, Some(0), (0, 0, 1.0), 1.0));
        assert_eq!(d, Decision::Hold, "{steps:?}: the host is at 0 %");
        let reason = format!("the gate's steps {steps:?} do not rise from above 0 % to 100 %");
        assert_eq!(g.rolled_back_reason(), Some(reason.as_str()));
    }
    let p = Policy { steps: vec![100], ..Policy::default() };
    let (g, d) = Gate::start(t(0)).observe(&p, &obs(0, Some(0), (0, 0, 1.0), 1.0));
    assert_eq!((d, g.desired_percent()), (Decision::SetCanary(100), 100), "one step: straight to 100 %");
}

#[test]
fn a_step_too_small_for_a_p99_advances_on_its_errors_and_the_next_step_judges_the_latency() {
    let p = Policy::default();
    let g = at_first_step(&p, 0);
    let (g, d) = g.observe(&p, &obs(70, Some(5), (60, 0, 30.0), 10.0));
    assert_eq!((d, g.desired_percent()), (Decision::SetCanary(25), 25), "60 requests: latency not judged");
    let (g, _) = g.observe(&p, &obs(75, Some(25), (60, 0, 30.0), 10.0));
    let (g, d) = g.observe(&p, &obs(80, Some(25), (160, 0, 30.0), 10.0));
    assert_eq!(d, Decision::SetCanary(0));
    assert_eq!(
        g.rolled_back_reason(),
        Some("p99 latency 30 ms at 25 % is over 1.2 × and over 10 ms above the stable revision's 10 ms")
    );
}
