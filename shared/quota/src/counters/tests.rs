//! The counters' shards: ids, sums, picks, takes under a limit (also racing,
//! on SQLite), releases and renewals into the shards taken, legacy documents.

use std::sync::Arc;

use mapi_store::sqlite::{Durability, SqliteStore};
use mapi_store::{Store, StoreError, transact};

use super::*;

fn open(dir: &tempfile::TempDir) -> Arc<SqliteStore> {
    let clock: Arc<dyn mapi_clock::Clock> = Arc::new(mapi_clock::SystemClock);
    Arc::new(
        SqliteStore::open(&dir.path().join("store.db"), clock, &[], Durability::Normal).expect("open store"),
    )
}

async fn commit(store: &dyn Store, bumps: &Bumps) -> Result<(), StoreError> {
    transact::<_, StoreError, _, _>(store, |mut tx| async move {
        bumps.apply(&mut tx)?;
        Ok(tx.finish(()))
    })
    .await
}

async fn one(store: &dyn Store, name: &str) -> Sharded {
    read_all(store, &[name.to_owned()]).await.expect("read").pop().expect("one counter")
}

/// What a metered charge adds (the metering crate's bumps): charged and
/// committed vCPU-ms and spend, in the shard `seed` picks.
fn charged(names: &[String], seed: &str, vcpu_ms: i64, micros: i64) -> Bumps {
    let mut b = Bumps::default();
    for name in names {
        b.add_to(name, seed, field::CHARGED, vcpu_ms);
        b.add_to(name, seed, field::COMMITTED, vcpu_ms);
        b.add_to(name, seed, field::SPEND, micros);
    }
    b
}

fn doc(active: i64) -> CounterDoc {
    CounterDoc { active_runs: active, ..CounterDoc::default() }
}

#[test]
fn each_counter_has_its_shards_and_its_legacy_document() {
    assert_eq!(shards_of(PLATFORM), PLATFORM_SHARDS);
    assert_eq!(shards_of("platform@2026-11-30"), PLATFORM_SHARDS);
    assert_eq!(shards_of("tenant:acme"), OWNER_SHARDS);
    assert_eq!(shards_of("token:1a2b@2026-11"), OWNER_SHARDS);
    // A tenant named like the platform is still a tenant.
    assert_eq!(shards_of("tenant:platform"), OWNER_SHARDS);
    let ids = Sharded::doc_ids("tenant:acme@2026-11");
    assert_eq!(ids.len(), 1 + OWNER_SHARDS as usize);
    assert_eq!(ids[0], "tenant:acme@2026-11");
    assert_eq!(ids[3], "tenant:acme@2026-11#2");
    for id in &ids {
        assert_eq!(counter_of(id), "tenant:acme@2026-11");
    }
    assert_eq!(counter_of("tenant:a#b"), "tenant:a#b");
    assert_eq!(describe("tenant:acme@2026-11-30#3"), "the tenant's vCPU-seconds limit for 2026-11-30 (UTC)");
}

#[test]
fn the_shard_is_a_function_of_the_seed() {
    assert_eq!(pick("run-1", 16), pick("run-1", 16));
    // FNV-1a of the empty seed is its offset basis.
    assert_eq!(u64::from(pick("", 16)), 0xcbf2_9ce4_8422_2325 % 16);
    let mut seen = [0u32; 16];
    for i in 0..1600 {
        seen[pick(&format!("01JRUN{i:06}"), 16) as usize] += 1;
    }
    // Every shard is used, none by more than twice its fair part.
    assert!(seen.iter().all(|&n| n > 0 && n < 200), "{seen:?}");
    assert_eq!(pick("x", 0), 0);
}

#[test]
fn shares_add_up_to_the_limit_less_the_legacy_part() {
    let c = Sharded { name: "tenant:t".into(), legacy: doc(3), shards: vec![CounterDoc::default(); 4] };
    let shares: Vec<i64> = (0..4).map(|k| c.share(field::ACTIVE, 10, k)).collect();
    assert_eq!(shares, vec![2, 2, 2, 1]);
    assert_eq!(c.share(field::ACTIVE, 2, 0), 0, "the legacy part is past the limit");
}

