//! A run's lifecycle, in one place.
//!
//! - [`RunDoc`]: the run document. Its fields are private; it changes only
//!   through the commands.
//! - [`commands`]: every change of a run's state, each a pure function of
//!   the documents a transaction read, returning a [`Step`] (writes, the
//!   typed transition, follow-ups).
//! - [`verdict()`]: the one verdict on an ended attempt, used by the
//!   reconcile tick (whether to finalize) and by the meter (what to apply).
//! - [`carry_out`]: the follow-ups of a committed step, through the ports.
//!
//! Architecture invariant: a run's state changes only in this crate, and
//! only through [`mapi_domain::RunState::check`]; each change and its
//! history entry are one write of one commit.
//!
//! Architecture invariant: the commands do no I/O; their inputs are what a
//! transaction read and the time, so they are tested without a store.

pub mod commands;
mod run;
pub mod verdict;

#[cfg(test)]
mod tests;

pub use commands::{FollowUp, Step};
pub use run::{NewRun, RunDoc, Waiting};
pub use verdict::{Decided, Rules, verdict};

use mapi_api::views::RunSummary;
use mapi_executor::Executor;
use mapi_queue::{QueueError, TaskQueue};
use mapi_schema::Doc;
use mapi_store::{Direction, Index};

/// The indexes of the runs' queries.
pub const INDEXES: &[Index] = &[
    // Runs of a project, newest first, optionally by state.
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("created_at", Direction::Desc)],
    },
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("state", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    // The reconciler's sweep: runs in a state, least recently changed first.
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("state", Direction::Asc), ("updated_at", Direction::Asc)],
    },
];

/// Carries out a committed step's follow-ups: pushes dispatches and asks
/// the executor to cancel. Each is backed by the reconciler (it re-pushes
/// the dispatch of a run queued too long and asks again for every cancel
/// not confirmed), so a failure here delays, never loses, the work. A
/// failed cancel is logged; the first failed push is returned, for callers
/// that want the queue to deliver them again.
pub async fn carry_out(
    follow_ups: &[FollowUp],
    queue: &dyn TaskQueue,
    executor: &dyn Executor,
) -> Result<(), QueueError> {
    let mut first = Ok(());
    for f in follow_ups {
        match f {
            FollowUp::Dispatch { run, attempt } => {
                if let Err(e) = mapi_schema::tasks::push_dispatch(queue, run, *attempt, None, None).await {
                    tracing::warn!(run = %run, attempt = %attempt, error = %e, "dispatch push failed; the reconciler re-pushes it");
                    if first.is_ok() {
                        first = Err(e);
                    }
                }
            }
            FollowUp::CancelExecution(handle) => {
                if let Err(e) = executor.cancel(handle).await {
                    tracing::warn!(execution = %handle, error = %e, "executor cancel failed; the reconciler asks again");
                }
            }
        }
    }
    first
}

impl From<&RunDoc> for RunSummary {
    fn from(r: &RunDoc) -> Self {
        RunSummary {
            id: r.id().clone(),
            method: r.method().to_owned(),
            state: r.state(),
            class: r.class(),
            attempt: r.attempt(),
            created_at: r.created_at(),
            updated_at: r.updated_at(),
            charged_micros: r.charged_micros(),
        }
    }
}
