//! Quotas (Administration v0.3, "Trust tiers" and "Quotas").
//!
//! The platform limits compute in vCPU-seconds and checks three levels, in
//! this sequence: the limits of the token; the policy of the tenant, or the
//! defaults of its tier; the platform-wide limits that protect the cloud
//! project. [`admit`] answers with the first limit a request would exceed.
//!
//! [`counters`] holds the sharded usage counters admission reads and
//! reserves into, and [`plan`] turns an admitted ask into the increments of
//! the shards with room.
//!
//! Architecture invariant: admission ([`admit`], [`plan`]) does no I/O and
//! never reads the system clock. Every function that depends on time takes
//! `now`; the caller reads the counters and passes what it read. The two
//! read helpers in [`counters`] are the crate's only store calls.

mod admit;
pub mod counters;
mod limits;
pub mod nearness;
mod period;
pub mod plan;

pub use admit::{Ask, Level, Refusal, RefusalCode, TokenBudget, Usage, admit};
pub use limits::{
    GIB, KillSwitches, Limits, PLATFORM_CONCURRENT_RUNS, Policy, effective, platform_limits, tier_defaults,
};
pub use period::{Period, UnknownPeriod};
pub use plan::{Asked, CounterNames, ItemsTake, NoRoom, Plan, Read, items_window, plan};
