//! Cost budgets, held as counts: what one submit, one item of a job and one
//! pushed event cost the embedded adapters (documents read and written,
//! commits, SQLite write transactions — each one sync of its file — object
//! files), counted by the adapters themselves as it happens. Counts, not
//! timings, so they repeat exactly and CI cannot flake; a change that
//! spends more fails here, and raising a budget is a visible diff with its
//! reason beside it.
//!
//! The counts are upper bounds where group commit can merge work (several
//! commits in one transaction), and exact where nothing can.

use std::time::Duration;

use mapi_objects::fs::ObjectCounts;
use mapi_queue::sqlite::Deliverer;
use mapi_store::sqlite::StoreCounts;
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

/// Everything the embedded adapters have done so far.
#[derive(Clone, Copy, Debug)]
struct Spent {
    store: StoreCounts,
    queue_transactions: u64,
    objects: ObjectCounts,
}

fn spent(p: &TestPlatform) -> Spent {
    let local = &p.platform.state.local;
    Spent {
        store: local.store.as_ref().expect("the SQLite store").counts(),
        queue_transactions: local.queue.as_ref().expect("the SQLite queue").transactions(),
        objects: local.objects.as_ref().expect("the local buckets").data.counts(),
    }
}

/// `after - before`, field by field.
fn since(before: Spent, after: Spent) -> Spent {
    let (b, a) = (before.store, after.store);
    Spent {
        store: StoreCounts {
            reads: a.reads - b.reads,
            documents_read: a.documents_read - b.documents_read,
            query_steps: a.query_steps - b.query_steps,
            commits: a.commits - b.commits,
            documents_written: a.documents_written - b.documents_written,
            transactions: a.transactions - b.transactions,
        },
        queue_transactions: after.queue_transactions - before.queue_transactions,
        objects: ObjectCounts {
            puts: after.objects.puts - before.objects.puts,
            files: after.objects.files - before.objects.files,
            transactions: after.objects.transactions - before.objects.transactions,
        },
    }
}

/// Nothing runs in the background: only the requests the test makes spend.
async fn quiet(extra: &[(&str, &str)]) -> TestPlatform {
    TestPlatform::start_with(extra, Options { background: false, ..Options::default() }).await
}

/// What one run submit may cost, for a tenant with every limit (a
/// `verified` tenant under a scoped token with its own budget).
mod submit {
    /// Read calls, each one snapshot: the caller (token, membership), the
    /// run's context (tenant, project, dataset, policy, kill switches), the
    /// counters its limits need.
    pub const READS: u64 = 5;
    /// Documents those reads looked up: mostly counter shards (16 for the
    /// platform's slots, 4 for each of the tenant's four counters and the
    /// token's, each with its legacy document). It was 84 while the
    /// platform's day and month spend were read by every submit.
    pub const DOCUMENTS_READ: u64 = 50;
    /// While a spend cap is set: one more read, of the platform's spend in
    /// the cap's period (16 shards and the legacy document).
    pub const CAPPED_READS: u64 = READS + 1;
    pub const CAPPED_DOCUMENTS_READ: u64 = DOCUMENTS_READ + 17;
    /// The run, its first attempt, the reservations and the audit entry, in
    /// one commit.
    pub const COMMITS: u64 = 1;
    pub const DOCUMENTS_WRITTEN: u64 = 11;
    /// Durable syncs: the store's commit (`mapi.db`) and the queue's
    /// dispatch task (`queue.db`).
    pub const SYNCS: u64 = 2;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submit_costs_at_most_its_budget() {
    let p = quiet(&[("MAPI_DEV_ACCOUNTS", "admin@dev.local,dev@dev.local,owner@acme.test")]).await;
    let operator = p.login("admin@dev.local").await;
    let owner = p.create_tenant(&operator, "acme", "verified").await;
    let body = json!({"name": "ci", "scopes": ["runs:create", "datasets:write"], "budget_vcpu_seconds": 100000, "budget_period": "day"});
    let (s, tok) = p.call(&owner, Method::POST, "/v1/tenants/acme/projects/default/tokens", Some(body)).await;
    assert_eq!(s, 201, "{tok}");
    let token = tok["secret"].as_str().expect("secret").to_owned();
    let ds = p.upload_as(&token, "/v1/tenants/acme/projects/default", "x,y\n1,2\n2,4\n3,7\n").await;
    let run = json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "y"}});
    let path = "/v1/tenants/acme/projects/default/runs";
    // The first submit warms what is read once per process (the tier's
    // defaults, the key set); the second is what every submit costs.
    let (s, v) = p.call(&token, Method::POST, path, Some(run.clone())).await;
    assert_eq!(s, 201, "{v}");
    let before = spent(&p);
    let (s, v) = p.call(&token, Method::POST, path, Some(run.clone())).await;
    assert_eq!(s, 201, "{v}");
    let cost = since(before, spent(&p));
    let st = cost.store;
    println!("one submit: {cost:?}");
    assert!(st.reads <= submit::READS, "read calls per submit {} > {}", st.reads, submit::READS);
    assert!(
        st.documents_read <= submit::DOCUMENTS_READ,
        "documents read per submit {} > {}",
        st.documents_read,
        submit::DOCUMENTS_READ
    );
    assert_eq!(st.commits, submit::COMMITS, "commits per submit");
    assert!(
        st.documents_written <= submit::DOCUMENTS_WRITTEN,
        "documents written per submit {}",
        st.documents_written
    );
    let syncs = st.transactions + cost.queue_transactions;
    assert!(syncs <= submit::SYNCS, "syncs per submit {syncs} > {}", submit::SYNCS);
    assert_eq!(cost.objects.files, 0, "a submit writes no object");

    let cap =
        json!({"spend_cap_micros": 1_000_000_000, "spend_cap_period": "month", "reason": "budget test"});
    let (s, v) = p.call(&operator, Method::PUT, "/v1/admin/kill-switches", Some(cap)).await;
    assert_eq!(s, 200, "{v}");
    let before = spent(&p);
    let (s, v) = p.call(&token, Method::POST, path, Some(run)).await;
    assert_eq!(s, 201, "{v}");
    let capped = since(before, spent(&p)).store;
    println!("one submit under a spend cap: {capped:?}");
    assert_eq!((capped.reads, capped.documents_read), (st.reads + 1, st.documents_read + 17), "the spend");
    assert!(capped.reads <= submit::CAPPED_READS && capped.documents_read <= submit::CAPPED_DOCUMENTS_READ);
}

