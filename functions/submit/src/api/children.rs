//! The children of a fan-out parent's run: the tasks of its execution, each
//! listed in the parent's view with its state, its share of the cost and its
//! outputs (and readable on its own, naming its parent, through
//! `GET /v1/runs/{id}/children/{index}`).

use mapi_api::views::{ChildState, ChildView, OutputView};
use mapi_domain::RunState;
use mapi_lifecycle::RunDoc;
use mapi_schema::{AttemptDoc, LedgerEntry};

/// Child `index`'s share of a charge of `amount` split evenly over `tasks`
/// tasks: the remainder goes to the first children, so the shares sum to
/// the charge exactly.
pub fn share(amount: i64, tasks: u32, index: u32) -> i64 {
    let n = i64::from(tasks.max(1));
    amount.div_euclid(n) + i64::from(i64::from(index) < amount.rem_euclid(n))
}

/// The children of `run`, from its current attempt's progress (each task's
/// fraction and completion), the children whose results are stored
/// (`stored`: a child writes them before it completes, and a failed attempt
/// is finalized without waiting for the others' last events), its attempts'
/// charges and the outputs its view lists.
pub fn of(
    run: &RunDoc,
    progress: Option<&mapi_events::progress::Progress>,
    stored: &std::collections::BTreeSet<u32>,
    attempts: &[AttemptDoc],
    ledger: &[LedgerEntry],
    outputs: &[OutputView],
) -> Vec<ChildView> {
    if mapi_methods::fan_out(run.method()).is_none() {
        return Vec::new();
    }
    let tasks: Vec<(f64, bool)> = progress.map(|p| p.tasks().collect()).unwrap_or_default();
    let reused: &[u32] = attempts.iter().find(|a| a.attempt == run.attempt()).map_or(&[], |a| &a.reused);
    (0..run.task_count())
        .map(|index| {
            let (fraction, complete) = tasks.get(index as usize).copied().unwrap_or((0.0, false));
            let complete = complete || stored.contains(&index);
            let state = match run.state() {
                _ if complete => ChildState::Succeeded,
                RunState::Cancelled => ChildState::Cancelled,
                s if s.is_terminal() => ChildState::Failed,
                _ if fraction > 0.0 => ChildState::Running,
                _ => ChildState::Pending,
            };
            let charged_micros = ledger
                .iter()
                .map(|l| {
                    let n = attempts
                        .iter()
                        .find(|a| a.attempt == l.attempt)
                        .map_or(run.task_count(), |a| a.task_count);
                    share(l.charge.amount_micros, n, index)
                })
                .sum();
            let prefix = format!("{index}/");
            let outputs =
                outputs.iter().filter(|o| o.name.starts_with(&prefix)).map(|o| o.name.clone()).collect();
            ChildView {
                parent: run.id().clone(),
                index,
                state,
                fraction: if complete { 1.0 } else { fraction },
                reused: reused.contains(&index),
                charged_micros,
                outputs,
            }
        })
        .collect()
}
