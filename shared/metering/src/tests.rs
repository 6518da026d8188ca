//! Each kind's charge, priced as the price tables say and written on a real
//! (SQLite) store: the ledger, the rollups and the counters agree, and the
//! platform's and the token's counters see every kind.

use std::sync::Arc;

use mapi_quota::counters::CounterDoc;
use mapi_schema::usage::{Kind, ROLLUP_COLLECTION, Totals, lines_of};
use mapi_store::sqlite::{Durability, SqliteStore};
use mapi_store::{Query, Store, StoreExt, transact};

use super::*;

const NOW: Timestamp = Timestamp::from_secs(1_800_000_000);

fn ids() -> (TenantId, ProjectId) {
    (TenantId::parse("acme").expect("tenant"), ProjectId::parse("main").expect("project"))
}

fn store(dir: &tempfile::TempDir) -> SqliteStore {
    let clock: Arc<dyn mapi_clock::Clock> = Arc::new(mapi_clock::SystemClock);
    SqliteStore::open(&dir.path().join("store.db"), clock, &[], Durability::Normal).expect("open")
}

async fn write(s: &dyn Store, charge: &Charge) -> Result<(), StoreError> {
    transact::<_, StoreError, _, _>(s, |mut tx| async move {
        charge.write(&mut tx)?;
        Ok(tx.finish(()))
    })
    .await
}

async fn counter(s: &dyn Store, name: &str) -> CounterDoc {
    counters::read(s, name).await.expect("counter")
}

/// The tenant's rollup of the day of [`NOW`], by kind.
async fn rollup(s: &dyn Store, kind: Kind) -> Totals {
    let docs = s.query(&Query::new(ROLLUP_COLLECTION), None).await.expect("rollups");
    let mut sum = Totals::default();
    for d in docs.iter().filter(|d| d.key.id().starts_with("acme@")) {
        for (line, t) in lines_of(d) {
            if line.kind == kind {
                sum.add(&t);
            }
        }
    }
    sum
}

#[test]
fn an_attempt_is_its_class_for_its_wall_time_on_every_counter_of_its_payer() {
    let (t, p) = ids();
    let run = RunId::parse("run_01arz3ndektsv4rrffq69g5fav").expect("run");
    let wall = Duration::from_millis(12_345);
    let payer = Payer { tenant: &t, project: &p, token: None };
    let c = attempt(&payer, &run, AttemptNo::FIRST, (ResourceClass::M, 0, 2), wall, NOW);
    let priced = CURRENT.charge(ResourceClass::M, 2, wall);
    assert_eq!((c.amount_micros(), c.vcpu_ms()), (priced.amount_micros, priced.vcpu_ms));
    assert_eq!(c.score_nanos(), None);
    // Tenant and platform, day and month; with a token, its day and month too.
    assert_eq!(counters_of(&payer, NOW).len(), 4);
    let with_token = Payer { token: Some("1a2b3c4d5e6f"), ..payer };
    assert_eq!(counters_of(&with_token, NOW).len(), 6);
    assert!(counters_of(&with_token, NOW).contains(&counters::token_period(
        "1a2b3c4d5e6f",
        Period::Month,
        NOW
    )));
}

#[test]
fn an_item_is_charged_as_its_marker_recorded_it() {
    let (t, p) = ids();
    let job = JobId::parse("job_01arz3ndektsv4rrffq69g5fav").expect("job");
    let took = Duration::from_micros(40_750);
    let cost = item_cost(took);
    assert_eq!(cost, CURRENT.charge(ResourceClass::S, 1, took).amount_micros);
    let payer = Payer { tenant: &t, project: &p, token: None };
    let c = item(&payer, (&job, 3, 0), (40, cost), NOW);
    assert_eq!(c.amount_micros(), cost, "the recorded amount, not one priced again from whole ms");
    assert_eq!(c.vcpu_ms(), CURRENT.charge(ResourceClass::S, 1, Duration::from_millis(40)).vcpu_ms);
}

