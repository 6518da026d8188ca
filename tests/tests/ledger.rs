//! Property: for any seeded sequence of submits, dispatches, attempts that
//! end every way the outcome table knows (so runs retry), repeated and
//! racing finalizations, cancels and clock jumps across UTC days and a
//! month, every (run, attempt) is metered once, at the price of its first
//! finalization; the ledger's sums equal the usage API's totals, the runs'
//! charged costs and the counters; and when every run has ended nothing is
//! left reserved or active.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{AttemptNo, ResourceClass, RunId, Timestamp};
use mapi_executor::ExecutionInfo;
use mapi_quota::counters::CounterDoc;
use mapi_schema::LedgerEntry;
use mapi_tests::scripted::{Ending, Rng, ScriptedExecutor, ended};
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

/// What the suite knows of one run.
#[derive(Debug)]
struct Model {
    id: RunId,
    attempt: AttemptNo,
    class: ResourceClass,
    /// When the current attempt's execution started, once dispatched.
    started: Option<Timestamp>,
    state: String,
}

fn terminal(state: &str) -> bool {
    matches!(state, "succeeded" | "failed" | "partial" | "cancelled")
}

struct World {
    p: TestPlatform,
    clock: Arc<VirtualClock>,
    runs: Vec<Model>,
    /// The charge each metered (run, attempt) must have: its first finalization's.
    expected: BTreeMap<(RunId, u32), i64>,
    /// Finalize tasks already delivered, to deliver again.
    delivered: Vec<(RunId, AttemptNo, ExecutionInfo)>,
    dataset: String,
}

impl World {
    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    async fn session(&self) -> String {
        self.p.login("dev@dev.local").await
    }

    async fn submit(&mut self, rng: &mut Rng) {
        let class =
            [ResourceClass::S, ResourceClass::M, ResourceClass::L][usize::try_from(rng.below(3)).expect("i")];
        let timeout = 60 + rng.below(3_540);
        let body =
            json!({"method": "describe", "dataset": self.dataset, "class": class, "timeout_s": timeout});
        // Some through the API token, some through a session: both are grouped in usage.
        let token = if rng.chance(50) { self.p.token().to_owned() } else { self.session().await };
        let (s, v) =
            self.p.call(&token, Method::POST, "/v1/tenants/dev/projects/default/runs", Some(body)).await;
        assert_eq!(s, 201, "submit: {v}");
        let id = RunId::parse(v["id"].as_str().expect("id")).expect("id");
        self.runs.push(Model { id, attempt: AttemptNo(1), class, started: None, state: "queued".into() });
    }

    async fn dispatch(&mut self, i: usize) {
        let (id, attempt) = (self.runs[i].id.clone(), self.runs[i].attempt);
        let (s, b) = self.p.dispatch(&id, attempt).await;
        assert_eq!((s, b["outcome"].as_str()), (200, Some("submitted")), "dispatch {id}/{attempt}: {b}");
        self.runs[i].started = Some(self.now());
        self.runs[i].state = "running".into();
    }

    /// Records a finalize answer: the charge of a first finalization, and the run's new state.
    async fn settle(
        &mut self,
        i: usize,
        attempt: AttemptNo,
        execution: &ExecutionInfo,
        answer: (u16, Value),
    ) {
        let (s, b) = answer;
        assert_eq!(s, 200, "finalize: {b}");
        let key = (self.runs[i].id.clone(), attempt.0);
        if b["outcome"] == "already finalized" {
            assert!(self.expected.contains_key(&key), "only a metered attempt is already finalized: {b}");
            return;
        }
        assert_eq!(b["outcome"], "finalized", "{b}");
        let wall = execution.finished.expect("finished").since(execution.started.expect("started"));
        let price = mapi_cost::CURRENT.charge(self.runs[i].class, 1, wall).amount_micros;
        assert_eq!(b["amount_micros"].as_i64(), Some(price), "the attempt is charged its class × wall time");
        assert!(self.expected.insert(key, price).is_none(), "{}/{attempt} metered twice", self.runs[i].id);
        let view = self.p.run(self.runs[i].id.as_str()).await;
        let m = &mut self.runs[i];
        m.state = view["state"].as_str().expect("state").to_owned();
        assert_eq!(b["state"].as_str(), Some(m.state.as_str()));
        if m.state == "queued" {
            m.attempt = attempt.next();
            m.class = serde_json::from_value(view["class"].clone()).expect("class");
            m.started = None;
            assert_eq!(view["attempt"].as_u64(), Some(u64::from(m.attempt.0)), "a retry is a new attempt");
        }
    }

