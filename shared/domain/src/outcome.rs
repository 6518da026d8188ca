//! What an execution's end means for its run, as two pure functions.
//! [`classify`] reads the executor's report of one attempt; [`decide`] turns
//! that outcome into the run's next step:
//!
//! - every task exited 0: `succeeded` once the attempt's complete event is
//!   merged (`failed` if it never arrives), unless a stored output is not
//!   the generation and size its task reported writing: then the outputs
//!   cannot be trusted and the attempt is retried as an infrastructure
//!   failure (an output no report names yet only once the event grace is
//!   over: its report may be late);
//! - exit 16 (the supervisor flushed checkpoints), failed or cancelled: `partial`;
//! - exit 137, signal 9 or a "memory limit" message: one new attempt on the
//!   next larger class, else `failed` with `RESOURCE_EXHAUSTED`;
//! - exit 143 (stopped at the task timeout): `failed` with `TIMEOUT`;
//! - exit 1 (the method's error): `failed` with `METHOD_ERROR`;
//! - cancelled through the executor: `cancelled`;
//! - the execution is gone, or any other exit: a new attempt on the same
//!   class that spends an infrastructure retry (`MAPI_MAX_INFRA_RETRIES`),
//!   or `cancelled` when a cancel was asked for.

use serde::{Deserialize, Serialize};

use crate::{ErrorCode, Reason, ResourceClass, RunError, RunState};

/// Exit codes with a meaning across the platform.
pub mod exit {
    /// The worker finished the method.
    pub const SUCCESS: i32 = 0;
    /// The method reported an error (an `error` event was printed).
    pub const METHOD_ERROR: i32 = 1;
    /// The supervisor flushed checkpoints before stopping.
    pub const CHECKPOINTED: i32 = 16;
    /// Killed by SIGKILL: out of memory.
    pub const OOM: i32 = 137;
    /// Stopped by SIGTERM at the task timeout.
    pub const SIGTERM: i32 = 143;
    /// Unix signal number of SIGKILL, as Cloud Run reports in `term_signal`.
    pub const SIGNAL_KILL: i32 = 9;
}

/// The executor's name for an execution (Cloud Run's execution name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(transparent)]
pub struct ExecutionHandle(pub String);

impl std::fmt::Display for ExecutionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The executor's view of one execution, as every adapter reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Created, or running: not finished.
    Running,
    /// Every task exited 0.
    Succeeded,
    /// At least one task failed. `exit_code` is absent when the task died by
    /// a signal Cloud Run reports only as `term_signal`.
    Failed { exit_code: Option<i32>, signal: Option<i32>, message: String },
    /// Stopped through the executor's cancel.
    Cancelled { exit_code: Option<i32> },
    /// The executor does not know the execution (any more).
    NotFound,
}

/// In words, as a person reads it (`failed with exit code 1: …`).
impl std::fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExecutionStatus::Running => f.write_str("running"),
            ExecutionStatus::Succeeded => f.write_str("succeeded"),
            ExecutionStatus::Failed { exit_code, signal, message } => {
                f.write_str("failed")?;
                match (exit_code, signal) {
                    (_, Some(s)) => write!(f, ", killed by signal {s}")?,
                    (Some(c), None) => write!(f, " with exit code {c}")?,
                    (None, None) => {}
                }
                if message.trim().is_empty() { Ok(()) } else { write!(f, ": {}", message.trim()) }
            }
            ExecutionStatus::Cancelled { .. } => f.write_str("cancelled"),
            ExecutionStatus::NotFound => f.write_str("no longer known to the executor"),
        }
    }
}

/// How one attempt ended, read from the executor's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum AttemptOutcome {
    Succeeded,
    CheckpointFlushed,
    OutOfMemory,
    TimedOut,
    MethodFailed,
    Cancelled,
    /// Not found: confirmed gone.
    Lost,
    /// Any other exit: the infrastructure or the supervisor failed.
    Crashed {
        exit_code: Option<i32>,
        signal: Option<i32>,
    },
}

