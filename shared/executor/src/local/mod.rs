//! The local-process executor: each execution is a host process (see
//! [`host`]) that runs the worker as child processes on this machine.
//! Executions live in `$MAPI_HOME/executions/<handle>/` (see [`layout`]),
//! so they and their outcomes survive a restart of the platform.
//!
//! Forgetting an execution removes its directory, only once it finished and
//! the log forwarder marked its events delivered ([`forward::FORWARDED`]),
//! or once its host died without an outcome (nothing will finish it). The
//! directory is first renamed to a hidden name (`.forgotten-<handle>`), so
//! the handle is unknown at once even if the removal fails half-way; the
//! next forget of the handle removes what is left.
//!
//! Isolation is only a process: this executor is for one machine and
//! trusted code, and reports `Isolation::Process`. With
//! [`LocalConfig::runsc`] set it is the gvisor executor: the same host runs
//! each task in a gVisor sandbox ([`crate::gvisor`]), with no network but
//! its bootstrap and signed URLs, and reports `Isolation::Gvisor` with
//! egress and DNS enforced.

pub mod forward;
pub mod host;
pub mod layout;
mod logs;
pub(crate) mod proc;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::Clock;
use mapi_domain::{ExecutionStatus, ResourceClass, Timestamp};

use crate::gvisor::task::SandboxSpec;
use crate::{
    AttemptSubmit, Capabilities, ExecutionHandle, ExecutionInfo, Executor, ExecutorError, Forgot, Isolation,
    LogPage, SubmitError,
};
use layout::{Command, ExecSpec, HostRecord, StatusFile};

/// Settings of the local-process executor.
#[derive(Clone, Debug)]
pub struct LocalConfig {
    /// Where executions live: `$MAPI_HOME/executions`.
    pub dir: PathBuf,
    /// How to start a host; `local-exec --dir <dir>` is appended.
    pub host: Command,
    /// The worker each task runs.
    pub task: Command,
    /// The job's static environment (e.g. `MAPI_BOOTSTRAP_URL`).
    pub static_env: BTreeMap<String, String>,
    /// The backstop after the run's timeout.
    pub timeout_margin: Duration,
    /// SIGTERM to SIGKILL.
    pub grace: Duration,
    /// Memory limits in MiB per class, replacing the class's own.
    pub memory_mib: BTreeMap<ResourceClass, u64>,
    /// The regions it reports, for residency: the machine stands in for them.
    pub regions: Vec<String>,
    /// `runsc`, to run each task in a gVisor sandbox (the gvisor executor); `None`: tasks
    /// are host processes.
    pub runsc: Option<PathBuf>,
    /// The methods this machine's Python cannot run, with why (see
    /// `mapi_methods::python_unavailable`): refused at placement.
    pub unavailable: BTreeMap<String, String>,
    /// The GPUs a task of the GPU class gets: those `nvidia-smi` lists on
    /// this machine (see [`visible_gpus`]), at most one; 0 runs the GPU class
    /// on the CPU (its runs carry `GPU_UNAVAILABLE`).
    pub gpus: u32,
}

/// The NVIDIA GPUs `nvidia-smi -L` lists on this machine (0 where it is
/// missing or fails: no driver, no device).
pub fn visible_gpus() -> u32 {
    let listed = std::process::Command::new("nvidia-smi")
        .arg("-L")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success());
    listed.map_or(0, |o| {
        let n = String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with("GPU ")).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    })
}

/// The local-process adapter of the Executor port.
#[derive(Clone, Debug)]
pub struct LocalProcessExecutor {
    config: Arc<LocalConfig>,
    clock: Arc<dyn Clock>,
    /// Each execution made, told to a log forwarder of this process.
    made: forward::NewExecutions,
}

/// The executor's name with tasks as host processes.
pub const LOCAL_PROCESS: &str = "local-process";
/// The executor's name with tasks in gVisor sandboxes.
pub const GVISOR: &str = "gvisor";

