//! Quotas (Administration v0.3, "Trust tiers" and "Quotas").
//!
//! The platform limits compute in vCPU-seconds and checks three levels, in
//! this sequence: the limits of the token; the policy of the tenant, or the
//! defaults of its tier; the platform-wide limits that protect the cloud
//! project. [`admit`] answers with the first limit a request would exceed.
//!
//! Architecture invariant: this crate does no I/O and never reads the system
//! clock. Every function that depends on time takes `now`, and the caller
//! reads [`Usage`] in the same transaction that will reserve.

mod admit;
mod limits;
mod period;

pub use admit::{Ask, Level, Refusal, RefusalCode, TokenBudget, Usage, admit};
pub use limits::{
    GIB, KillSwitches, Limits, PLATFORM_CONCURRENT_RUNS, Policy, effective, platform_limits, tier_defaults,
};
pub use period::{Period, UnknownPeriod};
