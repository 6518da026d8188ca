//! The platform's vocabulary, shared by every function, the worker and the CLI.
//!
//! Architecture invariant: this crate does no I/O. Identifiers are generated
//! from a timestamp and entropy handed in by the caller, and every wire string
//! (run states, reasons, classes) is parsed into an enum here, once.

pub mod bootstrap;
pub mod cause;
pub mod class;
pub mod endpoint;
pub mod ids;
pub mod outcome;
pub mod plugin;
pub mod run;
pub mod schema;
pub mod spec;
pub mod tenant;
pub mod timestamp;
pub mod unique;

pub use bootstrap::{BOOTSTRAP_VERSION, Bootstrap, Reuse};
pub use cause::Cause;
pub use class::ResourceClass;
pub use ids::{
    AttemptNo, DatasetId, DeliveryId, IdError, JobId, ModelVersionId, Nonce, ProjectId, RunId, TenantId,
    UserId, WebhookId,
};
pub use outcome::{
    AttemptFacts, AttemptOutcome, ExecutionHandle, ExecutionStatus, OutputsCompared, RetryPolicy, Verdict,
    classify, decide, exit,
};
pub use plugin::{PluginBoot, PluginCode};
pub use run::{
    ErrorCode, ItemErrorKind, Reason, RunError, RunState, RunWarning, Transition, TransitionError,
    WarningCode,
};
pub use spec::{DEFAULT_TIMEOUT_S, RunSpecInput, SpecError, TIMEOUT_RANGE_S};
pub use tenant::{Residency, TenantStatus, Tier};
pub use timestamp::Timestamp;
