//! The execution host: the process the local-process executor starts for
//! each execution, standing in for Cloud Run's task runner. It outlives the
//! platform process (it runs in its own process group), so a restarted
//! `mapi dev` finds the outcome in `status.json`.
//!
//! For each task it starts the worker in a process group of its own, with a
//! clean environment and Cloud Run's task variables, and then enforces:
//! memory (the group's resident memory over the class's limit: SIGKILL,
//! reported as exit 137 "memory limit exceeded"), the task timeout (SIGTERM,
//! then SIGKILL after the grace period), and cancellation (the same, when
//! the `cancel` file appears).
//!
//! With a sandbox in the spec (the gvisor executor) each task is a `runsc
//! run` of the worker instead (see [`crate::gvisor::task`]): its memory is
//! what gVisor's kernel holds for the sandbox, and signals go to the
//! sandbox's processes through `runsc kill`.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use mapi_clock::{Clock, SystemClock};
use mapi_domain::{ExecutionStatus, exit};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use super::layout::{self, ExecSpec, StatusFile, StopReason, TaskResult};
use super::proc;
use crate::gvisor::task::{SandboxMemory, SandboxSpec};

/// How often the host checks its tasks.
const POLL: Duration = Duration::from_millis(25);

struct Task {
    index: u32,
    child: Child,
    pgid: i32,
    /// The task's container, when it runs in a sandbox.
    container: Option<String>,
    /// Where a sandboxed task's memory is read.
    memory: SandboxMemory,
    started: mapi_domain::Timestamp,
    stopped: Option<StopReason>,
    result: Option<TaskResult>,
}

/// Runs the execution in `dir` to its end and writes `status.json`.
pub fn run(dir: &Path) -> std::io::Result<StatusFile> {
    let clock = SystemClock;
    let spec: ExecSpec = layout::read_json(dir, layout::SPEC)?
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "spec.json is missing"))?;
    if let Some(done) = layout::read_json::<StatusFile>(dir, layout::STATUS)? {
        return Ok(done);
    }
    let started = clock.now();
    let began = Instant::now();
    let mut tasks = Vec::new();
    for index in 0..spec.task_count {
        tasks.push(start_task(dir, &spec, index, clock.now())?);
    }
    let limit = spec.memory_limit_mib * 1024 * 1024;
    let timeout = Duration::from_millis(spec.task_timeout_ms);
    let grace = Duration::from_millis(spec.grace_ms);
    let mut terminating: Option<(StopReason, Instant)> = None;
    loop {
        // Process groups' memory is one scan of `/proc`, needed only for tasks that are host processes.
        let rss = if tasks.iter().any(|t| t.container.is_none() && t.result.is_none()) {
            proc::rss_by_group()
        } else {
            Default::default()
        };
        for t in tasks.iter_mut().filter(|t| t.result.is_none()) {
            if let Some(status) = t.child.try_wait()? {
                t.result = Some(finish(dir, &spec, t, status, clock.now()));
                continue;
            }
            let used = match &t.container {
                Some(_) => t.memory.bytes(t.pgid),
                None => rss.get(&t.pgid).copied(),
            };
            if used.unwrap_or(0) > limit {
                tracing::warn!(task = t.index, limit_mib = spec.memory_limit_mib, "memory limit exceeded");
                t.stopped = Some(StopReason::MemoryLimit);
                signal(dir, &spec, t, Signal::SIGKILL);
            }
        }
        if tasks.iter().all(|t| t.result.is_some()) {
            break;
        }
        let reason = if dir.join(layout::CANCEL).exists() {
            Some(StopReason::Cancelled)
        } else if began.elapsed() >= timeout {
            Some(StopReason::Timeout)
        } else {
            None
        };
        match (terminating, reason) {
            (None, Some(reason)) => {
                tracing::info!(?reason, "stopping the tasks");
                for t in tasks.iter_mut().filter(|t| t.result.is_none()) {
                    t.stopped.get_or_insert(reason);
                    signal(dir, &spec, t, Signal::SIGTERM);
                }
                terminating = Some((reason, Instant::now()));
            }
            (Some((_, since)), _) if since.elapsed() >= grace => {
                for t in tasks.iter().filter(|t| t.result.is_none()) {
                    signal(dir, &spec, t, Signal::SIGKILL);
                }
            }
            _ => {}
        }
        std::thread::sleep(POLL);
    }
    let results: Vec<TaskResult> = tasks.into_iter().filter_map(|t| t.result).collect();
    let status = summarize(&results, spec.memory_limit_mib);
    let file = StatusFile { started, finished: clock.now(), status, tasks: results };
    layout::write_json(dir, layout::STATUS, &file)?;
    Ok(file)
}