fn internal(e: impl std::error::Error + Send + Sync + 'static) -> ExecutorError {
    ExecutorError::Internal(mapi_domain::Cause::of(e))
}

fn not_found(handle: &ExecutionHandle) -> ExecutionInfo {
    ExecutionInfo {
        handle: handle.clone(),
        nonce: None,
        run: None,
        created: Timestamp::EPOCH,
        started: None,
        finished: None,
        task_count: 0,
        status: ExecutionStatus::NotFound,
    }
}

impl LocalProcessExecutor {
    /// # Errors
    ///
    /// The executions directory cannot be made, or (gvisor) the bootstrap is not the
    /// platform's own HTTP route.
    pub fn new(config: LocalConfig, clock: Arc<dyn Clock>) -> Result<Self, ExecutorError> {
        std::fs::create_dir_all(&config.dir).map_err(internal)?;
        if let Some(runsc) = &config.runsc {
            let url = config.static_env.get("MAPI_BOOTSTRAP_URL").map_or("", String::as_str);
            SandboxSpec::for_bootstrap(runsc, url).map_err(|e| internal(std::io::Error::other(e)))?;
        }
        Ok(LocalProcessExecutor { config: Arc::new(config), clock, made: forward::NewExecutions::default() })
    }

    /// The executions this executor makes, as it makes them: a
    /// [`forward::LogForwarder`] given these reads a new execution without
    /// listing the whole executions directory again.
    pub fn new_executions(&self) -> forward::NewExecutions {
        self.made.clone()
    }

    /// Where the execution's files are.
    pub fn exec_dir(&self, handle: &ExecutionHandle) -> Option<PathBuf> {
        let ok = !handle.0.is_empty()
            && handle.0.len() <= 100
            && handle.0.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        ok.then(|| self.config.dir.join(&handle.0))
    }

    /// The executions directory.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    fn memory_limit_mib(&self, class: ResourceClass) -> u64 {
        self.config.memory_mib.get(&class).copied().unwrap_or(u64::from(class.memory_gib()) * 1024)
    }

    fn info(&self, handle: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError> {
        let Some(dir) = self.exec_dir(handle) else { return Ok(not_found(handle)) };
        let Some(spec) = layout::read_json::<ExecSpec>(&dir, layout::SPEC).map_err(internal)? else {
            return Ok(not_found(handle));
        };
        let mut info = ExecutionInfo {
            handle: handle.clone(),
            nonce: Some(spec.nonce.clone()),
            run: Some(spec.run.clone()),
            created: spec.created,
            started: None,
            finished: None,
            task_count: spec.task_count,
            status: ExecutionStatus::Running,
        };
        let status = || layout::read_json::<StatusFile>(&dir, layout::STATUS).map_err(internal);
        let finished = |mut info: ExecutionInfo, done: StatusFile| {
            info.started = Some(done.started);
            info.finished = Some(done.finished);
            info.status = done.status;
            info
        };
        if let Some(done) = status()? {
            return Ok(finished(info, done));
        }
        let alive = layout::read_json::<HostRecord>(&dir, layout::HOST)
            .map_err(internal)?
            .is_some_and(|h| proc::is_same_process(h.pid, h.start_ticks));
        if alive {
            info.started = Some(spec.created);
            return Ok(info);
        }
        // The host may have written its outcome and exited since we looked.
        if let Some(done) = status()? {
            return Ok(finished(info, done));
        }
        // The host died without an outcome (killed, or the machine
        // restarted): the execution is gone.
        info.status = ExecutionStatus::NotFound;
        Ok(info)
    }

    fn forget_now(&self, handle: &ExecutionHandle) -> Result<Forgot, ExecutorError> {
        let Some(dir) = self.exec_dir(handle) else { return Ok(Forgot::Gone) };
        let trash = self.config.dir.join(format!(".forgotten-{}", handle.0));
        let remove_trash = || match std::fs::remove_dir_all(&trash) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(internal(e)),
            _ => Ok(Forgot::Gone),
        };
        if !dir.exists() {
            return remove_trash();
        }
        // Finished (with its events delivered), or its host died without an outcome (`NotFound`).
        let info = self.info(handle)?;
        let undelivered = info.finished.is_some() && !dir.join(forward::FORWARDED).exists();
        if info.status == ExecutionStatus::Running || undelivered {
            return Ok(Forgot::Kept);
        }
        std::fs::rename(&dir, &trash).map_err(internal)?;
        remove_trash()
    }

    /// The sandbox of an execution with `env`, when tasks run under gVisor. Fails closed: a
    /// gvisor executor never runs a task outside a sandbox.
    fn sandbox(&self, env: &BTreeMap<String, String>) -> Result<Option<SandboxSpec>, SubmitError> {
        let url = env.get("MAPI_BOOTSTRAP_URL").map_or("", String::as_str);
        self.config
            .runsc
            .as_ref()
            .map(|runsc| SandboxSpec::for_bootstrap(runsc, url).map_err(SubmitError::Refused))
            .transpose()
    }

    fn new_handle(&self) -> Result<ExecutionHandle, SubmitError> {
        let mut entropy = [0u8; 4];
        getrandom::fill(&mut entropy).map_err(|e| SubmitError::Unavailable(mapi_domain::Cause::of(e)))?;
        Ok(ExecutionHandle(format!("exec-{}-{}", self.clock.now().as_millis(), hex::encode(entropy))))
    }
}