#[test]
fn a_small_limit_is_not_refused_early() {
    // 2 runs over 4 shards: shares 1, 1, 0, 0. Whatever the seed, the first
    // two takes find room and the third finds none.
    for seed in ["a", "b", "c", "d", "e"] {
        let mut c =
            Sharded { name: "tenant:t".into(), legacy: CounterDoc::default(), shards: vec![doc(0); 4] };
        for _ in 0..2 {
            let takes = c.take(field::ACTIVE, 1, Some(2), seed).expect("room");
            assert_eq!(takes.len(), 1);
            let k =
                takes[0].shard.rsplit_once('#').and_then(|(_, k)| k.parse::<usize>().ok()).expect("shard");
            assert!(c.shards[k].active_runs < takes[0].at_most.expect("share"));
            c.shards[k].active_runs += 1;
        }
        assert_eq!(c.total().active_runs, 2);
        assert_eq!(c.take(field::ACTIVE, 1, Some(2), seed), None);
    }
}

#[test]
fn a_large_take_is_split_over_the_shards_with_room() {
    let mut c = Sharded {
        name: "tenant:t@2026-11".into(),
        legacy: CounterDoc::default(),
        shards: vec![CounterDoc::default(); 4],
    };
    c.shards[1].committed_vcpu_ms = 20;
    let takes = c.take(field::COMMITTED, 70, Some(100), "seed").expect("room");
    assert_eq!(takes.iter().map(|t| t.amount).sum::<i64>(), 70);
    for t in &takes {
        assert_eq!(t.at_most, Some(25));
        assert!(t.amount <= 25);
    }
    // 80 is free in all (100 less 20): 81 is not.
    assert!(c.take(field::COMMITTED, 80, Some(100), "seed").is_some());
    assert_eq!(c.take(field::COMMITTED, 81, Some(100), "seed"), None);
    // No limit: all of it on the seed's shard.
    let free = c.take(field::COMMITTED, 1_000, None, "seed").expect("no limit");
    assert_eq!(
        free,
        vec![Take { shard: shard_id("tenant:t@2026-11", pick("seed", 4)), amount: 1_000, at_most: None }]
    );
}

#[tokio::test]
async fn reads_add_up_the_shards_and_the_legacy_document() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let mut b = Bumps::default();
    b.add("platform", field::ACTIVE, 5);
    b.add("platform#0", field::ACTIVE, 1);
    b.add("platform#15", field::ACTIVE, 2);
    b.add("platform#7", field::SPEND, 9);
    // Another counter's documents are not counted.
    b.add("platform@2026-11", field::ACTIVE, 100);
    b.add("tenant:platform#1", field::ACTIVE, 100);
    commit(&*store, &b).await.expect("commit");
    let total = read(&*store, PLATFORM).await.expect("read");
    assert_eq!((total.active_runs, total.spend_micros), (8, 9));
    let c = one(&*store, PLATFORM).await;
    assert_eq!((c.legacy.active_runs, c.shards.len(), c.shards[15].active_runs), (5, 16, 2));
    assert_eq!(read(&*store, "tenant:nobody").await.expect("read"), CounterDoc::default());
}

