//! The item job's rules, without a store: each command on the documents as
//! a transaction would have read them.

use std::collections::BTreeMap;

use mapi_domain::{JobId, ProjectId, TenantId, UserId};
use mapi_metering::Payer;
use serde_json::json;

use super::*;
use crate::{Fanout as Cursor, InlineEnd};

const T0: Timestamp = Timestamp::from_secs(1_800_000_000);

fn job(items: u64) -> JobDoc {
    JobDoc {
        id: JobId::parse("job_01arz3ndektsv4rrffq69g5fav").expect("job"),
        tenant: TenantId::parse("acme").expect("tenant"),
        project: ProjectId::parse("main").expect("project"),
        method: "item.echo".into(),
        params: BTreeMap::new(),
        items,
        chunk_items: 1000,
        window: 100,
        created_at: T0,
        created_by: UserId::parse("dev@dev.local").expect("user"),
        token: None,
        fanout: Cursor::default(),
        round: 0,
        cancel_requested_at: None,
        open: true,
        finished: None,
    }
}

fn at(mut j: JobDoc, step: u64, reserved: u64, enqueued: u64) -> JobDoc {
    j.fanout.step = step;
    j.fanout.reserved = reserved;
    j.fanout.enqueued = enqueued;
    j
}

fn take(items: u64) -> ItemsTake {
    let mut bumps = Bumps::default();
    if items > 0 {
        bumps.guarded("tenant:acme#0", field::ACTIVE_ITEMS, i64::try_from(items).expect("small"), Some(25));
    }
    ItemsTake { items, bumps }
}

fn marker(idx: u64, outcome: ItemOutcome, round: u32, log: &[&str]) -> JobItemDoc {
    let j = job(10);
    JobItemDoc {
        job: j.id,
        tenant: j.tenant,
        project: j.project,
        idx,
        outcome,
        round,
        attempts: 1,
        duration_ms: 40,
        cost_micros: 7,
        at: T0,
        end: Some(InlineEnd { result: None, error: None, log: log.iter().map(|l| json!(l)).collect() }),
    }
}

fn charge_of(m: &JobItemDoc) -> Charge {
    let payer = Payer { tenant: &m.tenant, project: &m.project, token: None };
    mapi_metering::item(&payer, (&m.job, m.idx, m.round), (m.duration_ms, m.cost_micros), T0)
}

fn mark_with(existing: Option<JobItemDoc>, kept: Option<JobItemDoc>, new: JobItemDoc) -> (Step, Marked) {
    let charge = charge_of(&new);
    mark(MarkRead { existing, kept: kept.map(JobItemHistoryDoc) }, new, charge)
}

fn counts(step: &Step) -> Vec<(&str, i64)> {
    step.writes
        .iter()
        .filter_map(|w| match w {
            Write::Count { field, delta, .. } => Some((*field, *delta)),
            _ => None,
        })
        .collect()
}

fn charged(step: &Step) -> usize {
    step.writes.iter().filter(|w| matches!(w, Write::Charge(_))).count()
}

fn window_bumps(step: &Step) -> Vec<Bumps> {
    step.writes
        .iter()
        .filter_map(|w| match w {
            Write::Bumps(b) => Some(b.clone()),
            _ => None,
        })
        .collect()
}

fn put_job(step: &Step) -> Option<&JobDoc> {
    step.writes.iter().find_map(|w| match w {
        Write::PutJob(j) => Some(&**j),
        _ => None,
    })
}

// The fan-out's decisions.

#[test]
fn a_step_whose_cursor_moved_past_its_successor_does_nothing() {
    assert_eq!(fanout(&at(job(10), 5, 3, 3), 3), Fanout::Stale);
}

#[test]
fn a_step_whose_cursor_is_not_yet_there_does_nothing() {
    assert_eq!(fanout(&at(job(10), 1, 0, 0), 3), Fanout::Stale);
}

#[test]
fn a_redelivered_step_only_makes_sure_of_its_successor_until_the_fan_out_finished() {
    let j = at(job(10), 4, 3, 3);
    assert_eq!(fanout(&j, 3), Fanout::Redelivered { push_next: true });
    let mut done = j;
    done.fanout.finished_at = Some(T0);
    assert_eq!(fanout(&done, 3), Fanout::Redelivered { push_next: false });
}

#[test]
fn a_step_on_a_finished_fan_out_does_nothing_more() {
    let mut j = at(job(10), 3, 10, 10);
    j.fanout.finished_at = Some(T0);
    assert_eq!(fanout(&j, 3), Fanout::Finished);
}

#[test]
fn every_item_enqueued_finishes_the_fan_out() {
    assert_eq!(fanout(&at(job(10), 3, 10, 10), 3), Fanout::Finish);
}