/// Classifies a finished execution. `None` while it runs.
pub fn classify(status: &ExecutionStatus) -> Option<AttemptOutcome> {
    Some(match status {
        ExecutionStatus::Running => return None,
        ExecutionStatus::Succeeded => AttemptOutcome::Succeeded,
        ExecutionStatus::Cancelled { exit_code: Some(exit::CHECKPOINTED) } => {
            AttemptOutcome::CheckpointFlushed
        }
        ExecutionStatus::Cancelled { .. } => AttemptOutcome::Cancelled,
        ExecutionStatus::NotFound => AttemptOutcome::Lost,
        ExecutionStatus::Failed { exit_code, signal, message } => match (exit_code, signal) {
            (Some(exit::CHECKPOINTED), _) => AttemptOutcome::CheckpointFlushed,
            (Some(exit::OOM), _) | (None, Some(exit::SIGNAL_KILL)) => AttemptOutcome::OutOfMemory,
            _ if message.to_ascii_lowercase().contains("memory limit") => AttemptOutcome::OutOfMemory,
            (Some(exit::SIGTERM), _) => AttemptOutcome::TimedOut,
            (Some(exit::METHOD_ERROR), _) => AttemptOutcome::MethodFailed,
            (exit_code, signal) => AttemptOutcome::Crashed { exit_code: *exit_code, signal: *signal },
        },
    })
}

/// Limits on automatic retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// `MAPI_MAX_INFRA_RETRIES`: attempts retried after a lost execution or crash.
    pub max_infra_retries: u32,
}

/// What the platform knows about the attempt besides the executor's report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptFacts {
    pub class: ResourceClass,
    /// An earlier attempt of this run already retried after running out of memory.
    pub oom_retried: bool,
    /// Infrastructure retries already spent on this run.
    pub infra_retries: u32,
    pub cancel_requested: bool,
    /// The `complete` event of this attempt has been merged.
    pub complete_seen: bool,
    /// The time allowed for the complete event after the execution ended is over.
    pub event_grace_over: bool,
    /// The message of the attempt's `error` event, if one arrived.
    pub error_message: Option<String>,
    /// How the stored outputs compare with what the tasks reported writing.
    pub outputs: OutputsCompared,
}

/// How an attempt's stored outputs compare with what its tasks reported
/// writing (generation verification).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum OutputsCompared {
    /// Not compared (the attempt did not succeed), or exactly as reported.
    #[default]
    Same,
    /// Only outputs stored that no report names yet: events arrive late and
    /// out of order, so this is a difference once the event grace is over.
    Unreported(String),
    /// Another generation or size than reported, or a reported output missing.
    Differ(String),
}

/// The run's next step after an attempt ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The run ends in `state`.
    Finalize { state: RunState, reason: Reason, error: Option<RunError> },
    /// A new attempt on `class`; `infra` says whether it spends an infrastructure retry.
    Retry { class: ResourceClass, reason: Reason, infra: bool },
    /// Nothing to do yet (waiting for the complete event).
    Wait,
}

fn failed(reason: Reason, code: ErrorCode, message: impl Into<String>) -> Verdict {
    Verdict::Finalize {
        state: RunState::Failed,
        reason,
        error: Some(RunError { code, message: message.into() }),
    }
}

