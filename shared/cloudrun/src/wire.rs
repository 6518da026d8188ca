//! From the Admin API's Execution and Task to the executor port's
//! [`ExecutionInfo`]. The meaning of an outcome is decided in
//! `mapi-domain`'s outcome table, not here.

use google_cloud_run_v2::model;
use mapi_domain::{ExecutionStatus, Nonce, RunId, Timestamp, exit};
use mapi_executor::{ExecutionHandle, ExecutionInfo};

use crate::assumptions;

fn ts(t: Option<&google_cloud_wkt::Timestamp>) -> Option<Timestamp> {
    t.map(|t| Timestamp::from_micros(t.seconds().saturating_mul(1_000_000) + i64::from(t.nanos() / 1000)))
}

fn env_of<'a>(e: &'a model::Execution, name: &str) -> Option<&'a str> {
    let containers = e.template.as_ref().map(|t| t.containers.as_slice()).unwrap_or_default();
    containers
        .iter()
        .flat_map(|c| c.env.iter())
        .find(|v| v.name == name)
        .and_then(|v| v.value())
        .map(String::as_str)
}

pub(crate) fn not_found(handle: &ExecutionHandle, now: Timestamp) -> ExecutionInfo {
    ExecutionInfo {
        handle: handle.clone(),
        nonce: None,
        run: None,
        created: now,
        started: None,
        finished: None,
        task_count: 0,
        status: ExecutionStatus::NotFound,
    }
}

pub(crate) fn info(e: &model::Execution, tasks: Option<&[model::Task]>) -> ExecutionInfo {
    ExecutionInfo {
        handle: ExecutionHandle(e.name.clone()),
        nonce: env_of(e, assumptions::NONCE_IN_EXECUTION_TEMPLATE).and_then(|n| Nonce::parse(n).ok()),
        run: env_of(e, assumptions::RUN_ID_IN_EXECUTION_TEMPLATE).and_then(|r| RunId::parse(r).ok()),
        created: ts(e.create_time.as_ref()).unwrap_or(Timestamp::from_micros(0)),
        started: ts(e.start_time.as_ref()),
        finished: ts(e.completion_time.as_ref()),
        task_count: u32::try_from(e.task_count).unwrap_or(0),
        status: status(e, tasks),
    }
}

/// One task's last attempt: exit code and signal (absent when zero, as the
/// API leaves them) and its status message.
fn result_of(t: &model::Task) -> (Option<i32>, Option<i32>, String) {
    let Some(r) = &t.last_attempt_result else { return (None, None, String::new()) };
    let message = r.status.as_ref().map(|s| s.message.clone()).unwrap_or_default();
    let code = (r.exit_code != 0).then_some(r.exit_code);
    let signal = (r.term_signal != 0).then_some(r.term_signal);
    (code, signal, message)
}

fn condition_message(e: &model::Execution) -> String {
    e.conditions.iter().map(|c| c.message.as_str()).filter(|m| !m.is_empty()).collect::<Vec<_>>().join("; ")
}

