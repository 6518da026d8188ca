//! An item job's changes of state, each a pure function of the documents a
//! transaction read (and the time), returning a [`Step`]: the writes to
//! buffer and commit. The handlers read, call one command, commit, and act
//! on what it answered; nothing here does I/O.
//!
//! The fan-out (`mapi_tasks::fanout`) expands a job's manifest one step at
//! a time: [`fanout`] says what a delivered step does with the job as
//! loaded, [`reserve`] takes room in the tenant's window for the next batch,
//! [`advance`] moves the cursor past a batch enqueued (and finishes the
//! fan-out), [`stop`] ends a fan-out whose manifest cannot be read. An
//! item's delivery ends it with [`mark`] (its marker, counts, charge and
//! window slot in one commit), and `retry-failed` or a later round's
//! delivery reopens a failed item with [`reopen`].
//!
//! Each command acts only on the state it was meant for (a step on its own
//! cursor position, a mark on an item with no marker of its round), so a
//! redelivered task, or a commit retried after a conflict, changes nothing
//! twice.

use mapi_domain::Timestamp;
use mapi_metering::Charge;
use mapi_quota::ItemsTake;
use mapi_quota::counters::{self, Bumps, field};
use mapi_schema::{ItemLedgerEntry, tx_create, tx_put};
use mapi_store::{StoreError, Txn};

use crate::{ItemOutcome, JobCountsDoc, JobDoc, JobItemDoc, JobItemHistoryDoc, count_field};

/// One buffered write of a step.
#[derive(Clone, Debug, PartialEq)]
enum Write {
    PutJob(Box<JobDoc>),
    CreateMarker(Box<JobItemDoc>),
    PutMarker(Box<JobItemDoc>),
    DeleteMarker(Box<JobItemDoc>),
    CreateHistory(Box<JobItemHistoryDoc>),
    /// An increment of one field of one of the job's count shards.
    Count {
        shard: String,
        field: &'static str,
        delta: i64,
    },
    /// Increments of the usage counters (the tenant's window).
    Bumps(Bumps),
    Charge(Box<Charge>),
}

/// What a command decided: the writes to buffer in one commit.
#[must_use = "a step does nothing until its writes are buffered and committed"]
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    writes: Vec<Write>,
}

impl Step {
    /// Buffers the step's writes in `tx`, in order.
    pub fn write(&self, tx: &mut Txn<'_>) -> Result<(), StoreError> {
        for w in &self.writes {
            match w {
                Write::PutJob(job) => tx_put(tx, &**job)?,
                Write::CreateMarker(m) => tx_create(tx, &**m)?,
                Write::PutMarker(m) => tx_put(tx, &**m)?,
                Write::DeleteMarker(m) => {
                    tx.delete(&mapi_schema::key::<JobItemDoc>(&JobItemDoc::id_of(&m.job, m.idx))?);
                }
                Write::CreateHistory(h) => tx_create(tx, &**h)?,
                Write::Count { shard, field, delta } => {
                    tx.increment(&mapi_schema::key::<JobCountsDoc>(shard)?, field, *delta, None);
                }
                Write::Bumps(b) => b.apply(tx)?,
                Write::Charge(c) => c.write(tx)?,
            }
        }
        Ok(())
    }

    /// Whether the step writes nothing (the state was not the one it acts on).
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    fn count(&mut self, shard: &str, field: &'static str, delta: i64) {
        self.writes.push(Write::Count { shard: shard.to_owned(), field, delta });
    }
}

/// What a delivered fan-out step does, the job as loaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fanout {
    /// The cursor is neither at this step nor at its successor: nothing.
    Stale,
    /// This step committed: only make sure its successor exists (when the
    /// fan-out is not finished).
    Redelivered { push_next: bool },
    /// The fan-out is finished, by this step or an earlier one.
    Finished,
    /// Every item has its task, or the job was cancelled: finish the fan-out.
    Finish,
    /// Take room in the window for the next batch.
    Reserve,
    /// A batch was reserved (by this step's earlier delivery): enqueue it.
    Enqueue,
}