#[async_trait]
impl Executor for LocalProcessExecutor {
    fn backstop_margin(&self) -> Duration {
        self.config.timeout_margin + self.config.grace
    }

    fn capabilities(&self) -> Capabilities {
        let sandboxed = self.config.runsc.is_some();
        Capabilities {
            executor: if sandboxed { GVISOR } else { LOCAL_PROCESS }.to_owned(),
            isolation: if sandboxed { Isolation::Gvisor } else { Isolation::Process },
            // Every class: a GPU-class task uses the machine's GPU when it has one, else the CPU.
            classes: ResourceClass::ALL.to_vec(),
            enforces_memory_limit: true,
            egress_enforced: sandboxed,
            dns_enforced: sandboxed,
            remote_control_api: false,
            max_task_count: 64,
            regions: self.config.regions.clone(),
            // A gVisor sandbox is given no device: its GPU-class tasks use the CPU.
            gpus: if sandboxed { 0 } else { self.config.gpus.min(1) },
        }
    }

    fn unavailable(&self, method: &str) -> Option<String> {
        self.config.unavailable.get(method).cloned()
    }

    fn check_placement(&self, class: ResourceClass, method: &str) -> Result<(), String> {
        if let Some(why) = self.unavailable(method) {
            return Err(why);
        }
        if class == ResourceClass::GPU && !mapi_domain::class::runs_on_gpu(method) {
            return Err(mapi_domain::class::GPU_ONLY_DL.to_owned());
        }
        Ok(())
    }

