//! Model governance as pure decisions. No I/O and no clock: the caller
//! reads the documents, passes the time, and stores what comes back.
//!
//! - [`policy`]: what a model version must satisfy before it serves
//!   traffic (metric thresholds on its run, an improvement over the version
//!   serving now, a number of reviewers' approvals, an expiry), and how a
//!   tenant-wide policy and a project's combine: every rule of both holds,
//!   so a project policy can only add to the tenant's.
//! - [`validation`]: one submission of a version against the policy in
//!   force: its automatic checks, the reviewers' decisions, and whether it
//!   lets the version be promoted now.
//!
//! Architecture invariant: the rules of who may decide (never the
//! submitter, never through an API token, reviewers only) and of what a
//! validation admits live here and nowhere else; handlers call them.

pub mod policy;
pub mod validation;

pub use policy::{Better, Check, CheckOutcome, Cmp, Improvement, Policy, PolicyError, Threshold, evaluate};
pub use validation::{Decider, Decision, Missing, Refusal, State, Validation};
