//! Reads that do not grow with history: a store holding 100,000 runs and
//! 1,000,000 items' charges (their usage rollups and the ledger's minute
//! documents, as the item path writes them) answers a month's usage report and each page
//! of the runs listing reading a bounded number of documents, and its
//! housekeepers find nothing to do without reading the runs. Counted by
//! the SQLite adapter as it reads, so the figures repeat exactly; a read
//! path that scans history (as the usage report did, one document per
//! ledger entry) fails here at once.
//!
//! History from before rollups existed (ledger entries only) is still
//! reported, once: `history_before_rollups_is_counted_once`.

use std::time::Duration;

use mapi_domain::{JobId, ProjectId, ResourceClass, TenantId, Timestamp};
use mapi_schema::{ItemLedgerEntry, tx_create, usage};
use mapi_store::sqlite::StoreCounts;
use mapi_tests::{Options, TestPlatform};
use reqwest::Method;
use serde_json::{Value, json};

const RUNS: usize = 100_000;
const ITEMS: usize = 1_000_000;
/// Items per job of the filled history.
const ITEMS_PER_JOB: usize = 10_000;
/// Documents per fill commit.
const CHUNK: usize = 10_000;

/// The most documents one usage report may read: the instant rollups
/// start and a month of rollups (31 days × 4 shards), in one batch; the
/// caller and the quota nearness (the caller's token or session and
/// membership, the tenant, its policy and its counters' shards: 18 for a
/// session, 21 for a token).
/// Whatever the history. (It read one document per ledger entry before.)
const USAGE_DOCUMENTS: u64 = 1 + 31 * 4 + 21;
/// The most one page of 50 runs may read: the page and one more (to know
/// whether there is a next), and the caller (5).
const PAGE_DOCUMENTS: u64 = 51 + 5;

/// The most SQLite steps a housekeeper's queries may take when nothing is
/// past its retention: seeks of their indexes (21 steps measured). A read
/// of the 100,000 runs to find none takes millions.
const HOUSEKEEP_STEPS: u64 = 10_000;

fn counts(p: &TestPlatform) -> StoreCounts {
    p.platform.state.local.store.as_ref().expect("the SQLite store").counts()
}

/// Documents read by `call`.
async fn documents_read<F: Future<Output = (u16, Value)>>(p: &TestPlatform, call: F) -> (u64, Value) {
    let before = counts(p).documents_read;
    let (s, v) = call.await;
    assert_eq!(s, 200, "{v}");
    (counts(p).documents_read - before, v)
}

