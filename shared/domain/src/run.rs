//! Run states, the reasons a run changes state, and the one state machine
//! every change goes through.
//!
//! ```text
//!   queued ──▶ dispatching ──▶ running ──▶ succeeded | failed | partial
//!     │  ▲          │  │          │ │
//!     │  └──────────┘  │          │ └──▶ queued          (retry: next class, lost execution)
//!     │   (throttled)  ▼          ▼
//!     └──────────▶ cancelling ──▶ cancelled | partial | succeeded | failed
//! ```

use serde::{Deserialize, Serialize};

use crate::{AttemptNo, Timestamp};

#[macro_export]
/// Declares an enum with one wire string per variant and its `as_str`/`FromStr`
/// pair. The calling crate needs `serde` and `utoipa`.
macro_rules! wire_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $wire:tt),+ $(,)? }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, ::serde::Serialize, ::serde::Deserialize, ::utoipa::ToSchema)]
        pub enum $name {
            $($(#[$vdoc])* #[serde(rename = $wire)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $wire),+ }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = ::std::string::String;
            fn from_str(s: &str) -> ::std::result::Result<Self, ::std::string::String> {
                $name::ALL.iter().copied().find(|v| v.as_str() == s).ok_or_else(|| {
                    let all: ::std::vec::Vec<_> = $name::ALL.iter().map(|v| v.as_str()).collect();
                    format!("unknown {} `{}`: use one of {}", stringify!($name), s.chars().take(32).collect::<String>(), all.join(", "))
                })
            }
        }
    };
}

wire_enum!(
    /// Where a run is in its life.
    RunState {
        /// Accepted; waiting for its next attempt to be dispatched.
        Queued => "queued",
        /// The intent (attempt, nonce) is written; the executor is being asked to start it.
        Dispatching => "dispatching",
        /// The executor has an execution for the current attempt.
        Running => "running",
        /// A cancel was asked for; waiting for the executor to confirm.
        Cancelling => "cancelling",
        Succeeded => "succeeded",
        Failed => "failed",
        /// Stopped early after flushing a checkpoint: outputs are partial.
        Partial => "partial",
        Cancelled => "cancelled",
    }
);

impl RunState {
    pub fn is_terminal(self) -> bool {
        matches!(self, RunState::Succeeded | RunState::Failed | RunState::Partial | RunState::Cancelled)
    }

    /// States in which an execution may exist and must be watched.
    pub fn is_active(self) -> bool {
        matches!(self, RunState::Dispatching | RunState::Running | RunState::Cancelling)
    }
}

wire_enum!(
    /// Why a run changed state. Recorded in the run's history.
    Reason {
        Submitted => "submitted",
        /// The dispatcher wrote the intent row and bootstrap object.
        IntentWritten => "intent_written",
        /// The executor accepted the attempt and named its execution.
        ExecutionCreated => "execution_created",
        /// The reconciler found the attempt's execution by its nonce.
        Adopted => "adopted",
        /// The executor kept answering 429: back to the queue, no retry spent.
        Throttled => "throttled",
        /// The execution succeeded and its complete event arrived.
        Completed => "completed",
        /// The method reported an error.
        MethodError => "method_error",
        /// The execution ran past its timeout.
        Timeout => "timeout",
        /// The execution ran out of memory.
        ResourceExhausted => "resource_exhausted",
        /// The execution vanished or the infrastructure failed; retried.
        InfrastructureFailure => "infrastructure_failure",
        /// Placement refused the run (class not offered, no executor fits).
        PlacementRefused => "placement_refused",
        /// The supervisor flushed checkpoints before it stopped (exit 16).
        CheckpointFlushed => "checkpoint_flushed",
        CancelRequested => "cancel_requested",
        /// The executor confirmed the execution is gone.
        CancelConfirmed => "cancel_confirmed",
    }
);

wire_enum!(
    /// The type of an item job's failed item: its input cannot work, its
    /// last attempt failed or ran past the item timeout, or its job was
    /// cancelled first.
    ItemErrorKind {
        Input => "input",
        Transient => "transient",
        Timeout => "timeout",
        Cancelled => "cancelled",
    }
);

wire_enum!(
    /// The stable code of a failed run's error.
    ErrorCode {
        MethodError => "METHOD_ERROR",
        Timeout => "TIMEOUT",
        ResourceExhausted => "RESOURCE_EXHAUSTED",
        InfraError => "INFRA_ERROR",
        InvalidArgument => "INVALID_ARGUMENT",
        /// A retry would have passed one of the tenant's or token's limits.
        QuotaExceeded => "QUOTA_EXCEEDED",
    }
);

/// The error a failed run carries.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunError {
    pub code: ErrorCode,
    pub message: String,
}

wire_enum!(
    /// The stable code of a run's warning.
    WarningCode {
        /// The run's class has a GPU, its execution got none: it ran on the CPU.
        GpuUnavailable => "GPU_UNAVAILABLE",
    }
);

