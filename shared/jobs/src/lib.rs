//! Item jobs as data. A caller posts a method and a list of items; the
//! manifest is written as objects, one fan-out task expands it into one
//! queue task per item, and each item's handler writes how it ended (its
//! result or error, usage and log line) as one create-only object. Nothing
//! here does I/O.
//!
//! - [`commands`]: every change of a job's state (a fan-out step's
//!   reservation, advance and stop, an item's mark and reopen), each a pure
//!   function returning the writes of one commit;
//! - [`layout`]: where a job's objects live (`t/{tenant}/p/{project}/jobs/{job}/…`);
//! - [`JobDoc`], [`JobItemDoc`], [`JobCountsDoc`]: the store's documents;
//! - [`tasks`]: the queue tasks, their routes and their hashed names;
//! - [`derive`]: a job's state and counts, derived, never stored;
//! - [`limits`]: concurrent items per tenant.
//!
//! Architecture invariant: a job's state is never stored. It is derived
//! from the manifest's item count, the fan-out cursor and the per-item
//! markers, and each marker exists only when the item's end object does
//! (the marker is created after the object, once, and the counters move in
//! the marker's commit).

pub mod commands;
mod docs;
pub mod layout;
pub mod limits;
mod state;
pub mod tasks;

pub use docs::*;
pub use state::{Counts, JobState, derive};

use mapi_store::{Direction, Index, Unindexed};

/// The jobs' fields no query reads (see [`Unindexed`]): the method's params
/// the tenant gave, and an item's end (its result or error and log, up to
/// [`layout::INLINE_END_MAX`] bytes), in its marker and in the history.
pub const UNINDEXED: &[Unindexed] = &[
    Unindexed { collection: JobDoc::COLLECTION, field: "params" },
    Unindexed { collection: JobItemDoc::COLLECTION, field: "end" },
    Unindexed { collection: JobItemHistoryDoc::COLLECTION, field: "end" },
];

/// The composite indexes the job queries need.
pub const INDEXES: &[Index] = &[
    // A job's finished items by outcome, in index order (items?state=…, retry-failed).
    Index {
        collection: JobItemDoc::COLLECTION,
        fields: &[("job", Direction::Asc), ("outcome", Direction::Asc), ("idx", Direction::Asc)],
    },
    // A job's finished items in index order; its last finish.
    Index { collection: JobItemDoc::COLLECTION, fields: &[("job", Direction::Asc), ("idx", Direction::Asc)] },
    Index { collection: JobItemDoc::COLLECTION, fields: &[("job", Direction::Asc), ("at", Direction::Desc)] },
    // The retention housekeeper: jobs created before a time.
    Index { collection: JobDoc::COLLECTION, fields: &[("created_at", Direction::Asc)] },
    Index {
        collection: JobDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("created_at", Direction::Asc)],
    },
    // The job sweep: jobs whose items may still finish, oldest first.
    Index {
        collection: JobDoc::COLLECTION,
        fields: &[("open", Direction::Asc), ("created_at", Direction::Asc)],
    },
    // The webhooks' sweep: a project's jobs by when they finished.
    Index {
        collection: JobDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("finished.at", Direction::Asc)],
    },
    // A project's jobs, newest first.
    Index {
        collection: JobDoc::COLLECTION,
        fields: &[("tenant", Direction::Asc), ("project", Direction::Asc), ("created_at", Direction::Desc)],
    },
];

use mapi_schema::Doc;