#[test]
fn scores_add_the_change_of_their_minutes_rounded_amount_so_a_minute_adds_up_exactly() {
    let (t, p) = ids();
    let payer = Payer { tenant: &t, project: &p, token: None };
    let mut minute = ScoreLedgerEntry::empty((&t, &p, "fast"), "cpu", None, NOW, 0);
    let mut charged = 0;
    for i in 0..1_000 {
        let c = score(
            &payer,
            minute.clone(),
            (Accelerator::Cpu, Duration::from_millis(3), i % 7 == 0),
            "seed",
            NOW,
        );
        assert_eq!(c.score_nanos(), Some(score_price(Accelerator::Cpu, 3).0.nanos));
        charged += c.amount_micros();
        let Ledger::Score { minute: next, .. } = c.ledger else { panic!("a score's ledger") };
        minute = *next;
    }
    assert_eq!(minute.requests, 1_000);
    assert_eq!(minute.errors, 143);
    assert_eq!(charged, minute.cost_micros(), "the counters get exactly the minute's rounded amount");
    // 100 ms billed on 1 vCPU and 2 GiB, plus the request fee: 2,400 + 500 + 400 nano-units.
    assert_eq!(minute.cost_nanos, 1_000 * 3_300);
    let (l4, table) = score_price(Accelerator::L4, 250);
    assert_eq!((l4.billed_ms, l4.accelerator_ms, table), (250, 250, CURRENT.version));
}

/// Every kind written on a real store: each ledger holds what it charged,
/// the rollups say the same per kind, and the tenant's, the platform's and
/// the token's counters hold the sum of all three kinds.
#[tokio::test]
async fn every_kind_written_leaves_ledgers_rollups_and_counters_agreeing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = store(&dir);
    let (t, p) = ids();
    let token = Some("1a2b3c4d5e6f");
    let payer = Payer { tenant: &t, project: &p, token };
    let run = RunId::parse("run_01arz3ndektsv4rrffq69g5fav").expect("run");
    let job = JobId::parse("job_01arz3ndektsv4rrffq69g5fav").expect("job");
    let run_charge =
        attempt(&payer, &run, AttemptNo::FIRST, (ResourceClass::S, 0, 1), Duration::from_secs(61), NOW);
    write(&s, &run_charge).await.expect("attempt");
    assert!(
        matches!(write(&s, &run_charge).await, Err(StoreError::AlreadyExists(_))),
        "an attempt is charged once: its entry is created once"
    );
    let mut items = 0;
    for idx in 0..5 {
        let cost = item_cost(Duration::from_millis(200 + idx * 10));
        items += cost;
        write(&s, &item(&payer, (&job, idx, 0), (200 + idx * 10, cost), NOW)).await.expect("item");
    }
    let mut scores = 0;
    for i in 0..3 {
        let key = mapi_schema::key::<ScoreLedgerEntry>(&ScoreLedgerEntry::id_of(
            "acme:main:fast",
            ScoreLedgerEntry::minute_of(NOW),
            token,
            0,
        ))
        .expect("key");
        let read =
            s.get_one(&key).await.expect("read").map(|d| d.decode::<ScoreLedgerEntry>().expect("entry"));
        let minute = read.unwrap_or_else(|| ScoreLedgerEntry::empty((&t, &p, "fast"), "cpu", token, NOW, 0));
        let c = score(
            &payer,
            minute,
            (Accelerator::Cpu, Duration::from_millis(120), false),
            &format!("s{i}"),
            NOW,
        );
        scores += c.amount_micros();
        write(&s, &c).await.expect("score");
    }
    let total = run_charge.amount_micros() + items + scores;
    assert!(run_charge.amount_micros() > 0 && items > 0 && scores > 0);
    for name in [
        counters::tenant_period(&t, Period::Month, NOW),
        counters::tenant_period(&t, Period::Day, NOW),
        counters::platform_period(Period::Month, NOW),
        counters::platform_period(Period::Day, NOW),
        counters::token_period("1a2b3c4d5e6f", Period::Month, NOW),
    ] {
        assert_eq!(counter(&s, &name).await.spend_micros, total, "{name} sees every kind");
    }
    assert_eq!(counter(&s, &counters::tenant_period(&t, Period::Month, NOW)).await.items, 5);
    assert_eq!(rollup(&s, Kind::Run).await.cost_micros, run_charge.amount_micros());
    assert_eq!((rollup(&s, Kind::Item).await.cost_micros, rollup(&s, Kind::Item).await.items), (items, 5));
    assert_eq!(
        (rollup(&s, Kind::Score).await.cost_micros, rollup(&s, Kind::Score).await.scores),
        (scores, 3)
    );
    // The job's minute, spread over its shards by item index.
    let minutes = s.query(&Query::new(ItemLedgerMinute::COLLECTION), None).await.expect("minutes");
    let (mut n, mut amount) = (0, 0);
    for m in &minutes {
        let m: ItemLedgerMinute = m.decode().expect("minute");
        (n, amount) = (n + m.sums.items, amount + m.sums.amount_micros);
    }
    assert_eq!((n, amount), (5, items));
}