/// Writes `n` documents in commits of [`CHUNK`], each made by `one(i, tx)`.
async fn fill<F>(p: &TestPlatform, n: usize, one: F)
where
    F: Fn(usize, &mut mapi_store::Txn<'_>) -> Result<(), mapi_store::StoreError> + Sync,
{
    let store = &*p.platform.state.store;
    for start in (0..n).step_by(CHUNK) {
        let one = &one;
        mapi_store::transact::<_, mapi_store::StoreError, _, _>(store, |mut tx| async move {
            for i in start..(start + CHUNK).min(n) {
                one(i, &mut tx)?;
            }
            Ok(tx.finish(()))
        })
        .await
        .expect("fill");
    }
}

/// An item's charge as the item path makes it.
fn item_entry(tenant: &TenantId, project: &ProjectId, i: usize, at: Timestamp) -> ItemLedgerEntry {
    let job = JobId::parse(&format!("job_{:026}", i / ITEMS_PER_JOB)).expect("job id");
    let ms = 100 + (i as u64 % 900);
    let charge = mapi_cost::CURRENT.charge(ResourceClass::S, 1, Duration::from_millis(ms));
    let token = i.is_multiple_of(3).then(|| format!("{:012x}", i % 7));
    ItemLedgerEntry {
        tenant: tenant.clone(),
        project: project.clone(),
        job,
        idx: (i % ITEMS_PER_JOB) as u64,
        round: 1,
        charge,
        token,
        at,
    }
}

/// The charge the item path writes for [`item_entry`]'s item.
fn item_charge(e: &ItemLedgerEntry) -> mapi_metering::Charge {
    let payer = mapi_metering::Payer { tenant: &e.tenant, project: &e.project, token: e.token.as_deref() };
    let recorded = (e.charge.wall_ms, e.charge.amount_micros);
    mapi_metering::item(&payer, (&e.job, e.idx, e.round), recorded, e.at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_listings_read_a_bounded_number_of_documents_over_a_long_history() {
    // Every retention the run housekeeper sweeps is on, so each of its queries runs over the history.
    let retentions =
        [("MAPI_MODEL_VERSION_RETENTION_DAYS", "3650"), ("MAPI_RUN_RECORD_RETENTION_DAYS", "3650")];
    let p = TestPlatform::start_with(&retentions, Options { background: false, ..Options::default() }).await;
    let c = &p.platform.credentials;
    let (tenant, project) = (c.tenant.clone(), c.project.clone());
    let ds = p.upload(include_str!("../../examples/longley.csv")).await;
    let template = p.submit(json!({"method": "describe", "dataset": ds})).await;
    let stored = mapi_store::StoreExt::get_one(
        &*p.platform.state.store,
        &mapi_store::DocKey::new("runs", &template).expect("key"),
    )
    .await;
    let template = stored.expect("read").expect("the submitted run");
    // The fill writes ledger entries, as the item path does: after rollups start.
    p.platform.state.rollups_started().await.expect("rollups start");

    // History: 100,000 runs over the next month, 1,000,000 items metered in it.
    let month = Timestamp::parse_rfc3339("2027-01-01T00:00:00Z").expect("t");
    let spread = |i: usize, n: usize| {
        let span = 31 * 86_400 * 1_000_000i64;
        Timestamp::from_micros(month.as_micros() + span / n as i64 * i as i64)
    };
    fill(&p, RUNS, |i, tx| {
        let mut fields = template.fields.clone();
        let id = format!("run_{i:026}");
        fields.insert("id".into(), json!(id));
        fields.insert("created_at".into(), json!(spread(i, RUNS)));
        tx.create(&mapi_store::DocKey::new("runs", id)?, fields);
        Ok(())
    })
    .await;
    let mut expected = (0i64, 0u64);
    for i in 0..ITEMS {
        let e = item_entry(&tenant, &project, i, spread(i, ITEMS));
        expected = (expected.0 + e.charge.amount_micros, expected.1 + e.charge.vcpu_ms);
    }
    fill(&p, ITEMS, |i, tx| item_charge(&item_entry(&tenant, &project, i, spread(i, ITEMS))).write(tx)).await;

    // The month's usage, of the project and of the tenant, each grouping.
    let operator = p.login("admin@dev.local").await;
    let at = "period=month&at=2027-01-15T00:00:00Z";
    for group in ["", "&group_by=day", "&group_by=token", "&group_by=kind", "&group_by=resource_class"] {
        let path = format!("{}/usage?{at}{group}", p.project_path());
        let (read, project_usage) = documents_read(&p, p.call(p.token(), Method::GET, &path, None)).await;
        assert!(read <= USAGE_DOCUMENTS, "project usage{group}: {read} documents read > {USAGE_DOCUMENTS}");
        let path = format!("/v1/tenants/{tenant}/usage?{at}{group}");
        let (read, tenant_usage) = documents_read(&p, p.call(&operator, Method::GET, &path, None)).await;
        assert!(read <= USAGE_DOCUMENTS, "tenant usage{group}: {read} documents read > {USAGE_DOCUMENTS}");
        println!("usage{group}: {read} documents read by the tenant's report");
        for u in [&project_usage, &tenant_usage] {
            let t = &u["totals"];
            assert_eq!(t["items"], ITEMS as u64, "{t}");
            assert_eq!(
                (t["cost_micros"].as_i64(), t["vcpu_ms"].as_u64()),
                (Some(expected.0), Some(expected.1))
            );
            let groups = u["groups"].as_array().expect("groups");
            let items: u64 = groups.iter().map(|g| g["totals"]["items"].as_u64().expect("items")).sum();
            assert_eq!(items, if group.is_empty() { 0 } else { ITEMS as u64 }, "groups add up{group}");
        }
        if group == "&group_by=day" {
            assert_eq!(tenant_usage["groups"].as_array().map(Vec::len), Some(31), "a group per day");
        }
        if group == "&group_by=token" {
            // Seven tokens and people's sessions.
            assert_eq!(
                tenant_usage["groups"].as_array().map(Vec::len),
                Some(8),
                "{}",
                tenant_usage["groups"]
            );
        }
    }

    // The runs, page by page, newest first, and narrowed.
    let runs = format!("{}/runs?page_size=50", p.project_path());
    let mut path = runs.clone();
    for page in 0..3 {
        let (read, v) = documents_read(&p, p.call(p.token(), Method::GET, &path, None)).await;
        assert!(read <= PAGE_DOCUMENTS, "runs page {page}: {read} documents read > {PAGE_DOCUMENTS}");
        println!("runs page {page}: {read} documents read");
        let listed = v["runs"].as_array().expect("runs");
        assert_eq!(listed.len(), 50);
        if page == 0 {
            assert_eq!(listed[0]["id"], format!("run_{:026}", RUNS - 1), "newest first");
        }
        let next = v["next_page_token"].as_str().expect("a next page");
        path = format!("{runs}&page_token={next}");
    }
    // The housekeepers, each tick: the runs and jobs past their retention, of which there are none.
    let internal = p.platform.state.config.secrets.internal_token.clone();
    for path in [mapi_tasks::housekeep_runs::HOUSEKEEP_RUNS_PATH, mapi_tasks::housekeep::HOUSEKEEP_PATH] {
        let before = counts(&p).query_steps;
        let (status, v) = p.call(&internal, Method::POST, path, None).await;
        assert_eq!(status, 200, "{v}");
        let steps = counts(&p).query_steps - before;
        println!("{path}: {steps} query steps");
        assert!(steps <= HOUSEKEEP_STEPS, "{path} examined {steps} > {HOUSEKEEP_STEPS}: a scan of history");
    }
    for narrowed in
        ["&state=queued", "&created_after=2027-01-20T00:00:00Z", "&created_before=2027-01-02T00:00:00Z"]
    {
        let path = format!("{runs}{narrowed}");
        let (read, v) = documents_read(&p, p.call(p.token(), Method::GET, &path, None)).await;
        assert!(read <= PAGE_DOCUMENTS, "runs{narrowed}: {read} documents read > {PAGE_DOCUMENTS}");
        assert_eq!(v["runs"].as_array().map(Vec::len), Some(50), "runs{narrowed}");
    }
    p.platform.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_before_rollups_is_counted_once() {
    let p = TestPlatform::start_with(&[], Options { background: false, ..Options::default() }).await;
    let c = &p.platform.credentials;
    let (tenant, project) = (c.tenant.clone(), c.project.clone());
    let store = &*p.platform.state.store;
    let cost = |es: &[ItemLedgerEntry]| es.iter().map(|e| e.charge.amount_micros).sum::<i64>();
    // The month's report (around `at`) counts exactly `entries` of it.
    let check = async |at: Timestamp, entries: &[&ItemLedgerEntry], when: &str| {
        let path = format!("{}/usage?period=month&at={}&group_by=day", p.project_path(), at.to_rfc3339());
        let (_, u) = documents_read(&p, p.call(p.token(), Method::GET, &path, None)).await;
        let start = Timestamp::parse_rfc3339(u["start"].as_str().expect("start")).expect("t");
        let end = Timestamp::parse_rfc3339(u["end"].as_str().expect("end")).expect("t");
        let within: Vec<ItemLedgerEntry> =
            entries.iter().filter(|e| e.at >= start && e.at < end).map(|e| (*e).clone()).collect();
        assert_eq!(u["totals"]["items"], within.len() as u64, "{when}, {at:?}: {}", u["totals"]);
        assert_eq!(u["totals"]["cost_micros"], cost(&within), "{when}, {at:?}");
    };
    // Entries of the version before (no rollup) in the hour before now.
    let now = p.platform.state.clock.now().as_secs();
    let old: Vec<ItemLedgerEntry> = (0..40)
        .map(|i| item_entry(&tenant, &project, i, Timestamp::from_secs(now - 3_600 + 60 * i as i64)))
        .collect();
    let old_ref = &old;
    mapi_store::transact::<_, mapi_store::StoreError, _, _>(store, |mut tx| async move {
        for e in old_ref {
            tx_create(&mut tx, e)?;
        }
        Ok(tx.finish(()))
    })
    .await
    .expect("old entries");
    // Nothing wrote a rollup yet: the ledgers are all there is, and are read.
    assert_eq!(usage::RollupsSince::read(store).await.expect("read"), None);
    for at in [now - 3_600, now] {
        check(Timestamp::from_secs(at), &old.iter().collect::<Vec<_>>(), "before rollups").await;
    }
    // This version's entries, with their rollups, in the hour after.
    let since = p.platform.state.rollups_started().await.expect("rollups start");
    assert!(old.iter().all(|e| e.at < since), "the old entries are before rollups start");
    let new: Vec<ItemLedgerEntry> = (40..70)
        .map(|i| item_entry(&tenant, &project, i, Timestamp::from_secs(since.as_secs() + 60 * i as i64)))
        .collect();
    let new_ref = &new;
    mapi_store::transact::<_, mapi_store::StoreError, _, _>(store, |mut tx| async move {
        for e in new_ref {
            item_charge(e).write(&mut tx)?;
        }
        Ok(tx.finish(()))
    })
    .await
    .expect("new entries");
    // Months around `since`, whichever side of a boundary the hours fall:
    // each entry once, from the ledger or from a rollup.
    let all: Vec<&ItemLedgerEntry> = old.iter().chain(&new).collect();
    for at in [since.as_secs() - 3_600, since.as_secs(), since.as_secs() + 3_600] {
        check(Timestamp::from_secs(at), &all, "with rollups").await;
    }
    p.platform.shutdown().await;
}