fn start_task(dir: &Path, spec: &ExecSpec, index: u32, now: mapi_domain::Timestamp) -> std::io::Result<Task> {
    use std::os::unix::process::CommandExt;
    let tdir = layout::task_dir(dir, index);
    std::fs::create_dir_all(&tdir)?;
    let stdout = std::fs::OpenOptions::new().create(true).append(true).open(tdir.join("stdout.log"))?;
    let stderr = std::fs::OpenOptions::new().create(true).append(true).open(tdir.join("stderr.log"))?;
    let mut env = spec.env.clone();
    env.extend([
        ("CLOUD_RUN_JOB".to_owned(), spec.job.clone()),
        ("CLOUD_RUN_EXECUTION".to_owned(), spec.handle.clone()),
        ("CLOUD_RUN_TASK_INDEX".to_owned(), index.to_string()),
        ("CLOUD_RUN_TASK_COUNT".to_owned(), spec.task_count.to_string()),
        ("CLOUD_RUN_TASK_ATTEMPT".to_owned(), "0".to_owned()),
    ]);
    let (mut cmd, container) = match &spec.sandbox {
        Some(sandbox) => {
            let id = SandboxSpec::container(&spec.handle, index);
            let program = (spec.task.program.as_path(), spec.task.args.as_slice());
            let nonce = spec.nonce.for_task(index);
            (sandbox.task_command(dir, &tdir, &id, &nonce, program, env)?, Some(id))
        }
        None => {
            let mut cmd = std::process::Command::new(&spec.task.program);
            cmd.args(&spec.task.args)
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into()))
                .envs(env);
            (cmd, None)
        }
    };
    cmd.stdin(Stdio::null()).stdout(stdout).stderr(stderr).process_group(0);
    let child = cmd.spawn()?;
    let pgid = child.id() as i32;
    Ok(Task {
        index,
        child,
        pgid,
        container,
        memory: SandboxMemory::default(),
        started: now,
        stopped: None,
        result: None,
    })
}

/// Sends `sig` to a task: to its process group, or to its sandbox's processes through runsc
/// (and, for `SIGKILL`, to the `runsc` processes too, whose sandbox dies with them).
fn signal(dir: &Path, spec: &ExecSpec, t: &Task, sig: Signal) {
    if let (Some(sandbox), Some(id)) = (&spec.sandbox, &t.container) {
        sandbox.signal(dir, id, if sig == Signal::SIGKILL { "KILL" } else { "TERM" });
        if sig != Signal::SIGKILL {
            return;
        }
    }
    let _ = killpg(Pid::from_raw(t.pgid), sig);
}

fn finish(
    dir: &Path,
    spec: &ExecSpec,
    t: &Task,
    status: std::process::ExitStatus,
    now: mapi_domain::Timestamp,
) -> TaskResult {
    use std::os::unix::process::ExitStatusExt;
    // Whatever the task left behind in its group (or sandbox) goes with it.
    let _ = killpg(Pid::from_raw(t.pgid), Signal::SIGKILL);
    if let (Some(sandbox), Some(id)) = (&spec.sandbox, &t.container) {
        sandbox.delete(dir, id);
    }
    TaskResult {
        index: t.index,
        exit_code: status.code(),
        signal: status.signal(),
        stopped: t.stopped,
        started: t.started,
        finished: now,
    }
}