/// One admission as the submit path does it: read, take, commit guarded,
/// and on a lost race read and take again. The takes when admitted.
async fn admit_one(store: &dyn Store, name: &str, limit: i64, seed: &str) -> Option<Vec<Take>> {
    for _ in 0..1000 {
        let c = one(store, name).await;
        if c.total().active_runs + 1 > limit {
            return None;
        }
        let takes = c.take(field::ACTIVE, 1, Some(limit), seed)?;
        let mut b = Bumps::default();
        b.take(field::ACTIVE, &takes);
        match commit(store, &b).await {
            Ok(()) => return Some(takes),
            Err(StoreError::LimitReached { .. }) => tokio::task::yield_now().await,
            Err(e) => panic!("commit: {e}"),
        }
    }
    panic!("no admission settled in 1000 tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_admissions_take_exactly_the_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { admit_one(&*store, "tenant:t", 20, &format!("run-{i}")).await })
        })
        .collect();
    let mut admitted = 0;
    for h in handles {
        if h.await.expect("task").is_some() {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 20);
    let c = one(&*store, "tenant:t").await;
    assert_eq!(c.total().active_runs, 20);
    for (k, s) in c.shards.iter().enumerate() {
        assert!(s.active_runs <= c.share(field::ACTIVE, 20, k), "shard {k} past its share: {c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_platform_limit_holds_across_tenants_and_frees_on_release() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let handles: Vec<_> = (0..40)
        .map(|i| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { admit_one(&*store, PLATFORM, 17, &format!("run-{i}")).await })
        })
        .collect();
    let mut slots = Vec::new();
    for h in handles {
        if let Some(takes) = h.await.expect("task") {
            slots.extend(takes.into_iter().map(|t| t.shard));
        }
    }
    assert_eq!(slots.len(), 17);
    assert_eq!(read(&*store, PLATFORM).await.expect("read").active_runs, 17);
    let r = Reservation { vcpu_ms: 0, budgets: vec![], at_most: vec![], slots, holds: vec![] };
    commit(&*store, &Bumps::release(&r)).await.expect("release");
    let c = one(&*store, PLATFORM).await;
    assert!(c.shards.iter().all(|s| s.active_runs == 0), "every slot back in its shard: {c:?}");
    assert!(admit_one(&*store, PLATFORM, 17, "again").await.is_some());
}

#[tokio::test]
async fn legacy_counts_limit_admissions_and_take_releases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    // Written before sharding: 3 runs hold the tenant's single document.
    let mut before = Bumps::default();
    before.add("tenant:t", field::ACTIVE, 3);
    before.add("tenant:t@2026-11", field::RESERVED, 300);
    before.add("tenant:t@2026-11", field::COMMITTED, 300);
    commit(&*store, &before).await.expect("commit");
    assert!(admit_one(&*store, "tenant:t", 4, "new").await.is_some());
    assert_eq!(admit_one(&*store, "tenant:t", 4, "newer").await, None, "3 legacy + 1 is the limit");
    // An old reservation names the whole counters: it gives back into them.
    let old = Reservation {
        vcpu_ms: 100,
        budgets: vec!["tenant:t@2026-11".into()],
        at_most: vec![Some(1_000)],
        slots: vec!["tenant:t".into()],
        holds: vec![],
    };
    commit(&*store, &Bumps::release(&old)).await.expect("release");
    let c = one(&*store, "tenant:t").await;
    assert_eq!((c.legacy.active_runs, c.total().active_runs), (2, 3));
    let month = one(&*store, "tenant:t@2026-11").await;
    assert_eq!((month.legacy.reserved_vcpu_ms, month.total().committed_vcpu_ms), (200, 200));
    assert!(admit_one(&*store, "tenant:t", 4, "newer").await.is_some());
}

/// Renews `r` as the meter does: the budgets read, then renewed with the
/// charge `pending` of the same commit, and committed.
async fn renew(
    store: &dyn Store,
    r: &mut Reservation,
    vcpu_ms: u64,
    pending: &Bumps,
) -> Result<(), StoreError> {
    let read = read_all(store, &r.hold_counters()).await?;
    let mut next = r.clone();
    let mut b = pending.clone();
    b.extend(Bumps::renew(&mut next, vcpu_ms, &read, pending, "run")?);
    commit(store, &b).await?;
    *r = next;
    Ok(())
}