/// Something about how a run's attempt runs that did not stop it, and that
/// its owner should know (for example, that it ran on the CPU).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunWarning {
    pub code: WarningCode,
    /// What happened and what to do about it.
    pub message: String,
    /// The attempt it concerns.
    pub attempt: AttemptNo,
}

/// One entry of a run's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Transition {
    pub from: Option<RunState>,
    pub to: RunState,
    pub at: Timestamp,
    pub reason: Reason,
    pub attempt: AttemptNo,
}

/// A transition the state machine refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a run cannot go from {from} to {to} ({reason})")]
pub struct TransitionError {
    pub from: RunState,
    pub to: RunState,
    pub reason: Reason,
}

/// The legal transitions and the reasons each accepts. One table, used by
/// [`RunState::check`] and printed in ARCHITECTURE.md.
pub const TRANSITIONS: &[(RunState, RunState, &[Reason])] = {
    use Reason as R;
    use RunState as S;
    &[
        (S::Queued, S::Dispatching, &[R::IntentWritten]),
        (S::Queued, S::Cancelled, &[R::CancelRequested]),
        (S::Queued, S::Failed, &[R::PlacementRefused]),
        (S::Dispatching, S::Running, &[R::ExecutionCreated, R::Adopted]),
        (S::Dispatching, S::Queued, &[R::Throttled, R::InfrastructureFailure]),
        (S::Dispatching, S::Failed, &[R::PlacementRefused, R::InfrastructureFailure]),
        (S::Dispatching, S::Cancelling, &[R::CancelRequested]),
        (S::Running, S::Succeeded, &[R::Completed]),
        (
            S::Running,
            S::Failed,
            &[R::MethodError, R::Timeout, R::ResourceExhausted, R::InfrastructureFailure],
        ),
        (S::Running, S::Partial, &[R::CheckpointFlushed]),
        (S::Running, S::Queued, &[R::ResourceExhausted, R::InfrastructureFailure]),
        (S::Running, S::Cancelling, &[R::CancelRequested]),
        // Cancelled outside the platform (an operator in the console): the
        // executor's report is the confirmation.
        (S::Running, S::Cancelled, &[R::CancelConfirmed]),
        (S::Cancelling, S::Cancelled, &[R::CancelConfirmed]),
        (S::Cancelling, S::Partial, &[R::CheckpointFlushed]),
        (S::Cancelling, S::Succeeded, &[R::Completed]),
        (
            S::Cancelling,
            S::Failed,
            &[R::MethodError, R::Timeout, R::ResourceExhausted, R::InfrastructureFailure],
        ),
    ]
};

impl RunState {
    /// Checks one transition against [`TRANSITIONS`].
    pub fn check(self, to: RunState, reason: Reason) -> Result<(), TransitionError> {
        let legal =
            TRANSITIONS.iter().any(|(f, t, reasons)| *f == self && *t == to && reasons.contains(&reason));
        if legal { Ok(()) } else { Err(TransitionError { from: self, to, reason }) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_have_no_way_out() {
        for (from, _, _) in TRANSITIONS {
            assert!(!from.is_terminal(), "{from} is terminal but has an outgoing transition");
        }
    }

    #[test]
    fn every_non_terminal_state_can_reach_a_terminal_one() {
        for s in RunState::ALL.iter().filter(|s| !s.is_terminal()) {
            let mut seen = vec![*s];
            let mut i = 0;
            while i < seen.len() {
                for (f, t, _) in TRANSITIONS {
                    if *f == seen[i] && !seen.contains(t) {
                        seen.push(*t);
                    }
                }
                i += 1;
            }
            assert!(seen.iter().any(|x| x.is_terminal()), "{s} cannot finish");
        }
    }

    #[test]
    fn illegal_transitions_are_refused() {
        assert!(RunState::Queued.check(RunState::Dispatching, Reason::IntentWritten).is_ok());
        assert!(RunState::Succeeded.check(RunState::Queued, Reason::Submitted).is_err());
        assert!(RunState::Queued.check(RunState::Succeeded, Reason::Completed).is_err());
        // Right pair, wrong reason.
        assert!(RunState::Running.check(RunState::Succeeded, Reason::CancelConfirmed).is_err());
        // A run cannot be marked cancelled before the executor confirms.
        assert!(RunState::Running.check(RunState::Cancelled, Reason::CancelRequested).is_err());
    }

    #[test]
    fn wire_names_round_trip() {
        for s in RunState::ALL {
            assert_eq!(s.as_str().parse::<RunState>().ok(), Some(*s));
        }
        for r in Reason::ALL {
            assert_eq!(r.as_str().parse::<Reason>().ok(), Some(*r));
        }
        assert!("done".parse::<RunState>().is_err());
    }
}
