//! Quotas through the API, in virtual time, on a scripted executor: racing
//! submits never over-admit, each tier's default limits are enforced,
//! Retry-After is right across UTC day and month boundaries, the spend cap
//! stops new compute for non-internal tenants within one request, and the
//! sharded counters still count what their documents of before hold.

use std::sync::Arc;
use std::time::Duration;

use mapi_clock::{Clock, VirtualClock};
use mapi_domain::{AttemptNo, RunId, Timestamp};
use mapi_tests::scripted::{Ending, Rng, ScriptedExecutor};
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const OPERATOR: &str = "admin@dev.local";

struct Harness {
    p: TestPlatform,
    clock: Arc<VirtualClock>,
    executor: Arc<ScriptedExecutor>,
    operator: String,
}

impl Harness {
    /// A platform at `start` with nothing in the background.
    async fn start(start: &str, extra: &[(&str, &str)]) -> Harness {
        let clock = Arc::new(VirtualClock::new(Timestamp::parse_rfc3339(start).expect("time")));
        let executor = Arc::new(ScriptedExecutor::default());
        let accounts = "admin@dev.local,dev@dev.local,owner@pub.test,owner@ver.test,owner@int.test,owner@sht.test,owner@p2.test";
        // These suites move the clock by days; the evidence recorded at the
        // start stays valid for them (the gate has its own suite).
        let mut vars =
            vec![("MAPI_DEV_ACCOUNTS", accounts), ("MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S", "31536000")];
        vars.extend_from_slice(extra);
        let p = TestPlatform::start_with(
            &vars,
            Options {
                background: false,
                clock: clock.clone(),
                executor: Some(executor.clone()),
                queue: None,
                entropy: None,
            },
        )
        .await;
        let operator = p.login(OPERATOR).await;
        p.open_shared_tiers(&operator).await;
        Harness { p, clock, executor, operator }
    }

    fn now(&self) -> Timestamp {
        self.clock.now()
    }

    async fn set_quota(&self, tenant: &str, policy: Value) {
        let (s, b) = self
            .p
            .call(&self.operator, Method::PUT, &format!("/v1/admin/quotas/{tenant}"), Some(policy))
            .await;
        assert_eq!(s, 200, "set quota: {b}");
    }

    /// Submits as `token` to `tenant/default`: status, Retry-After, body.
    async fn submit_as(&self, token: &str, tenant: &str, body: &Value) -> (u16, Option<u64>, Value) {
        let resp = self
            .p
            .http
            .post(self.p.url(&format!("/v1/tenants/{tenant}/projects/default/runs")))
            .bearer_auth(token)
            .json(body)
            .send()
            .await
            .expect("submit");
        answer(resp).await
    }

    /// Submits an item job of `items` `item.echo` items as `token` to
    /// `tenant/default`: status, Retry-After, body.
    async fn job_as(&self, token: &str, tenant: &str, items: usize) -> (u16, Option<u64>, Value) {
        let resp = self
            .p
            .http
            .post(self.p.url(&format!("/v1/tenants/{tenant}/projects/default/jobs")))
            .bearer_auth(token)
            .json(&json!({"method": "item.echo", "items": vec![0; items]}))
            .send()
            .await
            .expect("submit job");
        answer(resp).await
    }

    /// Adds `delta` to `field` of counter `counter` (its unsharded
    /// document, which counts as a shard does), standing in for usage too
    /// large or slow to make in a test.
    async fn add_usage(&self, counter: &str, field: &'static str, delta: i64) {
        let mut b = mapi_quota::counters::Bumps::default();
        b.add(counter, field, delta);
        let b = &b;
        mapi_store::transact::<_, mapi_store::StoreError, _, _>(
            &*self.p.platform.state.store,
            |mut tx| async move {
                b.apply(&mut tx)?;
                Ok(tx.finish(()))
            },
        )
        .await
        .expect("add usage");
    }

    /// Uploads a small CSV as `token` to `tenant/default`.
    async fn upload_as(&self, token: &str, tenant: &str, csv: &str) -> (u16, Option<u64>, Value) {
        let resp = self
            .p
            .http
            .post(self.p.url(&format!("/v1/tenants/{tenant}/projects/default/datasets?name=d")))
            .bearer_auth(token)
            .header("content-type", "text/csv")
            .body(csv.to_owned())
            .send()
            .await
            .expect("upload");
        answer(resp).await
    }

    /// The tenant's `concurrent_runs` in use, as the usage API reports it.
    async fn active(&self, tenant: &str) -> u64 {
        self.usage_of(tenant, "concurrent_runs").await
    }

    /// What the usage API reports as used of `limit` for `tenant`.
    async fn usage_of(&self, tenant: &str, limit: &str) -> u64 {
        let operator = self.p.login(OPERATOR).await;
        let (s, u) = self.p.call(&operator, Method::GET, &format!("/v1/tenants/{tenant}/usage"), None).await;
        assert_eq!(s, 200, "usage: {u}");
        let q = u["quotas"].as_array().expect("quotas").iter().find(|q| q["limit"] == limit);
        q.map_or(0, |q| q["used"].as_u64().expect("used"))
    }

    /// Adds `bytes` to the tenant's stored bytes, standing in for uploads
    /// too large to make in a test.
    async fn add_storage(&self, tenant: &str, bytes: i64) {
        use mapi_quota::counters::{field, tenant as tenant_counter};
        let id = tenant_counter(&mapi_domain::TenantId::parse(tenant).expect("tenant"));
        self.add_usage(&id, field::STORAGE, bytes).await;
    }

    /// A token of `tenant/default` scoped `runs:create` with a budget of 10
    /// vCPU-seconds a day, minted by `owner`: its secret and public id.
    async fn budget_token(&self, owner: &str, tenant: &str) -> (String, String) {
        let body = json!({"name": "ci", "scopes": ["runs:create"], "budget_vcpu_seconds": 10, "budget_period": "day"});
        let path = format!("/v1/tenants/{tenant}/projects/default/tokens");
        let (s, tok) = self.p.call(owner, Method::POST, &path, Some(body)).await;
        assert_eq!(s, 201, "{tok}");
        let secret = tok["secret"].as_str().expect("secret").to_owned();
        (secret, tok["token"]["id"].as_str().expect("token id").to_owned())
    }

    /// A new tenant of `tier` with a `default` project, and a session of its admin.
    async fn tenant(&self, id: &str, tier: &str) -> String {
        self.p.create_tenant(&self.operator, id, tier).await
    }
}

