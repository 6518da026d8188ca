//! Workflows as pure decisions. No I/O and no clock: the caller reads the
//! documents, passes the time and the ids it chose, and stores what comes
//! back.
//!
//! - [`definition`]: a workflow's nodes (`run`, `search.grid`, `validate`,
//!   `deploy`) and what each needs, read from YAML or JSON and checked with
//!   errors naming the node and the field.
//! - [`run`]: a workflow run's life: which nodes may start, what their
//!   children's ends and people's decisions make of them, cancel, resume.
//!
//! Architecture invariant: a workflow run's state changes only through
//! [`WorkflowRun`]'s methods, and a node's children are named in the run
//! before they are made, so a driver that dies between the two makes the
//! same children again (found, not made twice) on its next pass.

pub mod definition;
pub mod run;

pub use definition::{DatasetRef, Definition, DefinitionError, Goal, Kind, Methods, Node};
pub use run::{Child, Ended, NodeRun, NodeState, Refused, RunState, Seen, Start, WorkflowRun};
