//! The load test: 100 concurrent fits through cloudrun-jobs over
//! FakeCloudRun, in virtual time. Three `jobs.run` calls answer 429 and two
//! answers are lost after the execution was made; the workers are real and
//! write their outputs to the object store; their events arrive as Pub/Sub
//! pushes that are late, duplicated and out of order (seeded).
//!
//! Dispatch runs in virtual time: a driver moves the clock to the next
//! sleeper once every in-flight dispatch is asleep on it (its rate-limit
//! slot or cool-down, and its lease renewal), so the bucket's minute-long
//! schedule takes a second. It prints p50/p95/max time-to-running beside
//! the floor the bucket sets: at 150/min with a burst of 10, the 95th
//! submit cannot leave before (95 - 10) × 0.4 s = 34 s.
//!
//! `cargo test -p mapi-tests --test suites cloudrun_load:: -- --nocapture`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{AttemptNo, RunId, RunState, Timestamp};
use mapi_lifecycle::RunDoc;
use mapi_tests::Options;
use mapi_tests::backend::{Backend, start};
use mapi_tests::fake_cloudrun::Fault;
use mapi_tests::scripted::Rng;
use serde_json::json;

const LONGLEY: &str = include_str!("../../examples/longley.csv");
const RUNS: usize = 100;
const SEED: u64 = 20_261_130;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_fits_through_cloudrun_jobs_with_429s_lost_answers_and_late_duplicated_events() {
    let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
    let options =
        Options { background: false, clock: clock.clone(), executor: None, queue: None, entropy: None };
    let mut r = start(Backend::CloudRunJobs, &[("MAPI_DISPATCH_LEASE_S", "60")], options).await;
    let fake = r.fake().clone();
    fake.collect_events();
    for n in [7, 38, 71] {
        fake.inject_at(n, Fault::Throttle { retry_after_s: 1 });
    }
    for n in [20, 55] {
        fake.inject_at(n, Fault::LoseResponse);
    }
    let ds = r.upload(LONGLEY).await;
    let mut ids = Vec::new();
    for _ in 0..RUNS {
        let body =
            json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}, "timeout_s": 600});
        ids.push(RunId::parse(&r.submit(body).await).expect("run id"));
    }
    let t0 = clock.now();

    // Every dispatch at once, as the queue would deliver them.
    let internal = r.platform.platform.state.config.secrets.internal_token.clone();
    let mut inflight = tokio::task::JoinSet::new();
    for id in &ids {
        let (http, url, token) = (r.http.clone(), r.url(mapi_schema::tasks::DISPATCH_PATH), internal.clone());
        let body = json!({"run": id.to_string(), "attempt": AttemptNo::FIRST.0});
        inflight.spawn(async move {
            let resp = http.post(url).bearer_auth(token).json(&body).send().await.expect("dispatch");
            resp.status().as_u16()
        });
    }
    let mut stuck_fallbacks = 0;
    let mut quiet_since = Instant::now();
    while !inflight.is_empty() {
        while let Some(done) = inflight.try_join_next() {
            assert_eq!(done.expect("join"), 200, "every dispatch is done in one delivery");
        }
        if inflight.is_empty() {
            break;
        }
        // Each in-flight dispatch sleeps twice when idle: on its slot (or
        // cool-down) and on its lease renewal.
        let asleep = clock.sleepers() >= 2 * inflight.len();
        let fallback = quiet_since.elapsed() > Duration::from_secs(2);
        if asleep || fallback {
            stuck_fallbacks += usize::from(fallback && !asleep);
            if let Some(t) = clock.next_wake() {
                clock.set(t);
            }
            quiet_since = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(fake.pending_faults(), 0, "every injected fault was met");

    // Time to running, in virtual time.
    let store = r.platform.platform.state.store.clone();
    let mut to_running = Vec::new();
    for id in &ids {
        let run: RunDoc = mapi_schema::get(&*store, id.as_str()).await.expect("read").expect("run");
        let at = run.history().iter().find(|t| t.to == RunState::Running).expect("running").at;
        to_running.push(at.since(t0));
    }
    to_running.sort();
    let (p50, p95, max) =
        (percentile(&to_running, 50.0), percentile(&to_running, 95.0), to_running[RUNS - 1]);
    let floor = Duration::from_millis(400) * (95 - 10);
    println!(
        "time to running over {RUNS} runs: p50 {:.1} s, p95 {:.1} s, max {:.1} s; the bucket's floor for the 95th: {:.1} s (p95/floor {:.3}); driver fallbacks {stuck_fallbacks}",
        p50.as_secs_f64(),
        p95.as_secs_f64(),
        max.as_secs_f64(),
        floor.as_secs_f64(),
        p95.as_secs_f64() / floor.as_secs_f64()
    );
    assert!(p95 >= floor, "nothing beats the bucket: {p95:?}");
    assert!(
        p95.as_secs_f64() <= floor.as_secs_f64() * 1.05,
        "p95 {p95:?} is not within 5 % of the floor {floor:?}"
    );

    // Executions run for real; their events arrive late, twice, in any order.
    r.platform.platform.start_background().expect("background");
    let mut rng = Rng::new(SEED);
    let mut held = Vec::new();
    let mut pushed = 0usize;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let mut batch = std::mem::take(&mut held);
        for e in fake.take_events() {
            for _ in 0..=rng.below(2) {
                batch.push(e.clone());
            }
        }
        rng.shuffle(&mut batch);
        // A fifth of this round waits for the next: late.
        let keep = batch.len() / 5;
        held = batch.split_off(batch.len() - keep);
        for (i, e) in batch.iter().enumerate() {
            let env = fake.envelope(e, &format!("m-{pushed}-{i}"));
            let (s, _) =
                r.call(&internal, reqwest::Method::POST, mapi_push_events::EVENTS_PATH, Some(env)).await;
            assert_eq!(s, 200);
            pushed += 1;
        }
        let mut finals = 0;
        for id in &ids {
            let run: RunDoc = mapi_schema::get(&*store, id.as_str()).await.expect("read").expect("run");
            finals += usize::from(run.state().is_terminal());
        }
        if finals == RUNS {
            break;
        }
        assert!(Instant::now() < deadline, "{finals} of {RUNS} runs final after 120 s");
        clock.advance(Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // What was still held arrives after its run ended: acknowledged, ignored.
    held.extend(fake.take_events());
    for (i, e) in held.iter().enumerate() {
        let env = fake.envelope(e, &format!("late-{i}"));
        let (s, _) = r.call(&internal, reqwest::Method::POST, mapi_push_events::EVENTS_PATH, Some(env)).await;
        assert_eq!(s, 200);
        pushed += 1;
    }

    // Nothing lost, one execution per run, outputs in the object store.
    let mut executions: BTreeMap<String, usize> = BTreeMap::new();
    for (_, _, run) in fake.executions() {
        *executions.entry(run).or_default() += 1;
    }
    let mut lost = 0;
    for id in &ids {
        let view = r.run(id.as_str()).await;
        lost += usize::from(view["state"] != "succeeded");
        assert_eq!(executions.get(id.as_str()), Some(&1), "exactly one execution for {id}");
        let out = view["outputs"].as_array().expect("outputs");
        assert!(out.iter().any(|o| o["name"] == "model.json"), "{view:#}");
    }
    let per_run: Vec<usize> = executions.values().copied().collect();
    println!(
        "runs lost: {lost}; executions per run: min {} max {}; event pushes {pushed} (late and duplicated)",
        per_run.iter().min().copied().unwrap_or_default(),
        per_run.iter().max().copied().unwrap_or_default()
    );
    assert_eq!(lost, 0);
    let model = r.run(ids[0].as_str()).await;
    let url = model["outputs"][0]["url"].as_str().expect("url").to_owned();
    let body: serde_json::Value = r.output(&url).await.json().await.expect("json");
    assert!(body["coefficients"].is_array(), "the output is in the object store: {body}");
}