pub(crate) fn status(e: &model::Execution, tasks: Option<&[model::Task]>) -> ExecutionStatus {
    if e.completion_time.is_none() {
        return ExecutionStatus::Running;
    }
    if e.task_count > 0 && e.succeeded_count >= e.task_count {
        return ExecutionStatus::Succeeded;
    }
    let mut tasks: Vec<&model::Task> = tasks.unwrap_or_default().iter().collect();
    tasks.sort_by_key(|t| t.index);
    let results: Vec<(Option<i32>, Option<i32>, String)> = tasks.iter().map(|t| result_of(t)).collect();
    if e.cancelled_count > 0 {
        // Partial when any task flushed its checkpoints.
        let flushed = results.iter().any(|(c, _, _)| *c == Some(exit::CHECKPOINTED));
        let exit_code =
            if flushed { Some(exit::CHECKPOINTED) } else { results.iter().find_map(|(c, _, _)| *c) };
        return ExecutionStatus::Cancelled { exit_code };
    }
    // The first task that did not succeed speaks for the execution.
    let failed = results
        .iter()
        .find(|(c, s, _)| c.is_some() || s.is_some())
        .or_else(|| results.iter().find(|(_, _, m)| !m.is_empty()))
        .cloned();
    let (exit_code, signal, mut message) = failed.unwrap_or((None, None, String::new()));
    if message.is_empty() {
        message = condition_message(e);
    }
    let exit_code = match (exit_code, signal) {
        (None, None) if message.to_ascii_lowercase().contains(assumptions::TIMEOUT_MESSAGE) => {
            Some(exit::SIGTERM)
        }
        _ => exit_code,
    };
    ExecutionStatus::Failed { exit_code, signal, message }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(task_count: i32) -> model::Execution {
        model::Execution::new()
            .set_name("projects/p/locations/r/jobs/j/executions/j-abc")
            .set_task_count(task_count)
            .set_create_time(google_cloud_wkt::Timestamp::clamp(100, 0))
            .set_completion_time(google_cloud_wkt::Timestamp::clamp(200, 0))
    }

    fn task(index: i32, code: i32, signal: i32, message: &str) -> model::Task {
        let status = google_cloud_rpc::model::Status::default().set_message(message);
        model::Task::new().set_index(index).set_last_attempt_result(
            model::TaskAttemptResult::new().set_exit_code(code).set_term_signal(signal).set_status(status),
        )
    }

    #[test]
    fn outcomes_map_as_the_seed_table_reports_them() {
        let ok = done(2).set_succeeded_count(2);
        assert_eq!(status(&ok, Some(&[])), ExecutionStatus::Succeeded);
        let running = model::Execution::new().set_task_count(1);
        assert_eq!(status(&running, None), ExecutionStatus::Running);
        let failed = done(2).set_succeeded_count(1).set_failed_count(1);
        let oom = status(&failed, Some(&[task(0, 0, 0, ""), task(1, 137, 0, "")]));
        assert_eq!(mapi_domain::classify(&oom), Some(mapi_domain::AttemptOutcome::OutOfMemory));
        let sig = status(&failed, Some(&[task(1, 0, 9, "")]));
        assert_eq!(sig, ExecutionStatus::Failed { exit_code: None, signal: Some(9), message: String::new() });
        assert_eq!(mapi_domain::classify(&sig), Some(mapi_domain::AttemptOutcome::OutOfMemory));
        let mem = status(&failed, Some(&[task(1, 0, 0, "Memory limit of 8192 MiB exceeded")]));
        assert_eq!(mapi_domain::classify(&mem), Some(mapi_domain::AttemptOutcome::OutOfMemory));
        let timeout = status(&failed, Some(&[task(0, 143, 0, "")]));
        assert_eq!(mapi_domain::classify(&timeout), Some(mapi_domain::AttemptOutcome::TimedOut));
        let timeout = status(&failed, Some(&[task(0, 0, 0, "Task timed out after 3720s")]));
        assert_eq!(mapi_domain::classify(&timeout), Some(mapi_domain::AttemptOutcome::TimedOut));
        let partial = done(2).set_cancelled_count(2);
        assert_eq!(
            status(&partial, Some(&[task(0, 143, 0, ""), task(1, 16, 0, "")])),
            ExecutionStatus::Cancelled { exit_code: Some(exit::CHECKPOINTED) }
        );
        assert_eq!(status(&partial, Some(&[])), ExecutionStatus::Cancelled { exit_code: None });
    }

    #[test]
    fn the_nonce_is_read_from_the_execution_template() {
        let nonce = Nonce::from_bytes([3; 16]);
        let env = model::EnvVar::new().set_name("MAPI_NONCE").set_value(nonce.to_string());
        let e = done(1).set_template(
            model::TaskTemplate::new().set_containers([model::Container::new().set_env([env])]),
        );
        let i = info(&e, None);
        assert_eq!(i.nonce, Some(nonce));
        assert_eq!(i.created, Timestamp::from_secs(100));
        assert_eq!(i.finished, Some(Timestamp::from_secs(200)));
    }
}