    /// Ends the running attempt of run `i` as `ending`; sometimes delivers
    /// the finalize task twice at once, as a duplicated queue delivery would.
    async fn end(&mut self, i: usize, ending: Ending, rng: &mut Rng) {
        let (id, attempt, started) =
            (self.runs[i].id.clone(), self.runs[i].attempt, self.runs[i].started.expect("running"));
        if ending == Ending::Succeed {
            self.p.complete(&id, attempt).await;
        }
        let execution = ended(&id, attempt, 1, started, self.now(), ending.status());
        if rng.chance(30) {
            let (a, b) = tokio::join!(
                self.p.finalize(&id, attempt, execution.clone()),
                self.p.finalize(&id, attempt, execution.clone())
            );
            // One meters; the other finds it done, or (an attempt never heard
            // from, whose bootstraps the first is retiring) is told to come
            // back, and the queue's redelivery finds it done.
            let (first, other) = if a.1["outcome"] == "finalized" { (a, b) } else { (b, a) };
            assert_eq!(
                first.1["outcome"], "finalized",
                "two deliveries at once: one meters: {first:?} {other:?}"
            );
            let other = match other.0 {
                503 => self.p.finalize(&id, attempt, execution.clone()).await,
                _ => other,
            };
            assert_eq!(other.1["outcome"], "already finalized", "the other finds it done: {other:?}");
            self.settle(i, attempt, &execution, first).await;
        } else {
            let answer = self.p.finalize(&id, attempt, execution.clone()).await;
            self.settle(i, attempt, &execution, answer).await;
        }
        self.delivered.push((id, attempt, execution));
    }

    async fn cancel(&mut self, i: usize) {
        let id = self.runs[i].id.clone();
        let (s, b) = self.p.cancel(self.p.token(), id.as_str()).await;
        let m = &mut self.runs[i];
        match m.state.as_str() {
            "queued" => {
                assert_eq!((s, b["state"].as_str()), (200, Some("cancelled")), "{b}");
                m.state = "cancelled".into();
            }
            s2 if terminal(s2) => assert_eq!(s, 409, "cancelling an ended run: {b}"),
            _ => assert_eq!(s, 202, "cancelling a started run waits for the executor: {b}"),
        }
    }
}