/// An L4 endpoint's idle time (its instances' time less its scores') is
/// charged at instance prices, once per window; a CPU endpoint's only for
/// its minimum instances, at the idle rate (request-billed); never the time
/// its scores already charged.
#[tokio::test]
async fn idle_instance_time_of_an_l4_endpoint_is_charged_once_at_instance_prices() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = store(&dir);
    let (t, p) = ids();
    let payer = Payer { tenant: &t, project: &p, token: None };
    let window = (NOW, Timestamp::from_secs(NOW.as_secs() + 600));
    let (up, busy) = (Duration::from_secs(600), Duration::from_secs(60));
    let c = instance(&payer, ("acme:main:gpu", Accelerator::L4, 0), window, (up, busy), NOW);
    // 540 s idle of 4 vCPU, 16 GiB and one L4: 540 × (4 × 18,000 + 16 × 2,000 + 186,700) nano-units.
    assert_eq!(c.amount_micros(), 540 * (4 * 18_000 + 16 * 2_000 + 186_700) / 1000);
    assert_eq!(c.vcpu_ms(), 4 * 540_000);
    write(&s, &c).await.expect("charged");
    assert!(matches!(write(&s, &c).await, Err(StoreError::AlreadyExists(_))), "a window is charged once");
    let totals = rollup(&s, Kind::Instance).await;
    assert_eq!((totals.cost_micros, totals.accelerator_ms), (c.amount_micros(), 540_000));
    assert_eq!(
        counter(&s, &counters::tenant_period(&t, Period::Month, NOW)).await.spend_micros,
        c.amount_micros()
    );
    let entries = s.query(&Query::new(InstanceLedgerEntry::COLLECTION), None).await.expect("entries");
    let e: InstanceLedgerEntry = entries[0].decode().expect("entry");
    assert_eq!((e.instance_ms, e.busy_ms, e.idle_ms), (600_000, 60_000, 540_000));
    let cpu = instance(&payer, ("acme:main:cpu", Accelerator::Cpu, 0), window, (up, busy), NOW);
    assert_eq!((cpu.amount_micros(), cpu.vcpu_ms()), (0, 0), "request-billed, no minimum: idle time is free");
    // Two instances up the whole window, one of them a minimum: only its 600 s less the busy 60 s
    // are charged (the other is Cloud Run's to keep or drop), at 1 vCPU and 2 GiB idle rates.
    let cpu = instance(&payer, ("acme:main:cpu", Accelerator::Cpu, 1), window, (up * 2, busy), NOW);
    assert_eq!((cpu.vcpu_ms(), cpu.amount_micros()), (600_000, 600 * (2_500 + 2 * 2_500) / 1000));
    let busy_cpu = instance(&payer, ("acme:main:cpu", Accelerator::Cpu, 1), window, (up, busy), NOW);
    assert_eq!(busy_cpu.vcpu_ms(), 540_000, "its scores' time is not idle");
    let busier = instance(&payer, ("acme:main:gpu", Accelerator::L4, 0), window, (up, up * 2), NOW);
    assert_eq!(busier.amount_micros(), 0, "concurrent scores took more than the window: nothing idle");
}