/// The execution's status from its tasks', as Cloud Run reports it: the
/// exit code a signal death implies is reported as Cloud Run would (137
/// for SIGKILL by the memory limit, 143 for the timeout's SIGTERM).
pub fn summarize(tasks: &[TaskResult], limit_mib: u64) -> ExecutionStatus {
    let flushed = tasks.iter().any(|t| t.exit_code == Some(exit::CHECKPOINTED));
    let stopped = |r: StopReason| tasks.iter().any(|t| t.stopped == Some(r));
    if tasks.iter().any(|t| t.stopped == Some(StopReason::MemoryLimit) && t.exit_code != Some(0)) {
        return ExecutionStatus::Failed {
            exit_code: Some(exit::OOM),
            signal: None,
            message: format!("memory limit exceeded ({limit_mib} MiB)"),
        };
    }
    if stopped(StopReason::Cancelled) {
        let code = if flushed { Some(exit::CHECKPOINTED) } else { tasks.iter().find_map(|t| t.exit_code) };
        return ExecutionStatus::Cancelled { exit_code: code };
    }
    if stopped(StopReason::Timeout) && tasks.iter().any(|t| t.exit_code != Some(0)) {
        let code = if flushed { exit::CHECKPOINTED } else { exit::SIGTERM };
        return ExecutionStatus::Failed {
            exit_code: Some(code),
            signal: None,
            message: "task timed out".to_owned(),
        };
    }
    match tasks.iter().find(|t| t.exit_code != Some(0)) {
        None => ExecutionStatus::Succeeded,
        Some(t) => ExecutionStatus::Failed {
            exit_code: t.exit_code,
            signal: t.signal,
            message: match (t.exit_code, t.signal) {
                (Some(c), _) => format!("task {} exited with code {c}", t.index),
                (None, Some(s)) => format!("task {} was killed by signal {s}", t.index),
                _ => format!("task {} failed", t.index),
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use mapi_domain::{AttemptNo, Nonce, ResourceClass, RunId, Timestamp};

    use super::*;
    use crate::local::layout::Command;

    fn spec(script: &str, task_count: u32, timeout_ms: u64, memory_limit_mib: u64) -> ExecSpec {
        ExecSpec {
            handle: "exec-1-test".into(),
            job: "local-s".into(),
            run: RunId::generate(Timestamp::from_secs(1), [1; 10]),
            attempt: AttemptNo::FIRST,
            nonce: Nonce::from_bytes([1; 16]),
            class: ResourceClass::S,
            task_count,
            created: Timestamp::from_secs(1),
            task_timeout_ms: timeout_ms,
            grace_ms: 2_000,
            memory_limit_mib,
            task: Command { program: "/bin/sh".into(), args: vec!["-c".into(), script.into()] },
            env: BTreeMap::from([("GREETING".to_owned(), "hi".to_owned())]),
            sandbox: None,
        }
    }

    fn host(spec: &ExecSpec) -> (tempfile::TempDir, StatusFile) {
        let dir = tempfile::tempdir().expect("tempdir");
        layout::write_json(dir.path(), layout::SPEC, spec).expect("spec");
        let status = run(dir.path()).expect("host run");
        (dir, status)
    }

    #[test]
    fn tasks_get_cloud_run_variables_and_a_clean_environment() {
        let s = spec(
            "echo \"$GREETING $CLOUD_RUN_TASK_INDEX/$CLOUD_RUN_TASK_COUNT ${MAPI_TOKEN_PEPPER:-none}\"",
            2,
            10_000,
            512,
        );
        let (dir, status) = host(&s);
        assert_eq!(status.status, ExecutionStatus::Succeeded);
        for i in 0..2 {
            let out =
                std::fs::read_to_string(layout::task_dir(dir.path(), i).join("stdout.log")).expect("log");
            assert_eq!(out.trim(), format!("hi {i}/2 none"));
        }
        let again = run(dir.path()).expect("rerun");
        assert_eq!(again, status, "a finished execution is not run twice");
    }

    #[test]
    fn a_failing_task_fails_the_execution() {
        let (_d, status) = host(&spec("[ \"$CLOUD_RUN_TASK_INDEX\" = 1 ] && exit 3; exit 0", 2, 10_000, 512));
        assert!(matches!(status.status, ExecutionStatus::Failed { exit_code: Some(3), .. }), "{status:?}");
    }

    #[test]
    fn the_memory_limit_kills_the_whole_group() {
        // The child of the shell allocates: the limit covers the group.
        let script = "python3 -c 'import time; b = bytearray(96 * 1024 * 1024); time.sleep(30)'";
        let (_d, status) = host(&spec(script, 1, 60_000, 32));
        assert!(
            matches!(status.status, ExecutionStatus::Failed { exit_code: Some(137), .. }),
            "{:?}",
            status.status
        );
        assert_eq!(status.tasks[0].stopped, Some(StopReason::MemoryLimit));
    }

    #[test]
    fn timeout_sends_sigterm_and_reports_143_or_16() {
        let (_d, plain) = host(&spec("sleep 30", 1, 300, 512));
        assert_eq!(
            plain.status,
            ExecutionStatus::Failed { exit_code: Some(143), signal: None, message: "task timed out".into() }
        );
        let flushing = "trap 'exit 16' TERM; sleep 30 & wait";
        let (_d, flushed) = host(&spec(flushing, 1, 300, 512));
        assert!(matches!(flushed.status, ExecutionStatus::Failed { exit_code: Some(16), .. }), "{flushed:?}");
    }

    #[test]
    fn sigkill_follows_sigterm_after_the_grace_period() {
        let mut s = spec("trap '' TERM; sleep 30 & wait; sleep 30", 1, 200, 512);
        s.grace_ms = 300;
        let started = std::time::Instant::now();
        let (_d, status) = host(&s);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(status.tasks[0].signal, Some(9));
        assert!(matches!(status.status, ExecutionStatus::Failed { exit_code: Some(143), .. }));
    }

    #[test]
    fn the_cancel_file_stops_the_tasks() {
        let dir = tempfile::tempdir().expect("tempdir");
        layout::write_json(dir.path(), layout::SPEC, &spec("sleep 30", 1, 60_000, 512)).expect("spec");
        let path = dir.path().to_owned();
        let handle = std::thread::spawn(move || run(&path));
        std::thread::sleep(Duration::from_millis(200));
        std::fs::write(dir.path().join(layout::CANCEL), b"{}").expect("cancel");
        let status = handle.join().expect("thread").expect("run");
        assert!(matches!(status.status, ExecutionStatus::Cancelled { .. }), "{status:?}");
    }

    /// Hand-written outcomes for task results.
    #[test]
    fn summaries() {
        let t = |exit_code, signal, stopped| TaskResult {
            index: 0,
            exit_code,
            signal,
            stopped,
            started: Timestamp::EPOCH,
            finished: Timestamp::EPOCH,
        };
        let oom = summarize(&[t(None, Some(9), Some(StopReason::MemoryLimit))], 64);
        assert!(matches!(oom, ExecutionStatus::Failed { exit_code: Some(137), .. }));
        assert_eq!(
            summarize(&[t(Some(0), None, None), t(Some(0), None, None)], 64),
            ExecutionStatus::Succeeded
        );
        assert_eq!(
            summarize(&[t(Some(16), None, Some(StopReason::Cancelled))], 64),
            ExecutionStatus::Cancelled { exit_code: Some(16) }
        );
        // Finished just as the timeout struck: success stands.
        assert_eq!(summarize(&[t(Some(0), None, Some(StopReason::Timeout))], 64), ExecutionStatus::Succeeded);
        let killed = summarize(&[t(None, Some(11), None)], 64);
        assert!(matches!(killed, ExecutionStatus::Failed { exit_code: None, signal: Some(11), .. }));
    }
}