#[tokio::test]
async fn budgets_are_held_renewed_and_given_back_in_their_shards() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let name = "token:abc@2026-11";
    let c = one(&*store, name).await;
    // 100 over 4 shards: 25 each; 60 takes three shards.
    let takes = c.take(field::COMMITTED, 60, Some(100), "run").expect("room");
    assert!(takes.len() >= 3);
    let mut b = Bumps::default();
    let mut holds = Vec::new();
    for t in &takes {
        b.add(&t.shard, field::RESERVED, t.amount);
        b.guarded(&t.shard, field::COMMITTED, t.amount, t.at_most);
        holds.push(Hold {
            shard: t.shard.clone(),
            vcpu_ms: u64::try_from(t.amount).expect("amount"),
            at_most: t.at_most,
            limit: Some(100),
        });
    }
    commit(&*store, &b).await.expect("admit");
    let mut r = Reservation { vcpu_ms: 60, budgets: vec![], at_most: vec![], slots: vec![], holds };
    assert_eq!(r.hold_counters(), vec![name.to_owned()]);
    // A smaller retry, after a charge of 10 in the same commit.
    let charge = charged(&[name.to_owned()], "run", 10, 1);
    renew(&*store, &mut r, 30, &charge).await.expect("renew down");
    assert_eq!(r.holds.iter().map(|h| h.vcpu_ms).sum::<u64>(), 30);
    let total = read(&*store, name).await.expect("read");
    assert_eq!((total.reserved_vcpu_ms, total.committed_vcpu_ms), (30, 40));
    // Up to the limit with what is charged: 40 + 50 + another charge of 10.
    renew(&*store, &mut r, 80, &charge).await.expect("renew up to the limit");
    assert_eq!(read(&*store, name).await.expect("read").committed_vcpu_ms, 100);
    for (k, s) in one(&*store, name).await.shards.iter().enumerate() {
        assert!(s.reserved_vcpu_ms <= 25, "shard {k} holds more than its share");
    }
    // One more charged vCPU-ms and the same retry passes the limit: refused,
    // and nothing is written.
    let charge = charged(&[name.to_owned()], "run", 1, 1);
    let refused = renew(&*store, &mut r, 80, &charge).await;
    match refused {
        Err(StoreError::LimitReached { key, .. }) => assert_eq!(key.id(), name),
        other => panic!("{other:?}"),
    }
    assert_eq!(read(&*store, name).await.expect("read").committed_vcpu_ms, 100);
    // A renewal must have read its counters.
    let mut unread = r.clone();
    assert!(matches!(
        Bumps::renew(&mut unread, 1, &[], &Bumps::default(), "run"),
        Err(StoreError::Internal(_))
    ));
    commit(&*store, &Bumps::release(&r)).await.expect("release");
    let c = one(&*store, name).await;
    assert_eq!(
        (c.total().reserved_vcpu_ms, c.total().committed_vcpu_ms),
        (0, 20),
        "only the charges are left"
    );
}

#[tokio::test]
async fn a_reservation_made_before_sharding_renews_as_it_did() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let name = "tenant:t@2026-11";
    let mut before = Bumps::default();
    before.add(name, field::RESERVED, 50);
    before.add(name, field::COMMITTED, 50);
    commit(&*store, &before).await.expect("commit");
    let mut r = Reservation {
        vcpu_ms: 50,
        budgets: vec![name.to_owned()],
        at_most: vec![Some(80)],
        slots: vec![],
        holds: vec![],
    };
    renew(&*store, &mut r, 70, &Bumps::default()).await.expect("renew");
    assert_eq!(one(&*store, name).await.legacy.reserved_vcpu_ms, 70);
    assert!(matches!(
        renew(&*store, &mut r, 90, &Bumps::default()).await,
        Err(StoreError::LimitReached { .. })
    ));
}

#[tokio::test]
async fn increments_land_on_the_seeds_shard() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open(&dir);
    let names = vec!["platform@2026-11".to_owned(), "tenant:t@2026-11".to_owned()];
    for _ in 0..2 {
        commit(&*store, &charged(&names, "run-9", 10, 7)).await.expect("charge");
    }
    for name in &names {
        let c = one(&*store, name).await;
        let k = pick("run-9", shards_of(name)) as usize;
        assert_eq!((c.shards[k].charged_vcpu_ms, c.shards[k].spend_micros), (20, 14));
        assert_eq!(c.total().spend_micros, 14, "nothing elsewhere");
    }
}
