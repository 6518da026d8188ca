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
//! Architecture invariant: a finalized attempt's bootstraps are retired
//! (deleted) after its commit, so an execution that starts later (a
//! duplicate the executor made, or one started after a cancel) finds no
//! instructions and no event key, and does no work.
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
pub use verdict::{Decided, Rules, compare_outputs, needs_outputs, verdict};

use mapi_api::views::RunSummary;
use mapi_executor::Executor;
use mapi_objects::{IfGeneration, ObjectError, ObjectKey, ObjectStore};
use mapi_queue::{QueueError, TaskQueue};
use mapi_schema::Doc;
use mapi_store::{ContainsIndex, Direction, Index, Unindexed};

/// The run's fields no query reads (see [`Unindexed`]): the method's
/// params the tenant gave (a run is found by a param through `param_keys`),
/// and the run's history of transitions, which grows with every retry.
pub const UNINDEXED: &[Unindexed] = &[
    Unindexed { collection: RunDoc::COLLECTION, field: "params" },
    Unindexed { collection: RunDoc::COLLECTION, field: "history" },
];

/// The runs of a project carrying a tag, or a param set to a value, newest first.
pub const CONTAINS_INDEXES: &[ContainsIndex] = &[
    ContainsIndex {
        collection: RunDoc::COLLECTION,
        equal: &["tenant", "project"],
        contains: "labels.tags",
        order: &[("created_at", Direction::Desc)],
    },
    ContainsIndex {
        collection: RunDoc::COLLECTION,
        equal: &["tenant", "project"],
        contains: "param_keys",
        order: &[("created_at", Direction::Desc)],
    },
];

/// The indexes of the runs' queries.
pub const INDEXES: &[Index] = &[
    // Ended runs whose executions' leftovers may still exist, oldest ending first: the run
    // housekeeper's, under the platform's retention and under a tenant's own.
    Index { collection: RunDoc::COLLECTION, fields: &[("leftovers_since", Direction::Asc)] },
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("leftovers_since", Direction::Asc)],
    },
    // Runs whose executions were forgotten, oldest first: the run housekeeper's, for the runs
    // past their record retention, under the platform's and under a tenant's own.
    Index { collection: RunDoc::COLLECTION, fields: &[("leftovers_forgotten_at", Direction::Asc)] },
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("leftovers_forgotten_at", Direction::Asc)],
    },
    // Runs of a project's experiment, newest first.
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("labels.experiment", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    // Runs of a project, newest first, optionally by state, method, class
    // or creator (each alone, or merged).
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
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("method", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("class", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[
            ("tenant", Direction::Asc),
            ("project", Direction::Asc),
            ("created_by", Direction::Asc),
            ("created_at", Direction::Desc),
        ],
    },
    // Whether a run that has not finished reads a dataset (before deleting it).
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("dataset", Direction::Asc), ("state", Direction::Asc)],
    },
    // Runs of a project by when they last changed (the webhooks' sweep).
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("updated_at", Direction::Asc)],
    },
    // The reconciler's sweep: runs in a state, least recently changed first.
    Index {
        collection: RunDoc::COLLECTION,
        fields: &[("state", Direction::Asc), ("updated_at", Direction::Asc)],
    },
];

/// The ports follow-ups are carried out through.
#[derive(Clone, Copy)]
pub struct Outbox<'a> {
    pub queue: &'a dyn TaskQueue,
    pub executor: &'a dyn Executor,
    /// The bootstrap bucket.
    pub bootstrap: &'a dyn ObjectStore,
}

impl std::fmt::Debug for Outbox<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox").finish_non_exhaustive()
    }
}

/// Why a step's follow-ups were not all carried out; each is logged.
#[derive(Debug, thiserror::Error)]
pub enum FollowUpError {
    #[error(transparent)]
    Push(#[from] QueueError),
    #[error("cannot retire a bootstrap: {0}")]
    Retire(#[from] ObjectError),
}

/// Carries out a committed step's follow-ups: pushes dispatches, asks the
/// executor to cancel, retires bootstraps. Dispatches and cancels are
/// backed by the reconciler (it re-pushes the dispatch of a run queued too
/// long and asks again for every cancel not confirmed), so a failure here
/// delays, never loses, the work; a failed cancel is only logged. A failed
/// push or retirement is returned (the first), for callers whose task the
/// queue delivers again: the meter answers it so, and a redelivered
/// finalization retires again.
pub async fn carry_out(follow_ups: &[FollowUp], out: Outbox<'_>) -> Result<(), FollowUpError> {
    let mut first = Ok(());
    for f in follow_ups {
        let done = match f {
            FollowUp::Dispatch { run, attempt } => {
                let pushed = mapi_schema::tasks::push_dispatch(out.queue, run, *attempt, None, None).await;
                pushed.map_err(|e| {
                    tracing::warn!(run = %run, attempt = %attempt, error = %e, "dispatch push failed; the reconciler re-pushes it");
                    FollowUpError::from(e)
                })
            }
            FollowUp::CancelExecution(handle) => {
                if let Err(e) = out.executor.cancel(handle).await {
                    tracing::warn!(execution = %handle, error = %e, "executor cancel failed; the reconciler asks again");
                }
                Ok(())
            }
            FollowUp::RetireBootstraps { nonce, tasks } => retire(out.bootstrap, nonce, *tasks).await,
        };
        if first.is_ok() {
            first = done;
        }
    }
    first
}

/// Deletes each task's bootstrap; one already gone (taken by its worker,
/// or retired by an earlier delivery) is what was wanted.
async fn retire(
    bootstrap: &dyn ObjectStore,
    nonce: &mapi_domain::Nonce,
    tasks: u32,
) -> Result<(), FollowUpError> {
    retire_counting(bootstrap, nonce, tasks).await.map(|_| ())
}

/// Deletes each task's bootstrap and answers how many were already gone.
/// A deletion wins against a worker's take (the worker deletes the copy
/// it read, pinned to its generation, before it starts), so once this
/// returns no execution can begin the attempt's work, and a bootstrap that
/// was gone was taken by some execution (or retired by an earlier call).
pub async fn retire_counting(
    bootstrap: &dyn ObjectStore,
    nonce: &mapi_domain::Nonce,
    tasks: u32,
) -> Result<u32, FollowUpError> {
    let mut gone = 0;
    for task in 0..tasks {
        let key = ObjectKey::parse(nonce.for_task(task).as_str())?;
        match bootstrap.delete(&key, IfGeneration::Any).await {
            Ok(()) => {}
            Err(ObjectError::NotFound(_)) => gone += 1,
            Err(e) => {
                tracing::warn!(nonce = %nonce, task, error = %e, "cannot retire a bootstrap; the finalization is delivered again");
                return Err(e.into());
            }
        }
    }
    Ok(gone)
}

impl From<&RunDoc> for RunSummary {
    fn from(r: &RunDoc) -> Self {
        RunSummary {
            id: r.id().clone(),
            method: r.method().to_owned(),
            state: r.state(),
            class: r.class(),
            created_by: r.created_by().clone(),
            name: r.labels().name.clone(),
            tags: r.labels().tags.clone(),
            experiment: r.labels().experiment.clone(),
            attempt: r.attempt(),
            created_at: r.created_at(),
            updated_at: r.updated_at(),
            charged_micros: r.charged_micros(),
            dataset: r.dataset().clone(),
            values: std::collections::BTreeMap::new(),
        }
    }
}