/// What one item of a job may cost once it runs, the fan-out and the
/// job's end shared out over its items.
mod item {
    /// Store commits per item: its marker and counts.
    pub const COMMITS: f64 = 1.05;
    /// Durable syncs of the store and the queue per item, at most: the
    /// store's commit, the queue's lease and outcome of the delivery; group
    /// commit only lowers it.
    pub const SYNCS: f64 = 3.1;
    /// Objects written per item: none of its own (its end, which holds its
    /// result or error, its usage and its log line, is in its marker; it
    /// was an object, and before that three), only the job's manifest and
    /// chunk shared out.
    pub const OBJECTS: f64 = 0.01;
    /// Object files left per item: likewise the manifest's and chunk's share.
    pub const FILES: f64 = 0.01;
    /// Syncs of the object metadata file per item: one per object written.
    pub const OBJECT_SYNCS: f64 = 0.01;
    /// Bytes of the store's pages in use per item, beyond the item's own
    /// result: its marker (with its end's log line) and its three index
    /// entries, the job's documents and the ledger's minute documents
    /// shared out. 913 measured (1,589 when each item had a ledger
    /// document of its own, with two index entries).
    pub const STORED_BYTES: f64 = 1000.0;
}

const ITEMS: usize = 200;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_item_costs_at_most_its_budget() {
    let p = quiet(&[]).await;
    let queue = p.platform.state.local.queue.as_ref().expect("the embedded queue").clone();
    let state = &p.platform.state;
    let deliverer = Deliverer::new(
        queue,
        reqwest::Client::new(),
        &p.platform.url,
        Some(state.config.secrets.internal_token.clone()),
        state.metrics.clone(),
    );
    let items: Vec<Value> = (0..ITEMS).map(|i| json!({"n": i})).collect();
    let sqlite = p.platform.state.local.store.as_ref().expect("the SQLite store").clone();
    let stored_before = sqlite.stored_bytes().expect("stored bytes");
    let before = spent(&p);
    let delivering = tokio::spawn(deliverer.run(std::future::pending()));
    let id = p.submit_job(p.token(), "dev", json!({"method": "item.echo", "items": items})).await;
    let job = p.wait_job(p.token(), &id, Duration::from_secs(120)).await;
    delivering.abort();
    assert_eq!(job["state"], "succeeded", "{job}");
    let cost = since(before, spent(&p));
    // item.echo answers the item: `{"n":…}`, 7 to 9 bytes of JSON.
    let results: u64 = (0..ITEMS).map(|i| json!({"n": i}).to_string().len() as u64).sum();
    let stored = sqlite.stored_bytes().expect("stored bytes") - stored_before - results;
    println!("a job of {ITEMS} items: {cost:?}, {stored} stored bytes beyond the results");
    let per = |n: u64| n as f64 / ITEMS as f64;
    let st = cost.store;
    let checks = [
        ("store commits", per(st.commits), item::COMMITS),
        ("syncs of the store and the queue", per(st.transactions + cost.queue_transactions), item::SYNCS),
        ("objects written", per(cost.objects.puts), item::OBJECTS),
        ("object files", per(cost.objects.files), item::FILES),
        ("syncs of the object metadata", per(cost.objects.transactions), item::OBJECT_SYNCS),
        ("stored bytes beyond the result", per(stored), item::STORED_BYTES),
    ];
    let over: Vec<String> = checks
        .iter()
        .filter(|(_, got, budget)| got > budget)
        .map(|(what, got, budget)| format!("{what} per item: {got:.2} > {budget}"))
        .collect();
    assert!(over.is_empty(), "over budget:\n  {}", over.join("\n  "));
}