#[test]
fn a_cancelled_job_finishes_once_nothing_reserved_is_left_unenqueued() {
    let mut j = at(job(10), 3, 4, 4);
    j.cancel_requested_at = Some(T0);
    assert_eq!(fanout(&j, 3), Fanout::Finish);
    // What an earlier delivery reserved is enqueued first, cancelled or not.
    let mut half = at(job(10), 3, 6, 4);
    half.cancel_requested_at = Some(T0);
    assert_eq!(fanout(&half, 3), Fanout::Enqueue);
}

#[test]
fn a_step_with_items_left_reserves_and_one_with_a_reservation_enqueues_it() {
    assert_eq!(fanout(&at(job(10), 3, 4, 4), 3), Fanout::Reserve);
    assert_eq!(fanout(&at(job(10), 3, 6, 4), 3), Fanout::Enqueue);
}

#[test]
fn a_step_asks_for_a_batch_or_what_is_left() {
    assert_eq!(wanted(&at(job(1000), 0, 0, 0), 100), 100);
    assert_eq!(wanted(&at(job(1000), 9, 950, 950), 100), 50);
    assert_eq!(wanted(&at(job(10), 1, 10, 10), 100), 0);
}

// Reserving.

#[test]
fn a_reservation_moves_the_cursor_ahead_and_takes_the_windows_room_in_one_commit() {
    let (step, after) = reserve(at(job(1000), 2, 200, 200), 2, &take(25));
    assert_eq!((after.fanout.reserved, after.fanout.enqueued), (225, 200));
    assert_eq!(put_job(&step), Some(&after));
    assert_eq!(window_bumps(&step), vec![take(25).bumps]);
}

#[test]
fn a_full_window_reserves_nothing() {
    let (step, after) = reserve(at(job(1000), 2, 200, 200), 2, &take(0));
    assert!(step.is_empty());
    assert_eq!(after.fanout.reserved, 200);
}

#[test]
fn a_reservation_for_a_step_the_cursor_left_writes_nothing() {
    let j = at(job(1000), 3, 300, 300);
    let (step, after) = reserve(j.clone(), 2, &take(25));
    assert!(step.is_empty());
    assert_eq!(after, j);
}

#[test]
fn a_second_reservation_of_one_step_writes_nothing() {
    let j = at(job(1000), 2, 225, 200);
    let (step, after) = reserve(j.clone(), 2, &take(25));
    assert!(step.is_empty(), "the first one's batch is still to enqueue");
    assert_eq!(after, j);
}

#[test]
fn a_reservation_never_passes_the_jobs_last_item() {
    let (_, after) = reserve(at(job(210), 2, 200, 200), 2, &take(25));
    assert_eq!(after.fanout.reserved, 210);
}

// Advancing and stopping.

#[test]
fn advancing_counts_the_batch_enqueued_and_moves_to_the_next_step() {
    let (step, after) = advance(at(job(1000), 2, 225, 200), 2, false, T0);
    assert_eq!((after.fanout.step, after.fanout.enqueued, after.fanout.finished_at), (3, 225, None));
    assert_eq!(put_job(&step), Some(&after));
    let (_, done) = advance(at(job(225), 2, 225, 200), 2, true, T0);
    assert_eq!(done.fanout.finished_at, Some(T0));
}

#[test]
fn advancing_a_step_the_cursor_left_writes_nothing() {
    let (step, after) = advance(at(job(1000), 3, 225, 225), 2, true, T0);
    assert!(step.is_empty());
    assert_eq!(after.fanout.finished_at, None);
}

#[test]
fn a_stop_gives_the_unenqueued_batch_back_and_says_why() {
    let (step, after) = stop(at(job(1000), 2, 225, 200), 2, "chunk 0 is missing", T0);
    assert_eq!((after.fanout.reserved, after.fanout.enqueued, after.fanout.step), (200, 200, 3));
    assert_eq!(
        (after.fanout.finished_at, after.fanout.error.as_deref()),
        (Some(T0), Some("chunk 0 is missing"))
    );
    let mut back = Bumps::default();
    back.add_to(&counters::tenant(&after.tenant), after.id.as_str(), field::ACTIVE_ITEMS, -25);
    assert_eq!(window_bumps(&step), vec![back]);
    // The job is failed by it: what was never enqueued counts as cancelled.
    let (state, counts) = after.derive(&JobCountsDoc::default());
    assert_eq!((counts.cancelled, counts.running), (800, 200));
    assert!(!state.is_final(), "the enqueued items still run");
}

#[test]
fn a_stop_with_nothing_reserved_gives_nothing_back_and_a_stale_one_writes_nothing() {
    let (step, _) = stop(at(job(10), 0, 0, 0), 0, "unreadable", T0);
    assert!(window_bumps(&step).is_empty());
    assert!(put_job(&step).is_some());
    let (stale, _) = stop(at(job(10), 1, 0, 0), 0, "unreadable", T0);
    assert!(stale.is_empty());
}

// Marking an item's end.