async fn answer(resp: reqwest::Response) -> (u16, Option<u64>, Value) {
    let status = resp.status().as_u16();
    let retry =
        resp.headers().get("retry-after").map(|v| v.to_str().expect("ascii").parse().expect("seconds"));
    let text = resp.text().await.unwrap_or_default();
    (status, retry, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn run_id(v: &Value) -> RunId {
    RunId::parse(v["id"].as_str().expect("run id")).expect("run id")
}

/// Ends `run`: cancelled while queued (`None`) or its attempt dispatched,
/// run for 7 s and ended as `ending`. Whether its slot is free afterwards.
async fn end(h: &Harness, run: &RunId, ending: Option<Ending>) -> bool {
    let view = h.p.run(run.as_str()).await;
    let attempt = AttemptNo(u32::try_from(view["attempt"].as_u64().expect("attempt")).expect("n"));
    let Some(ending) = ending else {
        let (s, b) = h.p.cancel(h.p.token(), run.as_str()).await;
        assert_eq!(s, 200, "cancel queued: {b}");
        return true;
    };
    let (s, b) = h.p.dispatch(run, attempt).await;
    assert_eq!((s, b["outcome"].as_str()), (200, Some("submitted")), "dispatch: {b}");
    let started = h.now();
    h.clock.advance(Duration::from_secs(7));
    if ending == Ending::Cancelled {
        let (s, b) = h.p.cancel(h.p.token(), run.as_str()).await;
        assert_eq!(s, 202, "cancel running: {b}");
    }
    let (s, b) = h.p.end_attempt(run, attempt, 1, started, ending).await;
    assert_eq!(s, 200, "finalize {ending:?}: {b}");
    let state = b["state"].as_str().expect("state").to_owned();
    let expected: &[&str] = match ending {
        Ending::Succeed => &["succeeded"],
        Ending::MethodError => &["failed"],
        Ending::Cancelled => &["cancelled"],
        // Retried while retries last; then failed.
        Ending::OutOfMemory | Ending::Crash | Ending::Lose => &["queued", "failed"],
    };
    assert!(expected.contains(&state.as_str()), "{ending:?} left the run {state}");
    state != "queued"
}

/// Fires `n` submits at once, each on its own task; the ids admitted and the refusals.
async fn race(h: &Harness, dataset: &str, n: usize) -> (Vec<RunId>, Vec<(u16, Option<u64>, Value)>) {
    let body = json!({"method": "describe", "dataset": dataset});
    let url = h.p.url("/v1/tenants/dev/projects/default/runs");
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..n {
        let (http, url, token, body) = (h.p.http.clone(), url.clone(), h.p.token().to_owned(), body.clone());
        set.spawn(async move {
            answer(http.post(url).bearer_auth(token).json(&body).send().await.expect("submit")).await
        });
    }
    let mut admitted = Vec::new();
    let mut refused = Vec::new();
    for a in set.join_all().await {
        if a.0 == 201 { admitted.push(run_id(&a.2)) } else { refused.push(a) }
    }
    (admitted, refused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_racing_submits_against_twenty_slots_admit_exactly_twenty() {
    for seed in 1..=3u64 {
        let mut rng = Rng::new(seed);
        let h = Harness::start("2026-03-10T12:00:00Z", &[]).await;
        h.set_quota("dev", json!({"concurrent_runs": 20})).await;
        let ds = h.p.upload("x,y\n1,2\n2,3\n3,5\n").await;

        let (mut active, refused) = race(&h, &ds, 50).await;
        assert_eq!((active.len(), refused.len()), (20, 30), "seed {seed}: the first burst");
        for (status, retry, body) in &refused {
            assert_eq!(*status, 429, "seed {seed}: {body}");
            assert_eq!(body["code"], "QUOTA_EXCEEDED", "seed {seed}: {body}");
            let detail = body["detail"].as_str().expect("detail");
            assert!(detail.contains("tenant limit concurrent_runs is 20"), "seed {seed}: {detail}");
            assert!(detail.contains("not knowable"), "seed {seed}: {detail}");
            assert_eq!(*retry, None, "seed {seed}: a slot's freeing has no known time");
        }
        assert_eq!(h.active("dev").await, 20, "seed {seed}");
        let mut refusals = refused.len();

        for round in 0..3 {
            // End a seeded number of the active runs in seeded ways.
            rng.shuffle(&mut active);
            let k = usize::try_from(rng.below(8)).expect("k") + 1;
            let mut still = Vec::new();
            for (i, run) in active.drain(..).enumerate() {
                if i >= k {
                    still.push(run);
                    continue;
                }
                let ending = match rng.below(Ending::ALL.len() as u64 + 1) {
                    0 => None,
                    n => Some(Ending::ALL[usize::try_from(n).expect("n") - 1]),
                };
                // A retried run is queued again: it keeps its slot.
                if !end(&h, &run, ending).await {
                    still.push(run);
                }
            }
            active = still;
            assert_eq!(h.active("dev").await, active.len() as u64, "seed {seed} round {round}: in use");
            let free = 20 - active.len();
            let (admitted, refused) = race(&h, &ds, 50).await;
            assert_eq!(
                (admitted.len(), refused.len()),
                (free, 50 - free),
                "seed {seed} round {round}: exactly the free slots are taken"
            );
            assert!(refused.iter().all(|r| r.0 == 429), "seed {seed} round {round}");
            refusals += refused.len();
            active.extend(admitted);
            assert_eq!(h.active("dev").await, 20, "seed {seed} round {round}: full again");
        }
        // Every refusal is in the audit log as a quota denial, naming the limit.
        let (s, log) = h
            .p
            .call(&h.operator, Method::GET, "/v1/tenants/dev/audit?action=quota.denied&page_size=200", None)
            .await;
        assert_eq!(s, 200, "{log}");
        let entries = log["items"].as_array().expect("items");
        assert_eq!(entries.len(), refusals, "seed {seed}: one denial per refusal");
        assert!(
            entries.iter().all(|e| e["outcome"] == "denied"
                && e["detail"].as_str().is_some_and(|d| d.contains("tenant concurrent_runs"))),
            "seed {seed}: {log}"
        );
        h.p.platform.shutdown().await;
    }
}

const GIB: u64 = 1 << 30;

/// The tier table's default limits, typed by hand: vCPU-s a day and a
/// month, concurrent runs, fan-out tasks, largest class, storage, egress a
/// month, requests a minute, items a job, endpoint instances (`null`: no
/// limit at that level).
fn tier_table(tier: &str) -> Value {
    match tier {
        "internal" => {
            json!({"vcpu_seconds_per_day": null, "vcpu_seconds_per_month": null, "concurrent_runs": 100,
            "max_fanout_tasks": 1000, "max_resource_class": null, "storage_bytes": null,
            "egress_bytes_per_month": null, "requests_per_minute": 6000, "max_items_per_job": 100_000,
            "endpoint_instances": 200})
        }
        "self-hosted-trusted" => json!({"vcpu_seconds_per_day": null, "vcpu_seconds_per_month": null,
            "concurrent_runs": null, "max_fanout_tasks": null, "max_resource_class": null, "storage_bytes": null,
            "egress_bytes_per_month": null, "requests_per_minute": null, "max_items_per_job": null,
            "endpoint_instances": null}),
        "verified" => json!({"vcpu_seconds_per_day": 86_400, "vcpu_seconds_per_month": 1_000_000,
            "concurrent_runs": 20, "max_fanout_tasks": 256, "max_resource_class": "L", "storage_bytes": 100 * GIB,
            "egress_bytes_per_month": 100 * GIB, "requests_per_minute": 600, "max_items_per_job": 10_000,
            "endpoint_instances": 20}),
        "public" => {
            json!({"vcpu_seconds_per_day": 3_600, "vcpu_seconds_per_month": 36_000, "concurrent_runs": 2,
            "max_fanout_tasks": 16, "max_resource_class": "S", "storage_bytes": 2 * GIB,
            "egress_bytes_per_month": 5 * GIB, "requests_per_minute": 60, "max_items_per_job": 1_000,
            "endpoint_instances": 3})
        }
        other => panic!("no tier {other}"),
    }
}

/// Counters written before they were sharded still count: with the single
/// `counters/tenant:dev` holding 2 runs, a limit of 4 admits 2 more. New
/// runs write only shards, taken back on release: no submit writes
/// `counters/platform` or `counters/tenant:dev`, and the platform slots of
/// many runs are spread over its 16 shards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn counters_from_before_sharding_count_and_no_submit_writes_one_counter_document() {
    use mapi_quota::counters::{self, Bumps, field};
    use mapi_store::StoreExt;
    let h = Harness::start("2026-03-10T12:00:00Z", &[]).await;
    let store = h.p.platform.state.store.clone();
    h.set_quota("dev", json!({"concurrent_runs": 4})).await;
    let ds = h.p.upload("x,y\n1,2\n2,3\n3,5\n").await;
    let mut before = Bumps::default();
    before.add("tenant:dev", field::ACTIVE, 2);
    before.add(counters::PLATFORM, field::ACTIVE, 2);
    let b = &before;
    mapi_store::transact::<_, mapi_store::StoreError, _, _>(&*store, |mut tx| async move {
        b.apply(&mut tx)?;
        Ok(tx.finish(()))
    })
    .await
    .expect("counters of before");
    let versions = async || {
        let mut v = Vec::new();
        for id in ["tenant:dev", counters::PLATFORM] {
            let key = mapi_schema::key::<counters::CounterDoc>(id).expect("key");
            v.push(store.get_one(&key).await.expect("read").map(|d| d.version));
        }
        v
    };
    let legacy = versions().await;
    assert!(legacy.iter().all(Option::is_some));

    let (admitted, refused) = race(&h, &ds, 5).await;
    assert_eq!((admitted.len(), refused.len()), (2, 3), "2 of the 4 slots were held before sharding");
    for r in &refused {
        refused_with(r, "tenant limit concurrent_runs is 4");
    }
    assert_eq!(h.active("dev").await, 4);
    let slots = |run: RunId| {
        let store = store.clone();
        async move {
            let doc = mapi_schema::get::<mapi_lifecycle::RunDoc>(&*store, run.as_str())
                .await
                .expect("read")
                .expect("run");
            doc.reservation().clone().expect("reservation").slots
        }
    };
    for run in &admitted {
        let held = slots(run.clone()).await;
        assert_eq!(held.len(), 2, "{held:?}");
        assert!(held[0].starts_with("tenant:dev#") && held[1].starts_with("platform#"), "{held:?}");
    }
    // Ending a run gives its slot back to its shard; the old count stays.
    assert!(end(&h, &admitted[0], None).await);
    assert_eq!(h.active("dev").await, 3);
    assert_eq!(counters::read(&*store, "tenant:dev").await.expect("read").active_runs, 3);

    // Many runs: each takes a platform shard its id picks, none the old document.
    h.set_quota("dev", json!({"concurrent_runs": 100})).await;
    let (admitted, refused) = race(&h, &ds, 32).await;
    assert_eq!((admitted.len(), refused.len()), (32, 0));
    let mut shards = std::collections::BTreeSet::new();
    for run in admitted {
        shards.insert(slots(run).await[1].clone());
    }
    assert!(shards.len() >= 8, "32 runs over 16 platform shards: {shards:?}");
    assert_eq!(versions().await, legacy, "no submit wrote the counters' old documents");
    assert_eq!(counters::read(&*store, counters::PLATFORM).await.expect("read").active_runs, 2 + 1 + 32);
    h.p.platform.shutdown().await;
}

/// Asserts a concurrency refusal whose detail contains `what`.
#[track_caller]
fn refused_with(answer: &(u16, Option<u64>, Value), what: &str) {
    assert_eq!(answer.0, 429, "{}", answer.2);
    let detail = answer.2["detail"].as_str().expect("detail");
    assert!(detail.contains(what), "{detail}");
}

fn spec(dataset: &str, class: &str, timeout_s: u32) -> Value {
    json!({"method": "describe", "dataset": dataset, "class": class, "timeout_s": timeout_s})
}

/// Asserts a refusal: 429, `code`, a detail naming `limit`, and `retry`.
#[track_caller]
fn refused(answer: &(u16, Option<u64>, Value), code: &str, limit: &str, retry: Option<u64>) {
    let (status, retry_after, body) = answer;
    assert_eq!(*status, 429, "expected a refusal on {limit}: {body}");
    assert_eq!(body["code"], code, "{body}");
    let detail = body["detail"].as_str().expect("detail");
    assert!(detail.contains(limit), "the detail names {limit}: {detail}");
    assert_eq!(*retry_after, retry, "Retry-After of {limit}: {detail}");
}

/// Asserts a refusal of a run that asks for more than its tenant may ever
/// have at once (a larger class, more tasks): 400 INVALID_ARGUMENT naming
/// `limit`, and no Retry-After, since nothing frees up.
#[track_caller]
fn over_limit(answer: &(u16, Option<u64>, Value), limit: &str) {
    never_passes(answer, (400, "INVALID_ARGUMENT"), limit);
}

/// Asserts a refusal of a request that can never pass as it is: 413
/// PAYLOAD_TOO_LARGE naming `limit`, and no Retry-After.
#[track_caller]
fn too_large(answer: &(u16, Option<u64>, Value), limit: &str) {
    never_passes(answer, (413, "PAYLOAD_TOO_LARGE"), limit);
}

#[track_caller]
fn never_passes(answer: &(u16, Option<u64>, Value), (status, code): (u16, &str), limit: &str) {
    let (got, retry_after, body) = answer;
    assert_eq!((*got, &body["code"]), (status, &json!(code)), "{body}");
    let detail = body["detail"].as_str().expect("detail");
    assert!(detail.contains(limit), "the detail names {limit}: {detail}");
    assert_eq!(*retry_after, None, "nothing to wait for: {detail}");
}

#[track_caller]
fn admitted(answer: &(u16, Option<u64>, Value)) -> RunId {
    assert_eq!(answer.0, 201, "expected admission: {}", answer.2);
    run_id(&answer.2)
}

impl Harness {
    /// Dispatches the first attempt of `run`, lets it run `wall`, and ends it successfully.
    async fn run_for(&self, run: &RunId, wall: Duration) {
        let (s, b) = self.p.dispatch(run, AttemptNo(1)).await;
        assert_eq!((s, b["outcome"].as_str()), (200, Some("submitted")), "dispatch: {b}");
        let started = self.now();
        self.clock.advance(wall);
        let (s, b) = self.p.end_attempt(run, AttemptNo(1), 1, started, Ending::Succeed).await;
        assert_eq!((s, b["state"].as_str()), (200, Some("succeeded")), "finalize: {b}");
    }

    async fn cancel(&self, token: &str, run: &RunId) {
        let (s, b) = self.p.cancel(token, run.as_str()).await;
        assert_eq!(s, 200, "cancel: {b}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_table_is_enforced_through_the_api() {
    // 00:00:15 on the first of a month: day and month counters are fresh.
    let h = Harness::start("2026-03-01T00:00:15Z", &[]).await;
    let tiers = [("pub", "public"), ("ver", "verified"), ("int", "internal"), ("sht", "self-hosted-trusted")];
    for (id, tier) in tiers {
        h.tenant(id, tier).await;
    }
    // The limits in force are the tier table's, tier by tier, and the platform's 700.
    let (s, list) = h.p.call(&h.operator, Method::GET, "/v1/admin/quotas", None).await;
    assert_eq!(s, 200, "{list}");
    for (id, tier) in tiers {
        let t =
            list["tenants"].as_array().expect("tenants").iter().find(|t| t["tenant"] == id).expect("listed");
        assert_eq!(t["effective"], tier_table(tier), "tier {tier}");
    }
    assert_eq!(list["platform"]["concurrent_runs"], 700);

    // public: class S at most, 2 concurrent runs, 3,600 vCPU-s a day
    // (class S is 2 vCPUs: a run reserves 2 × its timeout).
    let owner = h.p.login("owner@pub.test").await;
    let ds =
        h.upload_as(&owner, "pub", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    for class in ["M", "L", "XL", "GPU"] {
        over_limit(
            &h.submit_as(&owner, "pub", &spec(&ds, class, 60)).await,
            "tenant limit max_resource_class is S",
        );
    }
    // Fan-out: public tenants run at most 16 tasks in one execution.
    let mut wide = spec(&ds, "S", 10);
    wide["tasks"] = json!(17);
    over_limit(
        &h.submit_as(&owner, "pub", &wide).await,
        "tenant limit max_fanout_tasks is 16 and the run has 17 tasks",
    );
    let day_left = 86_400 - 15;
    refused(
        &h.submit_as(&owner, "pub", &spec(&ds, "S", 1_801)).await,
        "QUOTA_EXCEEDED",
        "tenant limit vcpu_seconds_per_day is 3600",
        Some(day_left),
    );
    let a = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 1_000)).await);
    let b = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 10)).await);
    refused(
        &h.submit_as(&owner, "pub", &spec(&ds, "S", 10)).await,
        "QUOTA_EXCEEDED",
        "tenant limit concurrent_runs is 2",
        None,
    );
    h.cancel(&owner, &b).await;
    // 2,000 of 3,600 are reserved by `a`: 1,600 are left.
    refused(
        &h.submit_as(&owner, "pub", &spec(&ds, "S", 801)).await,
        "QUOTA_EXCEEDED",
        "vcpu_seconds_per_day",
        Some(day_left),
    );
    let c = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 800)).await);
    for r in [&a, &c] {
        h.cancel(&owner, r).await;
    }
    // 36,000 a month: ten days of 3,600 metered (1,800 s of class S each).
    for day in 0..10u64 {
        let owner = h.p.login("owner@pub.test").await;
        let r = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 1_800)).await);
        h.run_for(&r, Duration::from_secs(1_800)).await;
        let left = 86_400 - 15 - 1_800;
        refused(
            &h.submit_as(&owner, "pub", &spec(&ds, "S", 1)).await,
            "QUOTA_EXCEEDED",
            "vcpu_seconds_per_day",
            Some(left),
        );
        assert_eq!(h.usage_of("pub", "vcpu_seconds_per_month").await, 3_600 * (day + 1), "day {day}");
        h.clock.advance(Duration::from_secs(86_400 - 1_800));
    }
    // The eleventh day (March 11, 00:00:15): the month is spent; it resets on April 1.
    let owner = h.p.login("owner@pub.test").await;
    let month_left = 21 * 86_400 - 15;
    refused(
        &h.submit_as(&owner, "pub", &spec(&ds, "S", 1)).await,
        "QUOTA_EXCEEDED",
        "tenant limit vcpu_seconds_per_month is 36000",
        Some(month_left),
    );
    // 60 requests a minute: the 61st in the minute waits for the next one.
    for i in 0..60 {
        let a = h.upload_as(&owner, "pub", "x\n1\n").await;
        assert_eq!(a.0, 201, "upload {i}: {}", a.2);
    }
    refused(
        &h.upload_as(&owner, "pub", "x\n1\n").await,
        "RATE_LIMITED",
        "tenant limit requests_per_minute is 60",
        Some(45),
    );
    h.clock.advance(Duration::from_secs(45));
    assert_eq!(h.upload_as(&owner, "pub", "x\n1\n").await.0, 201, "a new minute");
    // 2 GiB of storage: stand in for 2 GiB of earlier uploads, then a byte more is refused.
    let used = h.usage_of("pub", "storage_bytes").await;
    h.add_storage("pub", i64::try_from(2 * GIB - used - 4).expect("fits")).await;
    refused(
        &h.upload_as(&owner, "pub", "x\n12\n").await,
        "QUOTA_EXCEEDED",
        "tenant limit storage_bytes is 2147483648",
        None,
    );
    assert_eq!(h.upload_as(&owner, "pub", "x\n1\n").await.0, 201, "exactly at the limit is allowed");

    // verified: class L at most, 20 concurrent, 86,400 vCPU-s a day (L is 8 vCPUs).
    let owner = h.p.login("owner@ver.test").await;
    let ds =
        h.upload_as(&owner, "ver", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    for class in ["XL", "GPU"] {
        over_limit(
            &h.submit_as(&owner, "ver", &spec(&ds, class, 60)).await,
            "tenant limit max_resource_class is L",
        );
    }
    refused(
        &h.submit_as(&owner, "ver", &spec(&ds, "L", 10_801)).await,
        "QUOTA_EXCEEDED",
        "tenant limit vcpu_seconds_per_day is 86400",
        Some(86_400 - 60),
    );
    for i in 0..20 {
        let class = ["S", "M", "L"][i % 3];
        admitted(&h.submit_as(&owner, "ver", &spec(&ds, class, 60)).await);
    }
    refused(
        &h.submit_as(&owner, "ver", &spec(&ds, "S", 60)).await,
        "QUOTA_EXCEEDED",
        "tenant limit concurrent_runs is 20",
        None,
    );
    // 600 requests a minute (the 20 submits and the upload above count).
    h.clock.advance(Duration::from_secs(60));
    for i in 0..600 {
        let a = h.upload_as(&owner, "ver", "x\n1\n").await;
        assert_eq!(a.0, 201, "upload {i}: {}", a.2);
    }
    refused(
        &h.upload_as(&owner, "ver", "x\n1\n").await,
        "RATE_LIMITED",
        "tenant limit requests_per_minute is 600",
        Some(60),
    );

    // internal: any class, 100 concurrent runs.
    let owner = h.p.login("owner@int.test").await;
    let ds =
        h.upload_as(&owner, "int", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    admitted(&h.submit_as(&owner, "int", &spec(&ds, "GPU", 86_400)).await);
    for _ in 1..100 {
        admitted(&h.submit_as(&owner, "int", &spec(&ds, "XL", 86_400)).await);
    }
    refused(
        &h.submit_as(&owner, "int", &spec(&ds, "S", 60)).await,
        "QUOTA_EXCEEDED",
        "tenant limit concurrent_runs is 100",
        None,
    );

    // self-hosted-trusted: no tenant limits, so the platform's 700 is the one that
    // stops it (100 of internal's and 20 of verified's are active).
    let owner = h.p.login("owner@sht.test").await;
    let ds =
        h.upload_as(&owner, "sht", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    for i in 0..580 {
        let a = h.submit_as(&owner, "sht", &spec(&ds, "GPU", 86_400)).await;
        assert_eq!(a.0, 201, "submit {i}: {}", a.2);
    }
    refused(
        &h.submit_as(&owner, "sht", &spec(&ds, "S", 60)).await,
        "QUOTA_EXCEEDED",
        "platform limit concurrent_runs is 700",
        None,
    );
    h.p.platform.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_counts_to_the_utc_day_and_month_boundaries() {
    // 30 s before the end of February 27 (2026 is not a leap year).
    let h = Harness::start("2026-02-27T23:59:30Z", &[]).await;
    let owner = h.tenant("p2", "public").await;
    h.set_quota("p2", json!({"vcpu_seconds_per_month": 5_000, "concurrent_runs": 10})).await;
    let ds = h.upload_as(&owner, "p2", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();

    // The day's 3,600 vCPU-s are reserved; the next run waits 30 s, for midnight.
    admitted(&h.submit_as(&owner, "p2", &spec(&ds, "S", 1_800)).await);
    refused(
        &h.submit_as(&owner, "p2", &spec(&ds, "S", 1)).await,
        "QUOTA_EXCEEDED",
        "tenant limit vcpu_seconds_per_day",
        Some(30),
    );
    let dry =
        h.p.call(
            &owner,
            Method::POST,
            "/v1/tenants/p2/projects/default/runs?dry_run=true",
            Some(spec(&ds, "S", 1)),
        )
        .await;
    assert_eq!((dry.0, &dry.1["admitted"]), (200, &json!(false)), "a dry run tells the same: {}", dry.1);
    assert_eq!(
        (&dry.1["refusal"]["limit"], &dry.1["refusal"]["retry_after_s"]),
        (&json!("vcpu_seconds_per_day"), &json!(30))
    );
    h.clock.advance(Duration::from_secs(29));
    refused(
        &h.submit_as(&owner, "p2", &spec(&ds, "S", 1)).await,
        "QUOTA_EXCEEDED",
        "vcpu_seconds_per_day",
        Some(1),
    );
    h.clock.advance(Duration::from_secs(1));

    // February 28, 00:00:00: a new day, the same month; 1,400 of the month's 5,000 are left.
    admitted(&h.submit_as(&owner, "p2", &spec(&ds, "S", 700)).await);
    let next_month = 86_400;
    refused(
        &h.submit_as(&owner, "p2", &spec(&ds, "S", 1)).await,
        "QUOTA_EXCEEDED",
        "tenant limit vcpu_seconds_per_month is 5000",
        Some(next_month),
    );
    h.clock.advance(Duration::from_secs(86_399));
    let owner = h.p.login("owner@p2.test").await;
    refused(
        &h.submit_as(&owner, "p2", &spec(&ds, "S", 1)).await,
        "QUOTA_EXCEEDED",
        "vcpu_seconds_per_month",
        Some(1),
    );
    h.clock.advance(Duration::from_secs(1));
    // March 1: the month resets.
    admitted(&h.submit_as(&owner, "p2", &spec(&ds, "S", 1)).await);

    // A token's budget resets with its own period: 10 vCPU-s a day.
    let (token, _) = h.budget_token(&owner, "p2").await;
    h.clock.advance(Duration::from_secs(86_400 - 100)); // March 1, 23:58:20
    admitted(&h.submit_as(&token, "p2", &spec(&ds, "S", 5)).await);
    refused(
        &h.submit_as(&token, "p2", &spec(&ds, "S", 1)).await,
        "QUOTA_EXCEEDED",
        "token limit budget_vcpu_seconds is 10",
        Some(100),
    );
    h.clock.advance(Duration::from_secs(100));
    admitted(&h.submit_as(&token, "p2", &spec(&ds, "S", 1)).await);
    h.p.platform.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spend_cap_stops_new_compute_for_non_internal_tenants_within_one_request() {
    let h = Harness::start("2026-06-15T10:00:00Z", &[]).await;
    let owner = h.tenant("pub", "public").await;
    let pub_ds =
        h.upload_as(&owner, "pub", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    let dev_ds = h.p.upload("x,y\n1,2\n2,3\n3,5\n").await;
    let dev = h.p.token().to_owned();

    // A cap a little above one 100 s run of class S (2 vCPU, 8 GiB).
    let one =
        mapi_cost::CURRENT.charge(mapi_domain::ResourceClass::S, 1, Duration::from_secs(100)).amount_micros;
    let cap = one + one / 2;
    let set =
        json!({"spend_cap_micros": cap, "spend_cap_period": "day", "reason": "incident 42: runaway spend"});
    let (s, b) = h.p.call(&h.operator, Method::PUT, "/v1/admin/kill-switches", Some(set)).await;
    assert_eq!(s, 200, "{b}");
    let (s, b) =
        h.p.call(&h.operator, Method::PUT, "/v1/admin/kill-switches", Some(json!({"spend_cap_micros": cap})))
            .await;
    assert_eq!(s, 400, "a kill switch needs a reason: {b}");

    // Below the cap, everyone starts compute; a public run waits in the queue.
    let waiting = admitted(&h.submit_as(&owner, "pub", &spec(&pub_ds, "S", 600)).await);
    let first = admitted(&h.submit_as(&dev, "dev", &spec(&dev_ds, "S", 600)).await);
    h.run_for(&first, Duration::from_secs(100)).await;
    let second = admitted(&h.submit_as(&dev, "dev", &spec(&dev_ds, "S", 600)).await);
    h.run_for(&second, Duration::from_secs(100)).await;

    // That finalization passed the cap: the very next request is refused
    // for the public tenant, and its queued run does not start.
    let day_left = 86_400 - 10 * 3_600 - 200;
    refused(
        &h.submit_as(&owner, "pub", &spec(&pub_ds, "S", 60)).await,
        "QUOTA_EXCEEDED",
        "platform limit spend_cap",
        Some(day_left),
    );
    let (s, b) = h.p.dispatch(&waiting, AttemptNo(1)).await;
    assert_eq!(s, 503, "no new compute starts: {b}");
    assert!(b["detail"].as_str().is_some_and(|d| d.contains("spend cap")), "{b}");
    let (_, run) = h.p.call(&owner, Method::GET, &format!("/v1/runs/{waiting}"), None).await;
    assert_eq!(run["state"], "queued", "the admitted run waits: {run}");
    assert_eq!(h.executor.submitted(), 2, "only the internal runs reached the executor");

    // The internal tenant keeps working.
    let third = admitted(&h.submit_as(&dev, "dev", &spec(&dev_ds, "S", 600)).await);
    h.run_for(&third, Duration::from_secs(10)).await;

    // The next UTC day the cap has room again and the queued run starts.
    h.clock.advance(Duration::from_secs(day_left));
    let (s, b) = h.p.dispatch(&waiting, AttemptNo(1)).await;
    assert_eq!((s, b["outcome"].as_str()), (200, Some("submitted")), "{b}");
    let owner = h.p.login("owner@pub.test").await;
    admitted(&h.submit_as(&owner, "pub", &spec(&pub_ds, "S", 60)).await);

    let operator = h.p.login(OPERATOR).await;
    let (s, view) = h.p.call(&operator, Method::GET, "/v1/admin/kill-switches", None).await;
    assert_eq!((s, &view["reason"]), (200, &json!("incident 42: runaway spend")), "{view}");
    let (s, log) = h.p.call(&operator, Method::GET, "/v1/admin/audit?action=kill_switch.set", None).await;
    assert_eq!(s, 200, "{log}");
    assert_eq!(log["items"].as_array().map(Vec::len), Some(1), "the change is audited: {log}");
    h.p.platform.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_is_admitted_against_the_limits_its_run_was() {
    let h = Harness::start("2026-04-20T08:00:00Z", &[]).await;
    let owner = h.tenant("pub", "public").await;
    h.set_quota("pub", json!({"concurrent_runs": 5})).await;
    let ds =
        h.upload_as(&owner, "pub", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    let attempt_of = |run: &RunId| {
        let (run, owner) = (run.clone(), owner.clone());
        let h = &h;
        async move {
            let (s, v) = h.p.call(&owner, Method::GET, &format!("/v1/runs/{run}"), None).await;
            assert_eq!(s, 200, "{v}");
            v
        }
    };
    let run_then = async |run: &RunId, wall: u64, ending: Ending| {
        let (s, b) = h.p.dispatch(run, AttemptNo(1)).await;
        assert_eq!(s, 200, "{b}");
        let started = h.now();
        h.clock.advance(Duration::from_secs(wall));
        let (s, b) = h.p.end_attempt(run, AttemptNo(1), 1, started, ending).await;
        assert_eq!((s, b["outcome"].as_str()), (200, Some("finalized")), "{b}");
    };

    // Out of memory on S: the retry would be on M, above the public tier's largest class.
    let oom = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 100)).await);
    run_then(&oom, 10, Ending::OutOfMemory).await;
    let v = attempt_of(&oom).await;
    assert_eq!(
        (v["state"].as_str(), v["error"]["code"].as_str()),
        (Some("failed"), Some("RESOURCE_EXHAUSTED")),
        "{v}"
    );
    assert!(v["error"]["message"].as_str().is_some_and(|m| m.contains("largest class S")), "{v}");

    // A crash retry that fits the day's 3,600 vCPU-s is started: 20 + 600 reserved.
    let fits = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 300)).await);
    run_then(&fits, 10, Ending::Crash).await;
    let v = attempt_of(&fits).await;
    assert_eq!((v["state"].as_str(), v["attempt"].as_u64()), (Some("queued"), Some(2)), "{v}");

    // One that would not fit fails instead: 900 s of S metered (1,800) plus
    // another 2,000 reserved would pass 3,600 with what is already used.
    let big = admitted(&h.submit_as(&owner, "pub", &spec(&ds, "S", 1_000)).await);
    run_then(&big, 900, Ending::Crash).await;
    let v = attempt_of(&big).await;
    assert_eq!(
        (v["state"].as_str(), v["error"]["code"].as_str()),
        (Some("failed"), Some("QUOTA_EXCEEDED")),
        "{v}"
    );
    assert!(
        v["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("tenant's vCPU-seconds limit for 2026-04-20")),
        "{v}"
    );

    // What is held is exactly the queued retry's 600 and what was metered.
    h.cancel(&owner, &fits).await;
    assert_eq!(h.usage_of("pub", "concurrent_runs").await, 0);
    assert_eq!(h.usage_of("pub", "vcpu_seconds_per_day").await, 20 + 20 + 1_800);
    h.p.platform.shutdown().await;
}

/// An item job is admitted by the code that admits a run: its items per job
/// (the tier's, then an operator's policy, then the platform's), the
/// tenant's vCPU-seconds, the token's budget, the requests per minute and
/// the spend cap each refuse it through the API, and every refusal of a
/// quota is audited as a quota denial. (The platform's cap is the size of
/// the request itself, refused while the body is read, as a body over the
/// byte limit is: not a quota decision, so not a denial.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_job_is_refused_by_each_limit_a_run_is() {
    use mapi_quota::counters::{self, field};
    let h = Harness::start("2026-06-15T10:00:00Z", &[("MAPI_JOB_MAX_ITEMS", "800")]).await;
    let owner = h.tenant("pub", "public").await;
    let tenant = mapi_domain::TenantId::parse("pub").expect("tenant");
    assert_eq!(h.job_as(&owner, "pub", 2).await.0, 201, "a small job is admitted");

    // Items per job: the platform's cap (800) is below the public tier's
    // 1,000. A job over it can never pass as it is, so it is 413, not a
    // 429 that generic clients would retry forever.
    too_large(&h.job_as(&owner, "pub", 801).await, "platform limit max_items_per_job is 800");
    h.set_quota("pub", json!({"max_items_per_job": 5})).await;
    too_large(&h.job_as(&owner, "pub", 6).await, "tenant limit max_items_per_job is 5");
    assert_eq!(h.job_as(&owner, "pub", 5).await.0, 201, "exactly at the operator's limit");

    // The tenant's vCPU-seconds of the day, once spent, refuse a job until the day ends.
    let day = counters::tenant_period(&tenant, mapi_quota::Period::Day, h.now());
    h.add_usage(&day, field::COMMITTED, 3_600_000).await;
    refused(
        &h.job_as(&owner, "pub", 1).await,
        "QUOTA_EXCEEDED",
        "tenant limit vcpu_seconds_per_day",
        Some(50_400),
    );
    h.add_usage(&day, field::COMMITTED, -3_600_000).await;

    // A token's budget, once spent, refuses its jobs.
    let (token, public_id) = h.budget_token(&owner, "pub").await;
    assert_eq!(h.job_as(&token, "pub", 1).await.0, 201, "the budget has room");
    let spent = counters::token_period(&public_id, mapi_quota::Period::Day, h.now());
    h.add_usage(&spent, field::COMMITTED, 10_000).await;
    refused(
        &h.job_as(&token, "pub", 1).await,
        "QUOTA_EXCEEDED",
        "token limit budget_vcpu_seconds is 10",
        Some(50_400),
    );

    // Requests per minute count jobs as they count runs.
    h.set_quota("pub", json!({"requests_per_minute": 1})).await;
    h.clock.advance(Duration::from_secs(60));
    assert_eq!(h.job_as(&owner, "pub", 1).await.0, 201);
    refused(
        &h.job_as(&owner, "pub", 1).await,
        "RATE_LIMITED",
        "tenant limit requests_per_minute is 1",
        Some(60),
    );
    h.set_quota("pub", json!({})).await;

    // The spend cap stops new jobs of all but internal tenants.
    let switch = json!({"spend_cap_micros": 1_000, "spend_cap_period": "day", "reason": "incident 7"});
    let (s, b) = h.p.call(&h.operator, Method::PUT, "/v1/admin/kill-switches", Some(switch)).await;
    assert_eq!(s, 200, "{b}");
    let platform_day = counters::platform_period(mapi_quota::Period::Day, h.now());
    h.add_usage(&platform_day, field::SPEND, 1_000).await;
    refused(&h.job_as(&owner, "pub", 1).await, "QUOTA_EXCEEDED", "platform limit spend_cap", Some(50_340));
    let dev = h.p.token().to_owned();
    assert_eq!(h.job_as(&dev, "dev", 1).await.0, 201, "the internal tenant keeps working");

    let (s, log) =
        h.p.call(&h.operator, Method::GET, "/v1/tenants/pub/audit?action=quota.denied&page_size=50", None)
            .await;
    assert_eq!(s, 200, "{log}");
    let denied: Vec<&str> = log["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|e| e["resource"] == "projects/pub/default/jobs")
        .filter_map(|e| e["detail"].as_str())
        .collect();
    assert_eq!(denied.len(), 5, "one denial per refusal of a quota: {log}");
    h.p.platform.shutdown().await;
}

impl Harness {
    /// Submits `body` as `token` to `tenant/default` with `Idempotency-Key:
    /// key`: status, whether it was a replay, body.
    async fn submit_keyed(&self, token: &str, tenant: &str, key: &str, body: &Value) -> (u16, bool, Value) {
        self.post_keyed(token, &format!("/v1/tenants/{tenant}/projects/default/runs"), key, body).await
    }

    /// Submits the item job `body` as `submit_keyed` submits a run.
    async fn job_keyed(&self, token: &str, tenant: &str, key: &str, body: &Value) -> (u16, bool, Value) {
        self.post_keyed(token, &format!("/v1/tenants/{tenant}/projects/default/jobs"), key, body).await
    }

    async fn post_keyed(&self, token: &str, path: &str, key: &str, body: &Value) -> (u16, bool, Value) {
        let resp = self
            .p
            .http
            .post(self.p.url(path))
            .bearer_auth(token)
            .header("idempotency-key", key)
            .json(body)
            .send()
            .await
            .expect("submit");
        let replayed = resp.headers().get("idempotency-replayed").is_some_and(|v| v == "true");
        let status = resp.status().as_u16();
        (status, replayed, resp.json().await.expect("json"))
    }
}

/// The retry of a submit whose answer was lost gets its run back, whatever
/// the quotas say by then: at the concurrency limit, with the day's and the
/// month's vCPU-seconds spent, past the requests of the minute and past the
/// spend cap. (A refusal would tell the client its run was not made, and a
/// resubmit under a new key would run the work twice.) A new key is still
/// refused by each limit, and the key with another request is still 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_retry_replays_its_run_at_every_limit() {
    use mapi_quota::counters::{self, field};
    let h = Harness::start("2026-06-15T10:00:00Z", &[]).await;
    let owner = h.tenant("pub", "public").await;
    let tenant = mapi_domain::TenantId::parse("pub").expect("tenant");
    let ds =
        h.upload_as(&owner, "pub", "x,y\n1,2\n2,3\n3,5\n").await.2["id"].as_str().expect("id").to_owned();
    let body = spec(&ds, "S", 60);
    let replays = |answer: (u16, bool, Value), run: &RunId, limit: &str| {
        assert_eq!((answer.0, answer.1), (200, true), "the retry at {limit} replays: {}", answer.2);
        assert_eq!(answer.2["id"], run.as_str(), "the same run, at {limit}");
    };

    h.set_quota("pub", json!({"concurrent_runs": 1})).await;
    let first = h.submit_keyed(&owner, "pub", "k-1", &body).await;
    assert_eq!((first.0, first.1), (201, false), "{}", first.2);
    let run = run_id(&first.2);
    replays(h.submit_keyed(&owner, "pub", "k-1", &body).await, &run, "concurrent_runs");
    refused(&h.submit_as(&owner, "pub", &body).await, "QUOTA_EXCEEDED", "tenant limit concurrent_runs", None);
    let other = h.submit_keyed(&owner, "pub", "k-1", &spec(&ds, "S", 61)).await;
    assert_eq!(other.0, 409, "the key with another request: {}", other.2);
    h.set_quota("pub", json!({})).await;

    let day = counters::tenant_period(&tenant, mapi_quota::Period::Day, h.now());
    h.add_usage(&day, field::COMMITTED, 3_600_000).await;
    replays(h.submit_keyed(&owner, "pub", "k-1", &body).await, &run, "vcpu_seconds_per_day");
    refused(&h.submit_as(&owner, "pub", &body).await, "QUOTA_EXCEEDED", "vcpu_seconds_per_day", Some(50_400));
    h.add_usage(&day, field::COMMITTED, -3_600_000).await;

    let month = counters::tenant_period(&tenant, mapi_quota::Period::Month, h.now());
    h.add_usage(&month, field::COMMITTED, 36_000_000).await;
    replays(h.submit_keyed(&owner, "pub", "k-1", &body).await, &run, "vcpu_seconds_per_month");
    let month_left = 15 * 86_400 + 14 * 3_600;
    refused(
        &h.submit_as(&owner, "pub", &body).await,
        "QUOTA_EXCEEDED",
        "vcpu_seconds_per_month",
        Some(month_left),
    );
    h.add_usage(&month, field::COMMITTED, -36_000_000).await;

    let minute = counters::tenant_minute(&tenant, h.now());
    h.add_usage(&minute, field::REQUESTS, 60).await;
    replays(h.submit_keyed(&owner, "pub", "k-1", &body).await, &run, "requests_per_minute");
    refused(&h.submit_as(&owner, "pub", &body).await, "RATE_LIMITED", "requests_per_minute", Some(60));
    h.clock.advance(Duration::from_secs(60));

    let switch = json!({"spend_cap_micros": 1_000, "spend_cap_period": "day", "reason": "incident 9"});
    let (s, b) = h.p.call(&h.operator, Method::PUT, "/v1/admin/kill-switches", Some(switch)).await;
    assert_eq!(s, 200, "{b}");
    let platform_day = counters::platform_period(mapi_quota::Period::Day, h.now());
    h.add_usage(&platform_day, field::SPEND, 1_000).await;
    replays(h.submit_keyed(&owner, "pub", "k-1", &body).await, &run, "spend_cap");
    refused(
        &h.submit_as(&owner, "pub", &body).await,
        "QUOTA_EXCEEDED",
        "platform limit spend_cap",
        Some(50_340),
    );
    assert_eq!(h.active("pub").await, 1, "the replays admitted nothing");
    h.p.platform.shutdown().await;
}

/// An item job's retry replays as a run's does: with the day's and the
/// month's vCPU-seconds spent, with the token's budget spent, past the
/// requests of the minute and past the spend cap; a new key is refused by
/// each limit, and the key with another body is 409.
#[tokio::test]
async fn an_idempotent_retry_replays_its_job_at_every_limit() {
    use mapi_quota::counters::{self, field};
    let h = Harness::start("2026-06-15T10:00:00Z", &[]).await;
    let owner = h.tenant("pub", "public").await;
    let (token, public_id) = h.budget_token(&owner, "pub").await;
    let tenant = mapi_domain::TenantId::parse("pub").expect("tenant");
    let body = json!({"method": "item.echo", "items": [1, 2, 3]});
    let first = h.job_keyed(&token, "pub", "j-1", &body).await;
    assert_eq!((first.0, first.1), (201, false), "{}", first.2);
    let job = first.2["id"].as_str().expect("job id").to_owned();
    let replays = |answer: (u16, bool, Value), limit: &str| {
        assert_eq!((answer.0, answer.1), (200, true), "the retry at {limit} replays: {}", answer.2);
        assert_eq!(answer.2["id"], job.as_str(), "the same job, at {limit}");
    };
    replays(h.job_keyed(&token, "pub", "j-1", &body).await, "no limit");
    let other = h.job_keyed(&token, "pub", "j-1", &json!({"method": "item.echo", "items": [1]})).await;
    assert_eq!(other.0, 409, "the key with another body: {}", other.2);
    let run_key = h.submit_keyed(&token, "pub", "j-1", &json!({"method": "describe"})).await;
    assert_ne!(run_key.0, 200, "a job's key does not replay on the runs route: {}", run_key.2);

    let day = counters::tenant_period(&tenant, mapi_quota::Period::Day, h.now());
    h.add_usage(&day, field::COMMITTED, 3_600_000).await;
    replays(h.job_keyed(&token, "pub", "j-1", &body).await, "vcpu_seconds_per_day");
    refused(&h.job_as(&token, "pub", 3).await, "QUOTA_EXCEEDED", "vcpu_seconds_per_day", Some(50_400));
    h.add_usage(&day, field::COMMITTED, -3_600_000).await;

    let month = counters::tenant_period(&tenant, mapi_quota::Period::Month, h.now());
    h.add_usage(&month, field::COMMITTED, 36_000_000).await;
    replays(h.job_keyed(&token, "pub", "j-1", &body).await, "vcpu_seconds_per_month");
    refused(
        &h.job_as(&token, "pub", 3).await,
        "QUOTA_EXCEEDED",
        "vcpu_seconds_per_month",
        Some(15 * 86_400 + 14 * 3_600),
    );
    h.add_usage(&month, field::COMMITTED, -36_000_000).await;

    let spent = counters::token_period(&public_id, mapi_quota::Period::Day, h.now());
    h.add_usage(&spent, field::COMMITTED, 10_000).await;
    replays(h.job_keyed(&token, "pub", "j-1", &body).await, "budget_vcpu_seconds");
    refused(&h.job_as(&token, "pub", 3).await, "QUOTA_EXCEEDED", "budget_vcpu_seconds", Some(50_400));
    h.add_usage(&spent, field::COMMITTED, -10_000).await;

    let minute = counters::tenant_minute(&tenant, h.now());
    h.add_usage(&minute, field::REQUESTS, 60).await;
    replays(h.job_keyed(&token, "pub", "j-1", &body).await, "requests_per_minute");
    refused(&h.job_as(&token, "pub", 3).await, "RATE_LIMITED", "requests_per_minute", Some(60));
    h.clock.advance(Duration::from_secs(60));

    let switch = json!({"spend_cap_micros": 1_000, "spend_cap_period": "day", "reason": "incident 10"});
    let (s, b) = h.p.call(&h.operator, Method::PUT, "/v1/admin/kill-switches", Some(switch)).await;
    assert_eq!(s, 200, "{b}");
    let platform_day = counters::platform_period(mapi_quota::Period::Day, h.now());
    h.add_usage(&platform_day, field::SPEND, 1_000).await;
    replays(h.job_keyed(&token, "pub", "j-1", &body).await, "spend_cap");
    refused(&h.job_as(&token, "pub", 3).await, "QUOTA_EXCEEDED", "platform limit spend_cap", Some(50_340));

    let jobs = mapi_store::Query::new(<mapi_jobs::JobDoc as mapi_schema::Doc>::COLLECTION).filter(
        "tenant",
        mapi_store::Op::Eq,
        "pub",
    );
    let stored = h.p.platform.state.store.query(&jobs, None).await.expect("jobs");
    assert_eq!(stored.len(), 1, "the replays made no job");
    h.p.platform.shutdown().await;
}

/// The tier's egress per month is metered where data leaves: each download
/// link counts its file's bytes, a link that would pass the month's limit
/// is refused naming it (no link, and nothing counted), the usage report
/// shows what left, and the limit resets with the UTC month.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_months_egress_refuses_download_links_naming_the_limit() {
    let h = Harness::start("2026-03-31T23:59:00Z", &[]).await;
    let owner = h.tenant("p2", "public").await;
    let csv = "x,y\n1,2\n2,3\n3,5\n";
    let size = csv.len() as u64;
    // Room for two links, not three.
    h.set_quota("p2", json!({"egress_bytes_per_month": 3 * size - 1})).await;
    let ds = h.upload_as(&owner, "p2", csv).await.2["id"].as_str().expect("id").to_owned();
    let link = || async {
        let path = format!("/v1/tenants/p2/projects/default/datasets/{ds}/url");
        let resp = h.p.http.post(h.p.url(&path)).bearer_auth(&owner).send().await.expect("link");
        answer(resp).await
    };
    for _ in 0..2 {
        let (s, _, body) = link().await;
        assert_eq!(s, 200, "{body}");
        assert!(body["url"].as_str().is_some_and(|u| !u.is_empty()), "{body}");
    }
    let limit = format!("tenant limit egress_bytes_per_month is {}", 3 * size - 1);
    refused(&link().await, "QUOTA_EXCEEDED", &limit, Some(60));
    assert_eq!(h.usage_of("p2", "egress_bytes_per_month").await, 2 * size, "a refused link counts nothing");
    // A new UTC month: the limit is whole again.
    h.clock.advance(Duration::from_secs(60));
    assert_eq!(link().await.0, 200);
    assert_eq!(h.usage_of("p2", "egress_bytes_per_month").await, size);
}