/// What fan-out step `step` does with `job`.
pub fn fanout(job: &JobDoc, step: u64) -> Fanout {
    let f = &job.fanout;
    if f.step == step + 1 {
        return Fanout::Redelivered { push_next: f.finished_at.is_none() };
    }
    if f.step != step {
        return Fanout::Stale;
    }
    if f.finished_at.is_some() {
        return Fanout::Finished;
    }
    let stopping = job.cancel_requested_at.is_some() || f.enqueued >= job.items;
    match (f.reserved == f.enqueued, stopping) {
        (true, true) => Fanout::Finish,
        (true, false) => Fanout::Reserve,
        (false, _) => Fanout::Enqueue,
    }
}

/// How many items step `step` asks the window for: a batch of at most
/// `batch`, no more than the job has left.
pub fn wanted(job: &JobDoc, batch: u32) -> u64 {
    u64::from(batch).min(job.items.saturating_sub(job.fanout.enqueued))
}

/// Reserves `take` (what the tenant's window gave) for step `step`: the
/// cursor's `reserved` moves ahead of `enqueued` by the batch, in the commit
/// that takes the window's room. Nothing when the cursor moved on, a batch
/// is already reserved, or the window gave nothing. The job as left.
pub fn reserve(mut job: JobDoc, step: u64, take: &ItemsTake) -> (Step, JobDoc) {
    let f = &job.fanout;
    if f.step != step || f.reserved != f.enqueued || f.finished_at.is_some() || take.items == 0 {
        return (Step::default(), job);
    }
    job.fanout.reserved = job.fanout.enqueued + take.items.min(job.items - job.fanout.enqueued);
    let writes = vec![Write::PutJob(Box::new(job.clone())), Write::Bumps(take.bumps.clone())];
    (Step { writes }, job)
}

/// Moves step `step`'s cursor past what it enqueued (`enqueued =
/// reserved`) to `step + 1`, the fan-out finished at `now` when `finish`.
/// Nothing when the cursor is not at `step`.
pub fn advance(mut job: JobDoc, step: u64, finish: bool, now: Timestamp) -> (Step, JobDoc) {
    if job.fanout.step != step {
        return (Step::default(), job);
    }
    job.fanout.enqueued = job.fanout.reserved;
    job.fanout.step = step + 1;
    if finish {
        job.fanout.finished_at = Some(now);
    }
    (Step { writes: vec![Write::PutJob(Box::new(job.clone()))] }, job)
}

/// Ends the fan-out at step `step` for good at `now`, saying `why` (its
/// manifest cannot be read): the batch reserved and never enqueued gives
/// its room back to the tenant's window, and no next step is made.
pub fn stop(mut job: JobDoc, step: u64, why: &str, now: Timestamp) -> (Step, JobDoc) {
    if job.fanout.step != step || job.fanout.finished_at.is_some() {
        return (Step::default(), job);
    }
    let unused = i64::try_from(job.fanout.reserved - job.fanout.enqueued).unwrap_or(i64::MAX);
    job.fanout.reserved = job.fanout.enqueued;
    job.fanout.step = step + 1;
    job.fanout.finished_at = Some(now);
    job.fanout.error = Some(why.to_owned());
    let mut writes = vec![Write::PutJob(Box::new(job.clone()))];
    if unused > 0 {
        let mut b = Bumps::default();
        b.add_to(&counters::tenant(&job.tenant), job.id.as_str(), field::ACTIVE_ITEMS, -unused);
        writes.push(Write::Bumps(b));
    }
    (Step { writes }, job)
}

/// What marking an item came to.
#[derive(Clone, Debug, PartialEq)]
pub enum Marked {
    /// The marker was created: the item is counted, charged, its slot freed.
    Created,
    /// A failure's marker was replaced by this success; here is the old one.
    Upgraded(Box<JobItemDoc>),
    /// Another delivery's marker stands (or the item's marker of this round
    /// was kept in the history when it was reopened); here it is.
    Stood(Box<JobItemDoc>),
}

/// What a transaction read for [`mark`]: the item's marker, and (only when
/// there is none and the new one is of an earlier round than the job's)
/// the marker that round kept in the history when it was reopened.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MarkRead {
    pub existing: Option<JobItemDoc>,
    pub kept: Option<JobItemHistoryDoc>,
}