/// What one score of an endpoint may cost: authorized, admitted, forwarded
/// and metered.
mod score {
    /// Read calls: the caller (token, membership), the tenant, the
    /// endpoint, admission's batch (policy, kill switches, counter shards),
    /// and the metering commit's statistics and ledger shards.
    pub const READS: u64 = 7;
    /// Documents those reads looked up: mostly admission's counter shards
    /// (4 for each of the tenant's total, minute, day and month counters,
    /// each with its legacy document).
    pub const DOCUMENTS_READ: u64 = 30;
    /// The statistics, the ledger entry and the usage counters, in one commit.
    pub const COMMITS: u64 = 1;
    /// Writes (a field increment is one): the statistics' and the ledger's
    /// shard, the minute's request, and the charge (vCPU charged and
    /// committed, spend) of the tenant's, the platform's and the token's day
    /// and month, and the score's line of the tenant's and the project's
    /// usage rollups (the score, vCPU, memory and the cost when its rounded
    /// amount moves), and the answer's bytes on the tenant's month counter
    /// (its egress, in the shard the charge writes): 2 + 1 + 6 × 3 + 2 × 4 +
    /// 1, on eleven documents.
    pub const DOCUMENTS_WRITTEN: u64 = 30;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_score_costs_at_most_its_budget() {
    // Ticks only when asked, so nothing but the score spends while it is counted.
    let p = TestPlatform::start(&[("MAPI_TICK_INTERVAL_S", "3600")]).await;
    let ds = p.upload(include_str!("../../examples/longley.csv")).await;
    let id = p.submit(json!({"method": "tabular.linear", "dataset": ds, "params": {"y": "employed"}})).await;
    let internal = p.platform.state.config.secrets.internal_token.clone();
    let ticked_until = async |what: &str, path: &str, done: &dyn Fn(&Value) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(90);
        loop {
            let (s, t) = p.call(&internal, Method::POST, "/internal/tick", Some(json!({}))).await;
            assert_eq!(s, 200, "{t}");
            let (_, v) = p.call(p.token(), Method::GET, path, None).await;
            if done(&v) {
                return v;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {v:#}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let run_path = format!("/v1/runs/{id}");
    let final_states = ["succeeded", "failed", "cancelled"];
    let run =
        ticked_until("the fit ends", &run_path, &|r| final_states.iter().any(|s| r["state"] == *s)).await;
    assert_eq!(run["state"], "succeeded", "{run:#}");
    let endpoints = format!("{}/endpoints", p.project_path());
    let body = json!({"alias": "budget", "model_version": run["model_version"]});
    let (s, e) = p.call(p.token(), Method::POST, &endpoints, Some(body)).await;
    assert_eq!(s, 202, "{e}");
    ticked_until("the endpoint is ready", &format!("{endpoints}/budget"), &|e| e["status"] == "ready").await;
    let row = json!({"rows": [{"gnp_deflator": 100.0, "gnp": 400000.0, "unemployed": 3000.0, "armed_forces": 2500.0, "population": 117000.0, "year": 1955.0}]});
    let path = format!("{endpoints}/budget:score");
    // The first score wakes the server and warms what is read once per process.
    let (s, v) = p.call(p.token(), Method::POST, &path, Some(row.clone())).await;
    assert_eq!(s, 200, "{v}");
    let before = spent(&p);
    let (s, v) = p.call(p.token(), Method::POST, &path, Some(row)).await;
    assert_eq!(s, 200, "{v}");
    let st = since(before, spent(&p)).store;
    println!("one score: {st:?}");
    assert!(st.reads <= score::READS, "read calls per score {} > {}", st.reads, score::READS);
    assert!(
        st.documents_read <= score::DOCUMENTS_READ,
        "documents read per score {} > {}",
        st.documents_read,
        score::DOCUMENTS_READ
    );
    assert_eq!(st.commits, score::COMMITS, "commits per score");
    assert!(
        st.documents_written <= score::DOCUMENTS_WRITTEN,
        "documents written per score {} > {}",
        st.documents_written,
        score::DOCUMENTS_WRITTEN
    );
}
