//! Admission: whether work may start now, decided in one place for every
//! kind of work.
//!
//! - [`quota`]: the three levels of quotas (the token's, the tenant's
//!   policy or tier defaults, the platform's) and the kill switches, checked
//!   at the request (runs, uploads, item jobs, scores) and reserved in the
//!   request's own commit;
//! - [`holds`]: what keeps admitted compute from starting (the platform's
//!   spend cap, an executor switched off, the shared-tier gate): a run at
//!   its dispatch and an item job at each fan-out step wait, never fail;
//! - [`items`]: the fan-out's share of a tenant's window of items in flight.
//!
//! The rules themselves are pure and live in `mapi_quota`; this crate reads
//! what they look at, asks them, and audits a refusal.
//!
//! Architecture invariant: a new kind of work is admitted here, with an
//! `Ask` of its own, or it is not admitted at all; no handler reads the
//! usage counters to decide for itself.

pub mod holds;
pub mod items;
pub mod quota;

pub use holds::{SpendStanding, compute_stopped, held, plugin_serving_refused, spend_standing};
pub use quota::{Plan, Request, admission, admit_and_commit, commit_admitted};