/// One seeded scenario; how many months its ledger spans.
async fn scenario(seed: u64) -> usize {
    let mut rng = Rng::new(seed);
    // Six hours before the end of January: the steps cross days and a month.
    let clock = Arc::new(VirtualClock::new(Timestamp::parse_rfc3339("2026-01-31T18:00:00Z").expect("time")));
    let p = TestPlatform::start_with(
        &[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local")],
        Options {
            background: false,
            clock: clock.clone(),
            executor: Some(Arc::new(ScriptedExecutor::default())),
            queue: None,
            entropy: None,
        },
    )
    .await;
    let dataset = p.upload("x,y\n1,2\n2,3\n3,5\n").await;
    let mut w =
        World { p, clock, runs: Vec::new(), expected: BTreeMap::new(), delivered: Vec::new(), dataset };

    for _ in 0..70 {
        let live: Vec<usize> = (0..w.runs.len()).filter(|&i| !terminal(&w.runs[i].state)).collect();
        let pick =
            |rng: &mut Rng, from: &[usize]| from[usize::try_from(rng.below(from.len() as u64)).expect("i")];
        match rng.below(10) {
            0 | 1 => w.submit(&mut rng).await,
            2 | 3 if !live.is_empty() => {
                let queued: Vec<usize> =
                    live.iter().copied().filter(|&i| w.runs[i].state == "queued").collect();
                if !queued.is_empty() {
                    let i = pick(&mut rng, &queued);
                    w.dispatch(i).await;
                }
            }
            4 | 5 => {
                let running: Vec<usize> =
                    live.iter().copied().filter(|&i| w.runs[i].started.is_some()).collect();
                if !running.is_empty() {
                    let i = pick(&mut rng, &running);
                    let ending =
                        Ending::ALL[usize::try_from(rng.below(Ending::ALL.len() as u64)).expect("i")];
                    w.end(i, ending, &mut rng).await;
                }
            }
            6 if !w.delivered.is_empty() => {
                // A finalize task delivered again, sometimes with a different report.
                let (id, attempt, mut execution) =
                    w.delivered[pick(&mut rng, &(0..w.delivered.len()).collect::<Vec<_>>())].clone();
                if rng.chance(50) {
                    execution.finished = Some(w.now());
                    execution.status = Ending::ALL[usize::try_from(rng.below(6)).expect("i")].status();
                }
                let (s, b) = w.p.finalize(&id, attempt, execution).await;
                assert_eq!(
                    (s, b["outcome"].as_str()),
                    (200, Some("already finalized")),
                    "a repeat meters nothing: {b}"
                );
            }
            7 if !w.runs.is_empty() => {
                let i = pick(&mut rng, &(0..w.runs.len()).collect::<Vec<_>>());
                w.cancel(i).await;
            }
            _ => w.clock.advance(Duration::from_secs(1 + rng.below(3 * 3_600))),
        }
    }
    // End everything: cancel what is queued, stop what runs.
    for i in 0..w.runs.len() {
        while !terminal(&w.runs[i].state) {
            if w.runs[i].started.is_some() {
                w.clock.advance(Duration::from_secs(1 + rng.below(600)));
                w.end(i, Ending::Cancelled, &mut rng).await;
            } else {
                w.cancel(i).await;
            }
        }
    }
    let months = check(&w, seed).await;
    w.p.platform.shutdown().await;
    months
}

/// Checks the properties; how many months the ledger spans.
async fn check(w: &World, seed: u64) -> usize {
    let store = &*w.p.platform.state.store;
    let q = mapi_store::Query::new(<LedgerEntry as mapi_schema::Doc>::COLLECTION);
    let entries: Vec<LedgerEntry> =
        store.query(&q, None).await.expect("ledger").iter().map(|d| d.decode().expect("entry")).collect();

    // Each metered (run, attempt) once, at its first finalization's price.
    let metered: BTreeMap<(RunId, u32), i64> =
        entries.iter().map(|e| ((e.run.clone(), e.attempt.0), e.charge.amount_micros)).collect();
    assert_eq!(metered.len(), entries.len(), "seed {seed}: no (run, attempt) twice in the ledger");
    assert_eq!(metered, w.expected, "seed {seed}: the ledger is exactly the first finalizations");
    let sum: i64 = entries.iter().map(|e| e.charge.amount_micros).sum();
    let vcpu: u64 = entries.iter().map(|e| e.charge.vcpu_ms).sum();

    // The usage API's totals, month by month and day by day, add up to the ledger.
    let operator = w.p.login("admin@dev.local").await;
    let months: BTreeSet<String> = entries.iter().map(|e| e.at.to_rfc3339()[..7].to_owned()).collect();
    let (mut usage_sum, mut usage_vcpu, mut usage_attempts) = (0i64, 0u64, 0u64);
    for m in &months {
        let path = format!("/v1/tenants/dev/usage?period=month&at={m}-15T00:00:00Z&group_by=day");
        let (s, u) = w.p.call(&operator, Method::GET, &path, None).await;
        assert_eq!(s, 200, "{u}");
        usage_sum += u["totals"]["cost_micros"].as_i64().expect("cost");
        usage_vcpu += u["totals"]["vcpu_ms"].as_u64().expect("vcpu");
        usage_attempts += u["totals"]["attempts"].as_u64().expect("attempts");
        let by_day: i64 = u["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["totals"]["cost_micros"].as_i64().expect("cost"))
            .sum();
        assert_eq!(
            by_day,
            u["totals"]["cost_micros"].as_i64().expect("cost"),
            "seed {seed}: days add up to {m}"
        );
        let (s, by_token) =
            w.p.call(&operator, Method::GET, &path.replace("group_by=day", "group_by=token"), None).await;
        assert_eq!(s, 200);
        let tokens: i64 = by_token["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["totals"]["cost_micros"].as_i64().expect("cost"))
            .sum();
        assert_eq!(tokens, by_day, "seed {seed}: tokens add up to {m}");
    }
    assert_eq!(
        (usage_sum, usage_vcpu, usage_attempts),
        (sum, vcpu, entries.len() as u64),
        "seed {seed}: usage totals are the ledger's"
    );

    // Each run's charged cost is its entries' sum.
    for m in &w.runs {
        let view = w.p.run(m.id.as_str()).await;
        let mine: i64 = entries.iter().filter(|e| e.run == m.id).map(|e| e.charge.amount_micros).sum();
        assert_eq!(view["cost"]["charged_micros"].as_i64(), Some(mine), "seed {seed}: run {}", m.id);
    }

    // The counters: charged equals the ledger, nothing reserved or active once all ended.
    let counters = store.query(&mapi_store::Query::new("counters"), None).await.expect("counters");
    let (mut month_spend, mut month_vcpu) = (0i64, 0i64);
    for d in &counters {
        let id = d.key.id();
        let c: CounterDoc = d.decode().expect("counter");
        if id.starts_with("tenant:dev") || id.starts_with("platform") {
            assert_eq!((c.active_runs, c.reserved_vcpu_ms), (0, 0), "seed {seed}: {id} holds nothing: {c:?}");
            assert_eq!(c.committed_vcpu_ms, c.charged_vcpu_ms, "seed {seed}: {id}");
        }
        // Each counter is its shards (and a legacy document): a month's are
        // the documents of the counter `tenant:dev@2026-01`.
        let counter = mapi_quota::counters::counter_of(id);
        if counter.starts_with("tenant:dev@") && counter.len() == "tenant:dev@2026-01".len() {
            month_spend += c.spend_micros;
            month_vcpu += c.charged_vcpu_ms;
        }
    }
    assert_eq!(
        (month_spend, month_vcpu),
        (sum, i64::try_from(vcpu).expect("fits")),
        "seed {seed}: counters are the ledger's"
    );
    assert!(!entries.is_empty(), "seed {seed}: the scenario metered something");
    eprintln!(
        "seed {seed}: {} runs, {} ledger entries, {sum} micros over {} month(s)",
        w.runs.len(),
        entries.len(),
        months.len()
    );
    months.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ledger_meters_every_attempt_once_and_usage_adds_up() {
    let mut spans = Vec::new();
    for seed in 1..=6 {
        spans.push(scenario(seed).await);
    }
    assert!(
        spans.iter().any(|&m| m > 1),
        "some scenario meters on both sides of a month boundary: {spans:?}"
    );
}