    async fn submit(&self, a: &AttemptSubmit) -> Result<ExecutionHandle, SubmitError> {
        self.check_placement(a.class, &a.method).map_err(SubmitError::Refused)?;
        if a.task_count == 0 || a.task_count > self.capabilities().max_task_count {
            return Err(SubmitError::Refused(format!("task count {} is out of range 1 to 64", a.task_count)));
        }
        let handle = self.new_handle()?;
        let dir = self.config.dir.join(&handle.0);
        let unavailable = |e: std::io::Error| SubmitError::Unavailable(mapi_domain::Cause::of(e));
        std::fs::create_dir_all(&dir).map_err(unavailable)?;
        let mut env = self.config.static_env.clone();
        env.extend(a.env.clone());
        let spec = ExecSpec {
            handle: handle.0.clone(),
            job: format!("local-{}", a.class.as_str().to_ascii_lowercase()),
            run: a.run.clone(),
            attempt: a.attempt,
            nonce: a.nonce.clone(),
            class: a.class,
            task_count: a.task_count,
            created: self.clock.now(),
            task_timeout_ms: u64::try_from((a.timeout + self.config.timeout_margin).as_millis())
                .unwrap_or(u64::MAX),
            grace_ms: u64::try_from(self.config.grace.as_millis()).unwrap_or(u64::MAX),
            memory_limit_mib: self.memory_limit_mib(a.class),
            task: self.config.task.clone(),
            sandbox: self.sandbox(&env)?,
            env,
        };
        layout::write_json(&dir, layout::SPEC, &spec).map_err(unavailable)?;
        self.made.tell(&handle.0);
        let log = std::fs::File::create(dir.join("host.log")).map_err(unavailable)?;
        let log2 = log.try_clone().map_err(unavailable)?;
        let mut child = tokio::process::Command::new(&self.config.host.program)
            .args(&self.config.host.args)
            .arg("local-exec")
            .arg("--dir")
            .arg(&dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2)
            .process_group(0)
            .spawn()
            .map_err(|e| {
                SubmitError::Unavailable(mapi_domain::Cause::new("cannot start the execution host", e))
            })?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        let record = HostRecord { pid, start_ticks: proc::start_ticks(pid).unwrap_or(0) };
        layout::write_json(&dir, layout::HOST, &record).map_err(unavailable)?;
        // Reap the host when it exits, so it leaves no zombie while we live.
        tokio::spawn(async move {
            let _ = child.wait().await;
        });
        tracing::info!(handle = %handle, run = %a.run, attempt = %a.attempt, class = %a.class, "execution started");
        Ok(handle)
    }

    async fn status(&self, handle: &ExecutionHandle) -> Result<ExecutionInfo, ExecutorError> {
        let (this, handle) = (self.clone(), handle.clone());
        tokio::task::spawn_blocking(move || this.info(&handle)).await.map_err(internal)?
    }

    async fn list_recent(&self, since: Timestamp) -> Result<Vec<ExecutionInfo>, ExecutorError> {
        let this = self.clone();
        tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for entry in std::fs::read_dir(&this.config.dir).map_err(internal)?.flatten() {
                let Some(name) = entry.file_name().to_str().map(str::to_owned) else { continue };
                let info = this.info(&ExecutionHandle(name))?;
                // Directories without a spec are not executions.
                if info.nonce.is_some() && info.created >= since {
                    out.push(info);
                }
            }
            out.sort_by(|a, b| (a.created, &a.handle).cmp(&(b.created, &b.handle)));
            Ok(out)
        })
        .await
        .map_err(internal)?
    }

    async fn logs(
        &self,
        handle: &ExecutionHandle,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<LogPage, ExecutorError> {
        let Some(dir) = self.exec_dir(handle) else { return Ok(LogPage::default()) };
        let cursor = cursor.map(str::to_owned);
        tokio::task::spawn_blocking(move || logs::read(&dir, cursor.as_deref(), limit))
            .await
            .map_err(internal)?
            .map_err(|e| match e {
                logs::ReadError::Cursor => ExecutorError::Cursor(e.to_string()),
                logs::ReadError::Io(e) => internal(e),
            })
    }

    async fn forget(&self, handle: &ExecutionHandle) -> Result<Forgot, ExecutorError> {
        let (this, handle) = (self.clone(), handle.clone());
        tokio::task::spawn_blocking(move || this.forget_now(&handle)).await.map_err(internal)?
    }

    async fn cancel(&self, handle: &ExecutionHandle) -> Result<(), ExecutorError> {
        let Some(dir) = self.exec_dir(handle) else { return Ok(()) };
        if dir.join(layout::SPEC).exists() {
            layout::write_json(&dir, layout::CANCEL, &serde_json::json!({"at": self.clock.now()}))
                .map_err(internal)?;
        }
        Ok(())
    }
}