#[test]
fn a_first_end_creates_the_marker_counts_charges_and_frees_the_slot() {
    let new = marker(3, ItemOutcome::Succeeded, 0, &["ok"]);
    let (step, marked) = mark_with(None, None, new.clone());
    assert_eq!(marked, Marked::Created);
    assert!(matches!(&step.writes[0], Write::CreateMarker(m) if **m == new));
    assert_eq!(charged(&step), 1, "charged once, in the marker's commit");
    assert_eq!(counts(&step), vec![("succeeded", 1), ("duration_ms", 40), ("cost_micros", 7)]);
    let mut freed = Bumps::default();
    freed.add_to("tenant:acme", &ItemLedgerEntry::id_of(&new.job, 3, 0), field::ACTIVE_ITEMS, -1);
    assert_eq!(window_bumps(&step), vec![freed]);
}

#[test]
fn a_first_failure_counts_as_failed() {
    let (step, _) = mark_with(None, None, marker(3, ItemOutcome::Failed, 0, &["boom"]));
    assert_eq!(counts(&step)[0], ("failed", 1));
}

#[test]
fn a_success_replaces_a_failure_keeping_its_log_and_moving_the_counts() {
    let failed = marker(3, ItemOutcome::Failed, 0, &["attempt 1 failed"]);
    let (step, marked) = mark_with(Some(failed.clone()), None, marker(3, ItemOutcome::Succeeded, 0, &["ok"]));
    assert_eq!(marked, Marked::Upgraded(Box::new(failed)));
    let Write::PutMarker(up) = &step.writes[0] else { panic!("the marker is replaced") };
    assert_eq!(up.end.as_ref().expect("end").log, vec![json!("attempt 1 failed"), json!("ok")]);
    assert_eq!(counts(&step), vec![("failed", -1), ("succeeded", 1)]);
    assert_eq!(charged(&step), 0, "the item was charged when it first ended");
    assert!(window_bumps(&step).is_empty(), "its slot was freed then too");
}

#[test]
fn a_failure_after_a_success_stands_aside() {
    let ok = marker(3, ItemOutcome::Succeeded, 0, &["ok"]);
    let (step, marked) = mark_with(Some(ok.clone()), None, marker(3, ItemOutcome::Failed, 0, &["late"]));
    assert!(step.is_empty());
    assert_eq!(marked, Marked::Stood(Box::new(ok)));
}

#[test]
fn a_second_end_of_the_same_outcome_stands_aside() {
    let first = marker(3, ItemOutcome::Failed, 0, &["a"]);
    let (step, marked) = mark_with(Some(first.clone()), None, marker(3, ItemOutcome::Failed, 0, &["b"]));
    assert!(step.is_empty());
    assert_eq!(marked, Marked::Stood(Box::new(first)));
}

#[test]
fn a_late_delivery_of_a_reopened_round_finds_its_marker_in_the_history() {
    let kept = marker(3, ItemOutcome::Failed, 0, &["round 0"]);
    let (step, marked) = mark_with(None, Some(kept.clone()), marker(3, ItemOutcome::Failed, 0, &["late"]));
    assert!(step.is_empty(), "neither counted nor charged again");
    assert_eq!(marked, Marked::Stood(Box::new(kept)));
}

#[test]
fn only_an_earlier_rounds_end_needs_the_history_read() {
    let mut j = job(10);
    j.round = 1;
    assert_eq!(
        kept_id(&j, &marker(3, ItemOutcome::Failed, 0, &[])),
        Some(JobItemHistoryDoc::id_of(&j.id, 3, 0))
    );
    assert_eq!(kept_id(&j, &marker(3, ItemOutcome::Failed, 1, &[])), None);
}

// Reopening.

#[test]
fn reopening_keeps_the_failed_marker_deletes_it_and_retakes_the_slot() {
    let failed = marker(3, ItemOutcome::Failed, 0, &["boom"]);
    let (step, reopened) = reopen(Some(failed.clone()), 1);
    assert!(reopened);
    assert!(matches!(&step.writes[0], Write::CreateHistory(h) if h.0 == failed));
    assert!(matches!(&step.writes[1], Write::DeleteMarker(m) if **m == failed));
    assert_eq!(counts(&step), vec![("failed", -1)]);
    let mut taken = Bumps::default();
    taken.add_to("tenant:acme", &JobItemDoc::id_of(&failed.job, 3), field::ACTIVE_ITEMS, 1);
    assert_eq!(window_bumps(&step), vec![taken]);
}

#[test]
fn reopening_leaves_a_success_a_marker_of_this_round_and_no_marker_alone() {
    for existing in
        [Some(marker(3, ItemOutcome::Succeeded, 0, &[])), Some(marker(3, ItemOutcome::Failed, 1, &[])), None]
    {
        let (step, reopened) = reopen(existing.clone(), 1);
        assert!(step.is_empty() && !reopened, "{existing:?}");
    }
}