/// Which history document [`mark`] needs read for `new`, a marker of an
/// item of `job`: its round's, when that round is before the job's (a late
/// delivery of a round retry-failed has since passed).
pub fn kept_id(job: &JobDoc, new: &JobItemDoc) -> Option<String> {
    (new.round < job.round).then(|| JobItemHistoryDoc::id_of(&new.job, new.idx, new.round))
}

/// Ends an item with `new`, its marker (held end or not), charged `charge`.
///
/// - No marker, and none of its round in the history: the marker is
///   created once, and in the same commit the job's counts move (outcome,
///   duration, cost), the item is charged, and its slot in the tenant's
///   window is given back (in the shard its ledger id picks).
/// - A late delivery of a round retry-failed has passed: that round's
///   marker in the history stands, nothing is counted again.
/// - A failed marker and a succeeded `new`: a result beats an error; the
///   marker is replaced (the old end's log lines first when both hold
///   theirs), the counts move from failed to succeeded, nothing is charged
///   again.
/// - Any other marker stands.
pub fn mark(read: MarkRead, new: JobItemDoc, charge: Charge) -> (Step, Marked) {
    match (read.existing, read.kept) {
        (None, Some(h)) => (Step::default(), Marked::Stood(Box::new(h.0))),
        (Some(e), _) if e.outcome == ItemOutcome::Failed && new.outcome == ItemOutcome::Succeeded => {
            let mut up = new;
            if let (Some(old), Some(end)) = (&e.end, &mut up.end) {
                end.log = old.log.iter().chain(&end.log).cloned().collect();
            }
            let shard = JobCountsDoc::id_of(&up.job, up.idx);
            let mut step = Step { writes: vec![Write::PutMarker(Box::new(up))] };
            step.count(&shard, count_field::FAILED, -1);
            step.count(&shard, count_field::SUCCEEDED, 1);
            (step, Marked::Upgraded(Box::new(e)))
        }
        (Some(e), _) => (Step::default(), Marked::Stood(Box::new(e))),
        (None, None) => {
            let shard = JobCountsDoc::id_of(&new.job, new.idx);
            let outcome = match new.outcome {
                ItemOutcome::Succeeded => count_field::SUCCEEDED,
                ItemOutcome::Failed => count_field::FAILED,
            };
            let (duration, cost) = (i64::try_from(new.duration_ms).unwrap_or(i64::MAX), new.cost_micros);
            let seed = ItemLedgerEntry::id_of(&new.job, new.idx, new.round);
            let mut freed = Bumps::default();
            freed.add_to(&counters::tenant(&new.tenant), &seed, field::ACTIVE_ITEMS, -1);
            let mut step = Step { writes: vec![Write::CreateMarker(Box::new(new))] };
            step.writes.push(Write::Charge(Box::new(charge)));
            step.count(&shard, outcome, 1);
            step.count(&shard, count_field::DURATION, duration);
            step.count(&shard, count_field::COST, cost);
            step.writes.push(Write::Bumps(freed));
            (step, Marked::Created)
        }
    }
}

/// Reopens item `idx` of `job` for `round` (`retry-failed` started it), its
/// marker as read being `existing`: a failed marker of an earlier round is
/// kept in the history (the ledger stays append-only) and deleted, the
/// job's failed count drops, and the tenant's window takes the item again
/// (in the shard its marker id picks). Any other marker, or none, is left
/// alone. Whether it reopened.
pub fn reopen(existing: Option<JobItemDoc>, round: u32) -> (Step, bool) {
    let Some(m) = existing.filter(|m| m.outcome == ItemOutcome::Failed && m.round < round) else {
        return (Step::default(), false);
    };
    let shard = JobCountsDoc::id_of(&m.job, m.idx);
    let mut taken = Bumps::default();
    taken.add_to(&counters::tenant(&m.tenant), &JobItemDoc::id_of(&m.job, m.idx), field::ACTIVE_ITEMS, 1);
    let mut step = Step {
        writes: vec![
            Write::CreateHistory(Box::new(JobItemHistoryDoc(m.clone()))),
            Write::DeleteMarker(Box::new(m)),
        ],
    };
    step.count(&shard, count_field::FAILED, -1);
    step.writes.push(Write::Bumps(taken));
    (step, true)
}

#[cfg(test)]
mod tests;