/// Decides the run's next step from how its attempt ended.
pub fn decide(outcome: &AttemptOutcome, facts: &AttemptFacts, policy: RetryPolicy) -> Verdict {
    let infra_retry = |what: String| {
        if facts.cancel_requested {
            Verdict::Finalize { state: RunState::Cancelled, reason: Reason::CancelConfirmed, error: None }
        } else if facts.infra_retries < policy.max_infra_retries {
            Verdict::Retry { class: facts.class, reason: Reason::InfrastructureFailure, infra: true }
        } else {
            failed(
                Reason::InfrastructureFailure,
                ErrorCode::InfraError,
                format!("{what}; gave up after {} infrastructure retries", facts.infra_retries),
            )
        }
    };
    match outcome {
        AttemptOutcome::Succeeded if facts.complete_seen => match &facts.outputs {
            OutputsCompared::Same => {
                Verdict::Finalize { state: RunState::Succeeded, reason: Reason::Completed, error: None }
            }
            OutputsCompared::Unreported(_) if !facts.event_grace_over => Verdict::Wait,
            OutputsCompared::Unreported(how) | OutputsCompared::Differ(how) => {
                infra_retry(format!("the execution succeeded but its outputs are not what it wrote: {how}"))
            }
        },
        AttemptOutcome::Succeeded if facts.event_grace_over => failed(
            Reason::InfrastructureFailure,
            ErrorCode::InfraError,
            "the execution succeeded but its complete event never arrived",
        ),
        AttemptOutcome::Succeeded => Verdict::Wait,
        AttemptOutcome::CheckpointFlushed => {
            Verdict::Finalize { state: RunState::Partial, reason: Reason::CheckpointFlushed, error: None }
        }
        AttemptOutcome::OutOfMemory => match facts.class.next_larger() {
            Some(class) if !facts.oom_retried && !facts.cancel_requested => {
                Verdict::Retry { class, reason: Reason::ResourceExhausted, infra: false }
            }
            _ => failed(
                Reason::ResourceExhausted,
                ErrorCode::ResourceExhausted,
                format!("the attempt ran out of memory on class {}", facts.class),
            ),
        },
        AttemptOutcome::TimedOut => {
            failed(Reason::Timeout, ErrorCode::Timeout, "the run exceeded its timeout")
        }
        AttemptOutcome::MethodFailed => failed(
            Reason::MethodError,
            ErrorCode::MethodError,
            facts.error_message.clone().unwrap_or_else(|| "the method failed".to_owned()),
        ),
        AttemptOutcome::Cancelled => {
            Verdict::Finalize { state: RunState::Cancelled, reason: Reason::CancelConfirmed, error: None }
        }
        AttemptOutcome::Lost => infra_retry("the execution was lost".to_owned()),
        AttemptOutcome::Crashed { exit_code, signal } => {
            infra_retry(format!("the execution crashed (exit code {exit_code:?}, signal {signal:?})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_execution_status_reads_as_words_not_as_its_debug_form() {
        let failed = ExecutionStatus::Failed { exit_code: Some(1), signal: None, message: " boom ".into() };
        assert_eq!(failed.to_string(), "failed with exit code 1: boom");
        let killed = ExecutionStatus::Failed { exit_code: None, signal: Some(9), message: String::new() };
        assert_eq!(killed.to_string(), "failed, killed by signal 9");
        assert_eq!(ExecutionStatus::Cancelled { exit_code: Some(143) }.to_string(), "cancelled");
        assert!(!ExecutionStatus::NotFound.to_string().contains("NotFound"));
    }

    fn facts() -> AttemptFacts {
        AttemptFacts {
            class: ResourceClass::S,
            oom_retried: false,
            infra_retries: 0,
            cancel_requested: false,
            complete_seen: true,
            event_grace_over: false,
            error_message: None,
            outputs: OutputsCompared::Same,
        }
    }

    const POLICY: RetryPolicy = RetryPolicy { max_infra_retries: 2 };

    fn failed_with(exit_code: Option<i32>, signal: Option<i32>, message: &str) -> ExecutionStatus {
        ExecutionStatus::Failed { exit_code, signal, message: message.to_owned() }
    }

    /// The outcome table, typed by hand: executor report → run state.
    #[test]
    fn the_seed_outcome_table() {
        use RunState as S;
        let rows: Vec<(ExecutionStatus, Option<S>, &str)> = vec![
            (ExecutionStatus::Succeeded, Some(S::Succeeded), "all tasks succeeded"),
            (failed_with(Some(16), None, ""), Some(S::Partial), "exit 16 failed"),
            (ExecutionStatus::Cancelled { exit_code: Some(16) }, Some(S::Partial), "exit 16 cancelled"),
            (failed_with(Some(137), None, ""), None, "exit 137 retries next class"),
            (failed_with(None, Some(9), ""), None, "term_signal 9 retries next class"),
            (failed_with(Some(1), None, "Memory limit exceeded"), None, "memory message retries"),
            (failed_with(Some(143), None, ""), Some(S::Failed), "task timeout"),
            (ExecutionStatus::Cancelled { exit_code: None }, Some(S::Cancelled), "cancelled"),
            (ExecutionStatus::NotFound, None, "not found retries as infra failure"),
        ];
        for (status, want, why) in rows {
            let outcome = classify(&status).expect("finished");
            match (decide(&outcome, &facts(), POLICY), want) {
                (Verdict::Finalize { state, .. }, Some(w)) => assert_eq!(state, w, "{why}"),
                (Verdict::Retry { .. }, None) => {}
                (v, w) => panic!("{why}: got {v:?}, want {w:?}"),
            }
        }
    }

    #[test]
    fn oom_retries_once_on_the_next_class_then_fails() {
        let oom = AttemptOutcome::OutOfMemory;
        assert_eq!(
            decide(&oom, &facts(), POLICY),
            Verdict::Retry { class: ResourceClass::M, reason: Reason::ResourceExhausted, infra: false }
        );
        let again = AttemptFacts { class: ResourceClass::M, oom_retried: true, ..facts() };
        assert!(matches!(
            decide(&oom, &again, POLICY),
            Verdict::Finalize {
                state: RunState::Failed,
                error: Some(RunError { code: ErrorCode::ResourceExhausted, .. }),
                ..
            }
        ));
        let on_l = AttemptFacts { class: ResourceClass::L, ..facts() };
        assert!(matches!(decide(&oom, &on_l, POLICY), Verdict::Finalize { state: RunState::Failed, .. }));
    }

    #[test]
    fn success_waits_for_the_complete_event_then_gives_up() {
        let waiting = AttemptFacts { complete_seen: false, ..facts() };
        assert_eq!(decide(&AttemptOutcome::Succeeded, &waiting, POLICY), Verdict::Wait);
        let over = AttemptFacts { event_grace_over: true, ..waiting };
        assert!(matches!(
            decide(&AttemptOutcome::Succeeded, &over, POLICY),
            Verdict::Finalize {
                state: RunState::Failed,
                error: Some(RunError { code: ErrorCode::InfraError, .. }),
                ..
            }
        ));
    }

    #[test]
    fn lost_executions_spend_infra_retries_until_none_are_left() {
        let spent = AttemptFacts { infra_retries: 2, ..facts() };
        assert!(matches!(
            decide(&AttemptOutcome::Lost, &facts(), POLICY),
            Verdict::Retry { infra: true, .. }
        ));
        assert!(matches!(
            decide(&AttemptOutcome::Lost, &spent, POLICY),
            Verdict::Finalize { state: RunState::Failed, .. }
        ));
        let cancelling = AttemptFacts { cancel_requested: true, ..facts() };
        assert!(matches!(
            decide(&AttemptOutcome::Lost, &cancelling, POLICY),
            Verdict::Finalize { state: RunState::Cancelled, .. }
        ));
    }

    #[test]
    fn method_errors_carry_the_event_message() {
        let f = AttemptFacts { error_message: Some("column `y` not found".into()), ..facts() };
        match decide(&classify(&failed_with(Some(1), None, "")).expect("done"), &f, POLICY) {
            Verdict::Finalize { error: Some(e), .. } => {
                assert_eq!((e.code, e.message.as_str()), (ErrorCode::MethodError, "column `y` not found"))
            }
            v => panic!("unexpected {v:?}"),
        }
    }

    #[test]
    fn outputs_that_are_not_what_was_written_retry_as_infrastructure_failures() {
        let late =
            AttemptFacts { outputs: OutputsCompared::Unreported("`a.json` is stored".into()), ..facts() };
        assert_eq!(
            decide(&AttemptOutcome::Succeeded, &late, POLICY),
            Verdict::Wait,
            "its report may be late"
        );
        let over = AttemptFacts { event_grace_over: true, ..late };
        assert!(matches!(
            decide(&AttemptOutcome::Succeeded, &over, POLICY),
            Verdict::Retry { infra: true, .. }
        ));
        let replaced = AttemptFacts {
            outputs: OutputsCompared::Differ("`model.json` is generation 9".into()),
            ..facts()
        };
        assert_eq!(
            decide(&AttemptOutcome::Succeeded, &replaced, POLICY),
            Verdict::Retry { class: ResourceClass::S, reason: Reason::InfrastructureFailure, infra: true }
        );
        let spent = AttemptFacts { infra_retries: 2, ..replaced };
        match decide(&AttemptOutcome::Succeeded, &spent, POLICY) {
            Verdict::Finalize { state: RunState::Failed, error: Some(e), .. } => {
                assert_eq!(e.code, ErrorCode::InfraError);
                assert!(
                    e.message.contains("not what it wrote: `model.json` is generation 9"),
                    "{}",
                    e.message
                );
            }
            v => panic!("unexpected {v:?}"),
        }
    }

    /// Every verdict that finalizes names a transition the state machine allows
    /// from `running` and from `cancelling`.
    #[test]
    fn verdicts_are_legal_transitions() {
        let outcomes = [
            AttemptOutcome::Succeeded,
            AttemptOutcome::CheckpointFlushed,
            AttemptOutcome::OutOfMemory,
            AttemptOutcome::TimedOut,
            AttemptOutcome::MethodFailed,
            AttemptOutcome::Cancelled,
            AttemptOutcome::Lost,
            AttemptOutcome::Crashed { exit_code: Some(2), signal: None },
        ];
        for o in &outcomes {
            for cancel in [false, true] {
                let f = AttemptFacts { cancel_requested: cancel, ..facts() };
                let from = if cancel { RunState::Cancelling } else { RunState::Running };
                match decide(o, &f, POLICY) {
                    Verdict::Finalize { state, reason, .. } => {
                        assert!(from.check(state, reason).is_ok(), "{o:?} cancel={cancel}")
                    }
                    Verdict::Retry { reason, .. } => {
                        assert!(!cancel, "{o:?}: a cancelled run must not retry");
                        assert!(from.check(RunState::Queued, reason).is_ok(), "{o:?}")
                    }
                    Verdict::Wait => {}
                }
            }
        }
    }
}
