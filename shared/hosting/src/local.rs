//! The local adapter of the Hosting port: each revision is a model server
//! process (`mapi worker serve`) on a loopback port, supervised the way the
//! local executor supervises executions.
//!
//! - A service is `{dir}/{service}/service.json` (written whole, synced,
//!   renamed), so services outlive the process; their servers start again
//!   on demand. A revision's bundle is staged at `{dir}/{service}/{tag}/objects/`
//!   by object key, which is where its server reads it.
//! - A revision is `Ready` once its server answered `GET /health`, and
//!   `Failed` with the server's last error line when it exited first (a
//!   bundle that does not verify is refused that way).
//! - A server that crashed is started again by the next `route` to it; one
//!   not asked for anything for the idle time is stopped when the service
//!   scales to zero (`min = 0`), and started by the next `route`.
//!
//! - A container revision (the tenant's own image) runs under gVisor as
//!   [`crate::sandboxed`] says: its image is unpacked at
//!   `{dir}/{service}/{tag}/bundle/rootfs` when it rolls out, its secrets
//!   are read from the secrets file each time it starts, and the platform
//!   reaches it on a loopback port joined to the sandbox's socket.
//!
//! One process per revision: `scaling.max` is recorded, not enforced here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

use crate::{
    Accelerator, Access, Hosting, HostingError, MANAGED_LABEL, RevisionSpec, RevisionState, Rollout, Route,
    Scaling, ServiceSpec, ServiceState, Serving, Traffic, check_scaling, check_split, server_env,
};

/// What a server that lost its port to another process says (the OS's words).
const PORT_TAKEN: &str = "Address already in use";
/// How many ports a start tries.
const PORT_ATTEMPTS: u32 = 3;

/// How long a starting server may take to answer its health check.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The program that serves a revision, with its leading arguments (`serve` included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerCommand {
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The `runsc` a plugin's model runs under (given to the server as
    /// `MAPI_SERVE_RUNSC`); `None`: plugins' models are refused.
    pub sandbox: Option<PathBuf>,
    /// What runs tenants' containers; `None`: container revisions are refused.
    pub containers: Option<crate::sandboxed::ContainerRuntime>,
    /// The local secrets file container revisions read their secrets from.
    pub secrets: PathBuf,
    /// Where tenants' images must lie, one directory per tenant (`{images}/{tenant}/…`), so no
    /// tenant runs another's; `None`: anywhere (one person's machine).
    pub images: Option<PathBuf>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredRevision {
    tag: String,
    #[serde(flatten)]
    runs: Runs,
    rollout: Rollout,
}

/// What a revision's process is.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Runs {
    Model {
        bundle: String,
        manifest_sha256: String,
        trusted_keys: String,
    },
    Image {
        image: String,
        port: u16,
        health_path: String,
        tenant: mapi_domain::TenantId,
        secrets: Vec<StoredSecret>,
    },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredSecret {
    env: String,
    name: String,
    version: String,
}

impl Runs {
    fn health_path(&self) -> &str {
        match self {
            Runs::Model { .. } => server_env::HEALTH_PATH,
            Runs::Image { health_path, .. } => health_path,
        }
    }
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct StoredService {
    name: String,
    region: String,
    accelerator: Accelerator,
    scaling: Scaling,
    access: Access,
    labels: BTreeMap<String, String>,
    revisions: Vec<StoredRevision>,
    traffic: Vec<Traffic>,
}

#[derive(Debug)]
struct Proc {
    child: Child,
    port: u16,
    last_used: Timestamp,
    /// The last line the server wrote to stderr.
    last_line: Arc<Mutex<String>>,
    /// A container's sandbox and the task joining its port to the sandbox's socket.
    sandbox: Option<Sandboxed>,
    /// When it was started (on the platform's clock).
    started: Timestamp,
}

#[derive(Debug)]
struct Sandboxed {
    runtime: crate::sandboxed::ContainerRuntime,
    state: PathBuf,
    id: String,
    joiner: tokio::task::JoinHandle<()>,
}

/// A sandbox dropped is killed and removed, so none outlives the platform.
impl Drop for Sandboxed {
    fn drop(&mut self) {
        self.joiner.abort();
        self.runtime.remove(&self.state, &self.id);
    }
}

/// How long a stopped container may take to finish what it serves before it is killed.
const SANDBOX_GRACE: Duration = Duration::from_secs(2);

impl Proc {
    /// Stops the server: SIGTERM, so it finishes what it serves (`kill_on_drop`
    /// backs it up); a sandbox is killed and removed [`SANDBOX_GRACE`] later.
    fn stop(&mut self) {
        terminate(&mut self.child);
        if let Some(sandbox) = self.sandbox.take() {
            std::thread::spawn(move || {
                std::thread::sleep(SANDBOX_GRACE);
                drop(sandbox);
            });
        }
    }
}

#[derive(Debug, Default)]
struct Services {
    stored: BTreeMap<String, StoredService>,
    procs: BTreeMap<(String, String), Proc>,
    /// The lifetimes of servers that stopped, by service: (started, stopped).
    ended: BTreeMap<String, Vec<(Timestamp, Timestamp)>>,
}

/// How long the lifetimes of stopped servers are kept for [`Hosting::instance_time`].
const LIFETIMES_KEPT: Duration = Duration::from_secs(2 * 24 * 3600);

impl Services {
    /// Removes revision `key`'s server (stopping it) and records its lifetime, ending `now`.
    fn retire(&mut self, key: &(String, String), now: Timestamp) -> Option<Proc> {
        let mut proc = self.procs.remove(key)?;
        proc.stop();
        let ended = self.ended.entry(key.0.clone()).or_default();
        ended.retain(|(_, stop)| now.since(*stop) < LIFETIMES_KEPT);
        ended.push((proc.started, now));
        Some(proc)
    }

    /// The time `service`'s servers were up within `[from, to)` (those running count up to `now`).
    fn instance_time(&self, service: &str, (from, to): (Timestamp, Timestamp), now: Timestamp) -> Duration {
        let overlap = |(start, stop): (Timestamp, Timestamp)| {
            let (a, b) = (start.max(from), stop.min(to));
            if b > a { b.since(a) } else { Duration::ZERO }
        };
        let ended = self.ended.get(service).into_iter().flatten().map(|l| overlap(*l));
        let running =
            self.procs.iter().filter(|((s, _), _)| s == service).map(|(_, p)| overlap((p.started, now)));
        ended.chain(running).sum()
    }
}

/// The local hosting adapter.
#[derive(Clone, Debug)]
pub struct LocalHosting {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    dir: PathBuf,
    server: ServerCommand,
    idle: Duration,
    clock: Arc<dyn Clock>,
    services: tokio::sync::Mutex<Services>,
    http: reqwest::Client,
    spread: AtomicU64,
    reaper: std::sync::Once,
}

fn io(what: &str, e: std::io::Error) -> HostingError {
    HostingError::Unavailable(mapi_domain::Cause::new(what, e))
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<(), HostingError> {
    use std::io::Write;
    let dir =
        path.parent().ok_or_else(|| HostingError::Invalid(format!("{} has no parent", path.display())))?;
    std::fs::create_dir_all(dir).map_err(|e| io(&dir.display().to_string(), e))?;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp.display().to_string(), e))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).map_err(|e| io(&tmp.display().to_string(), e))?;
    std::fs::rename(&tmp, path).map_err(|e| io(&path.display().to_string(), e))
}

impl LocalHosting {
    /// Opens the services under `dir` (none are started until asked for).
    /// From the first call on the runtime, a background task stops idle
    /// servers of services that scale to zero.
    pub fn open(
        dir: &Path,
        server: ServerCommand,
        idle: Duration,
        clock: Arc<dyn Clock>,
    ) -> Result<LocalHosting, HostingError> {
        std::fs::create_dir_all(dir).map_err(|e| io(&dir.display().to_string(), e))?;
        let mut stored = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(|e| io(&dir.display().to_string(), e))? {
            let path = entry.map_err(|e| io("endpoints directory", e))?.path().join("service.json");
            let Ok(bytes) = std::fs::read(&path) else { continue };
            let service: StoredService = serde_json::from_slice(&bytes).map_err(|e| {
                HostingError::Unavailable(mapi_domain::Cause::new(path.display().to_string(), e))
            })?;
            stored.insert(service.name.clone(), service);
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .map_err(|e| HostingError::Unavailable(mapi_domain::Cause::of(e)))?;
        let inner = Arc::new(Inner {
            dir: dir.to_path_buf(),
            server,
            idle,
            clock,
            services: tokio::sync::Mutex::new(Services {
                stored,
                procs: BTreeMap::new(),
                ended: BTreeMap::new(),
            }),
            http,
            spread: AtomicU64::new(0),
            reaper: std::sync::Once::new(),
        });
        Ok(LocalHosting { inner })
    }

    /// The loopback port a revision's server listens on, if it runs.
    pub async fn port_of(&self, service: &str, tag: &str) -> Option<u16> {
        let s = self.inner.services.lock().await;
        s.procs.get(&(service.to_owned(), tag.to_owned())).map(|p| p.port)
    }

    /// How many servers run now.
    pub async fn running(&self) -> usize {
        let mut s = self.inner.services.lock().await;
        let now = self.inner.clock.now();
        let exited: Vec<_> = s
            .procs
            .iter_mut()
            .filter_map(|(k, p)| (!matches!(p.child.try_wait(), Ok(None))).then(|| k.clone()))
            .collect();
        for key in exited {
            s.retire(&key, now);
        }
        s.procs.len()
    }
}

impl Inner {
    /// Starts the idle reaper once, on the runtime of the first call.
    fn start_reaper(self: &Arc<Self>) {
        self.reaper.call_once(|| {
            let weak = Arc::downgrade(self);
            let every = (self.idle / 4).clamp(Duration::from_millis(200), Duration::from_secs(30));
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    let Some(inner) = weak.upgrade() else { return };
                    inner.reap().await;
                }
            });
        });
    }

    fn service_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn persist(&self, service: &StoredService) -> Result<(), HostingError> {
        let bytes = serde_json::to_vec_pretty(service).map_err(|e| HostingError::Invalid(e.to_string()))?;
        write_synced(&self.service_dir(&service.name).join("service.json"), &bytes)
    }

    fn stage(&self, service: &str, revision: &RevisionSpec) -> Result<(), HostingError> {
        let model = match &revision.serves {
            Serving::Model(model) => model,
            Serving::Image(_) if self.server.containers.is_none() => {
                return Err(HostingError::Invalid(CONTAINERS_REFUSED.to_owned()));
            }
            // Unpacked as it rolls out: an image may take a while.
            Serving::Image(_) => return Ok(()),
        };
        let root = self.service_dir(service).join(&revision.tag).join("objects");
        for f in &model.files {
            if f.key.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
                return Err(HostingError::Invalid(format!(
                    "bundle file key `{}` is not a plain path",
                    f.key
                )));
            }
            write_synced(&root.join(&f.key), &f.bytes)?;
        }
        Ok(())
    }

    /// Unpacks a container revision's image into its bundle's `rootfs`, once.
    async fn unpack(&self, service: &str, revision: &StoredRevision) -> Result<(), String> {
        let Runs::Image { image, .. } = &revision.runs else { return Ok(()) };
        let bundle = self.service_dir(service).join(&revision.tag).join("bundle");
        let image = PathBuf::from(image);
        if !image.exists() {
            return Err(format!(
                "{} does not exist on this machine: give the path of an OCI image layout (a directory, or \
                 its tar archive), e.g. from `skopeo copy docker://IMAGE oci:DIR`",
                image.display()
            ));
        }
        tokio::task::spawn_blocking(move || {
            let done = bundle.join("unpacked");
            if done.is_file() {
                return Ok(());
            }
            let rootfs = bundle.join("rootfs");
            if rootfs.exists() {
                std::fs::remove_dir_all(&rootfs).map_err(|e| e.to_string())?;
            }
            std::fs::create_dir_all(&rootfs).map_err(|e| e.to_string())?;
            let config = crate::oci::unpack(&image, &rootfs).map_err(|e| e.to_string())?;
            crate::sandboxed::prepare_rootfs(&rootfs).map_err(|e| e.to_string())?;
            let config = serde_json::to_vec(&config).map_err(|e| e.to_string())?;
            write_synced(&bundle.join("image.json"), &config).map_err(|e| e.to_string())?;
            write_synced(&done, b"").map_err(|e| e.to_string())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    fn spawn(&self, service: &str, revision: &StoredRevision) -> Result<Proc, HostingError> {
        let (bundle, manifest_sha256, trusted_keys) = match &revision.runs {
            Runs::Model { bundle, manifest_sha256, trusted_keys } => (bundle, manifest_sha256, trusted_keys),
            Runs::Image { port, tenant, secrets, .. } => {
                return self.spawn_container(service, revision, (*port, tenant), secrets);
            }
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| io("a loopback port", e))?
            .port();
        let objects = self.service_dir(service).join(&revision.tag).join("objects");
        let mut cmd = tokio::process::Command::new(&self.server.program);
        cmd.args(&self.server.args)
            .env(server_env::PORT, port.to_string())
            .env(server_env::LISTEN, "127.0.0.1")
            .env(server_env::OBJECTS, &objects)
            .env(server_env::BUNDLE, bundle)
            .env(server_env::MANIFEST_SHA256, manifest_sha256)
            .env(server_env::TRUSTED_KEYS, trusted_keys)
            .env(server_env::REVISION, &revision.tag)
            .env(server_env::RUNSC, self.server.sandbox.as_deref().unwrap_or(Path::new("")))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let program = self.server.program.display().to_string();
        self.supervise(cmd, &program, port, None)
    }

    /// Starts a container revision's sandbox and joins a loopback port to its socket.
    fn spawn_container(
        &self,
        service: &str,
        revision: &StoredRevision,
        (inner_port, tenant): (u16, &mapi_domain::TenantId),
        secrets: &[StoredSecret],
    ) -> Result<Proc, HostingError> {
        let runtime =
            self.server.containers.clone().ok_or_else(|| HostingError::Invalid(CONTAINERS_REFUSED.into()))?;
        let dir = self.service_dir(service).join(&revision.tag);
        let (bundle, state, run) = (dir.join("bundle"), dir.join("state"), dir.join("run"));
        let image: crate::oci::ImageConfig = std::fs::read(bundle.join("image.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .ok_or_else(|| {
                HostingError::Invalid(format!("the image of {service}/{} is not unpacked", revision.tag))
            })?;
        let wanted: Vec<crate::SecretEnv> = secrets
            .iter()
            .map(|s| crate::SecretEnv {
                env: s.env.clone(),
                name: s.name.clone(),
                version: s.version.clone(),
            })
            .collect();
        let env = crate::sandboxed::read_secrets(&self.server.secrets, tenant, &wanted)
            .map_err(HostingError::Invalid)?;
        for d in [&state, &run] {
            std::fs::create_dir_all(d).map_err(|e| io(&d.display().to_string(), e))?;
        }
        // `nobody` in the sandbox creates the socket here.
        set_mode(&run, 0o777)?;
        let socket = run.join(crate::sandboxed::SOCKET);
        let _ = std::fs::remove_file(&socket);
        let spec = runtime.runtime_spec(&image, inner_port, &env, &run);
        let spec = serde_json::to_vec_pretty(&spec).map_err(|e| HostingError::Invalid(e.to_string()))?;
        write_synced(&bundle.join("config.json"), &spec)?;
        let id = format!("{service}-{}", revision.tag);
        runtime.remove(&state, &id);
        let mut cmd = tokio::process::Command::from(runtime.runsc(&state));
        cmd.arg("run")
            .arg("--bundle")
            .arg(&bundle)
            .arg(&id)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| io("a loopback port", e))?;
        let port = listener.local_addr().map_err(|e| io("a loopback port", e))?.port();
        listener.set_nonblocking(true).map_err(|e| io("a loopback port", e))?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(|e| io("a loopback port", e))?;
        let joiner = tokio::spawn(join_to_socket(listener, socket));
        let sandbox = Sandboxed { runtime, state, id, joiner };
        self.supervise(cmd, "runsc", port, Some(sandbox))
    }

    /// Starts `cmd`, keeping its last stderr line (a JSON line's `message`).
    fn supervise(
        &self,
        mut cmd: tokio::process::Command,
        program: &str,
        port: u16,
        sandbox: Option<Sandboxed>,
    ) -> Result<Proc, HostingError> {
        let mut child = cmd.spawn().map_err(|e| io(program, e))?;
        let last_line = Arc::new(Mutex::new(String::new()));
        if let Some(stderr) = child.stderr.take() {
            let last = last_line.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let message = serde_json::from_str::<serde_json::Value>(&line)
                        .ok()
                        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
                        .unwrap_or(line);
                    if let Ok(mut l) = last.lock() {
                        *l = message;
                    }
                }
            });
        }
        let now = self.clock.now();
        Ok(Proc { child, port, last_used: now, last_line, sandbox, started: now })
    }

    /// Waits until the server answers its health check; the error is why it never will.
    async fn await_health(
        &self,
        (port, path): (u16, &str),
        proc_exit: impl Fn() -> Option<String>,
    ) -> Result<(), String> {
        let url = format!("http://127.0.0.1:{port}{path}");
        let started = std::time::Instant::now();
        loop {
            if let Some(reason) = proc_exit() {
                // Give the stderr reader a moment to take the last line, then ask again.
                tokio::time::sleep(Duration::from_millis(100)).await;
                return Err(proc_exit().unwrap_or(reason));
            }
            if let Ok(r) = self.http.get(&url).send().await
                && r.status().is_success()
            {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                return Err(format!("the model server did not answer {path} within {START_TIMEOUT:?}"));
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// Starts a revision's server if it does not run, and waits for it,
    /// again on another port when its port was taken before it bound it.
    async fn ensure(&self, service: &str, tag: &str) -> Result<u16, HostingError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self.ensure_once(service, tag).await {
                Err(HostingError::Unavailable(why))
                    if why.to_string().contains(PORT_TAKEN) && attempt < PORT_ATTEMPTS => {}
                other => return other,
            }
        }
    }

    async fn ensure_once(&self, service: &str, tag: &str) -> Result<u16, HostingError> {
        let key = (service.to_owned(), tag.to_owned());
        let (port, path) = {
            let mut s = self.services.lock().await;
            if let Some(p) = s.procs.get_mut(&key) {
                if matches!(p.child.try_wait(), Ok(None)) {
                    p.last_used = self.clock.now();
                    return Ok(p.port);
                }
                tracing::warn!(service, tag, "model server exited: starting it again");
                s.retire(&key, self.clock.now());
            }
            let stored = s.stored.get(service).ok_or_else(|| HostingError::NotFound(service.to_owned()))?;
            let revision = stored
                .revisions
                .iter()
                .find(|r| r.tag == tag)
                .ok_or_else(|| HostingError::Invalid(format!("service {service} has no revision {tag}")))?
                .clone();
            let proc = self.spawn(service, &revision)?;
            let port = proc.port;
            s.procs.insert(key.clone(), proc);
            (port, revision.runs.health_path().to_owned())
        };
        let outcome = self.await_health((port, &path), || None).await;
        let mut s = self.services.lock().await;
        let exited = s.procs.get_mut(&key).map(|p| !matches!(p.child.try_wait(), Ok(None))).unwrap_or(true);
        match outcome {
            Ok(()) if !exited => Ok(port),
            _ => {
                let reason = s
                    .retire(&key, self.clock.now())
                    .and_then(|p| p.last_line.lock().ok().map(|l| l.clone()))
                    .unwrap_or_default();
                Err(HostingError::Unavailable(
                    format!("the model server of {service}/{tag} did not start: {reason}").into(),
                ))
            }
        }
    }

    /// Starts a new revision and records whether it became ready.
    async fn roll_out(self: &Arc<Self>, service: String, tag: String) {
        let mut attempt = 0;
        let outcome = loop {
            attempt += 1;
            let revision = {
                let s = self.services.lock().await;
                let Some(stored) = s.stored.get(&service) else { return };
                let Some(revision) = stored.revisions.iter().find(|r| r.tag == tag).cloned() else { return };
                revision
            };
            let unpacked = self.unpack(&service, &revision).await;
            let spawned = match unpacked {
                Err(why) => Err(format!("the image cannot be run: {why}")),
                Ok(()) => {
                    let mut s = self.services.lock().await;
                    match self.spawn(&service, &revision) {
                        Ok(proc) => {
                            let last = proc.last_line.clone();
                            let port = proc.port;
                            s.procs.insert((service.clone(), tag.clone()), proc);
                            Ok((port, last))
                        }
                        Err(e) => Err(e.to_string()),
                    }
                }
            };
            let outcome = match spawned {
                Err(reason) => Rollout::Failed(reason),
                Ok((port, last)) => {
                    let key = (service.clone(), tag.clone());
                    let exit = || {
                        let mut s = self.services.try_lock().ok()?;
                        let p = s.procs.get_mut(&key)?;
                        match p.child.try_wait() {
                            Ok(None) => None,
                            Ok(Some(status)) => {
                                let line = last.lock().map(|l| l.clone()).unwrap_or_default();
                                Some(format!(
                                    "the model server exited ({status}) before it was ready: {line}"
                                ))
                            }
                            Err(e) => Some(e.to_string()),
                        }
                    };
                    match self.await_health((port, revision.runs.health_path()), exit).await {
                        Ok(()) => Rollout::Ready,
                        Err(reason) => Rollout::Failed(reason),
                    }
                }
            };
            match &outcome {
                // Its port was taken between our pick and its bind: another port.
                Rollout::Failed(why) if why.contains(PORT_TAKEN) && attempt < PORT_ATTEMPTS => {
                    self.services.lock().await.retire(&(service.clone(), tag.clone()), self.clock.now());
                }
                _ => break outcome,
            }
        };
        let mut s = self.services.lock().await;
        if let Rollout::Failed(reason) = &outcome {
            tracing::warn!(service, tag, %reason, "revision failed to start");
            s.retire(&(service.clone(), tag.clone()), self.clock.now());
        }
        let Some(stored) = s.stored.get_mut(&service) else { return };
        if let Some(r) = stored.revisions.iter_mut().find(|r| r.tag == tag) {
            r.rollout = outcome;
        }
        let snapshot = stored.clone();
        if let Err(e) = self.persist(&snapshot) {
            tracing::error!(service, error = %e, "cannot record a revision's rollout");
        }
    }

    /// Stops idle servers of services that scale to zero.
    async fn reap(&self) {
        let now = self.clock.now();
        let mut s = self.services.lock().await;
        let Services { stored, procs, .. } = &mut *s;
        let mut done = Vec::new();
        for ((service, tag), p) in procs.iter_mut() {
            let scales_to_zero = stored.get(service).is_none_or(|st| st.scaling.min == 0);
            let idle = now.since(p.last_used) >= self.idle;
            let exited = !matches!(p.child.try_wait(), Ok(None));
            if scales_to_zero && idle && !exited {
                tracing::info!(service, tag, "model server idle: scaled to zero");
            }
            if exited || (scales_to_zero && idle) {
                done.push((service.clone(), tag.clone()));
            }
        }
        for key in done {
            s.retire(&key, now);
        }
    }
}

/// SIGTERM, so the server finishes what it serves; `kill_on_drop` backs it up.
fn terminate(child: &mut Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(pid.to_string()).status();
    }
}

fn state_of(service: &StoredService) -> ServiceState {
    let revisions: Vec<RevisionState> = service
        .revisions
        .iter()
        .map(|r| RevisionState {
            tag: r.tag.clone(),
            name: format!("{}-{}", service.name, r.tag),
            url: None,
            rollout: r.rollout.clone(),
        })
        .collect();
    let rollout = revisions.last().map(|r| r.rollout.clone()).unwrap_or(Rollout::Reconciling);
    let mut labels = service.labels.clone();
    labels.insert(MANAGED_LABEL.0.into(), MANAGED_LABEL.1.into());
    ServiceState {
        name: service.name.clone(),
        url: None,
        rollout,
        revisions,
        traffic: service.traffic.clone(),
        scaling: service.scaling,
        labels,
    }
}

fn stored_revision(r: &RevisionSpec) -> StoredRevision {
    let runs = match &r.serves {
        Serving::Model(m) => Runs::Model {
            bundle: m.bundle.clone(),
            manifest_sha256: m.manifest_sha256.clone(),
            trusted_keys: m.trusted_keys.clone(),
        },
        Serving::Image(i) => Runs::Image {
            image: i.image.clone(),
            port: i.port,
            health_path: i.health_path.clone(),
            tenant: i.tenant.clone(),
            secrets: i
                .secrets
                .iter()
                .map(|s| StoredSecret {
                    env: s.env.clone(),
                    name: s.name.clone(),
                    version: s.version.clone(),
                })
                .collect(),
        },
    };
    StoredRevision { tag: r.tag.clone(), runs, rollout: Rollout::Reconciling }
}

/// Why this host runs no container revision.
const CONTAINERS_REFUSED: &str = "local endpoints run a container only in a gVisor sandbox, and this \
    platform has no runsc: install it (Debian: apt install runsc) or name it with MAPI_GVISOR_RUNSC, and \
    run the platform as root";

fn set_mode(path: &Path, mode: u32) -> Result<(), HostingError> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .map_err(|e| io(&path.display().to_string(), e))
}

/// Joins each connection to `listener` to the sandbox's socket, until aborted.
async fn join_to_socket(listener: tokio::net::TcpListener, socket: PathBuf) {
    loop {
        let Ok((mut tcp, _)) = listener.accept().await else { continue };
        let socket = socket.clone();
        tokio::spawn(async move {
            match tokio::net::UnixStream::connect(&socket).await {
                Ok(mut unix) => {
                    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut unix).await;
                }
                // Not listening yet (starting) or gone: the caller sees a closed connection.
                Err(_) => drop(tcp),
            }
        });
    }
}

#[async_trait]
impl Hosting for LocalHosting {
    fn name(&self) -> &'static str {
        "local"
    }

    fn uploaded_code_refusal(&self) -> Option<String> {
        self.inner.server.sandbox.is_none().then(|| {
            "local endpoints serve a plugin's model only in a gVisor sandbox, and this platform runs none: \
             start it with MAPI_EXECUTOR=gvisor"
                .to_owned()
        })
    }

    fn container_refusal(&self) -> Option<String> {
        self.inner.server.containers.is_none().then(|| CONTAINERS_REFUSED.to_owned())
    }

    fn image_refusal(&self, tenant: &mapi_domain::TenantId, image: &str) -> Option<String> {
        let root = self.inner.server.images.as_ref()?.join(tenant.as_str());
        // The path as the filesystem resolves it (links and `..` included), so none leads out.
        let within = std::fs::canonicalize(image)
            .ok()
            .zip(std::fs::canonicalize(&root).ok())
            .is_some_and(|(image, root)| image.starts_with(root));
        (!within).then(|| {
            format!(
                "image `{}` is not an image of tenant {tenant} on this machine: put its OCI image layout under {}",
                image.chars().take(200).collect::<String>(),
                root.display()
            )
        })
    }

    async fn create(&self, spec: &ServiceSpec, first: &RevisionSpec) -> Result<(), HostingError> {
        let inner = &self.inner;
        inner.start_reaper();
        {
            let mut s = inner.services.lock().await;
            if s.stored.contains_key(&spec.name) {
                return Err(HostingError::AlreadyExists(spec.name.clone()));
            }
            inner.stage(&spec.name, first)?;
            let service = StoredService {
                name: spec.name.clone(),
                region: spec.region.clone(),
                accelerator: spec.accelerator,
                scaling: spec.scaling,
                access: spec.access,
                labels: spec.labels.clone(),
                revisions: vec![stored_revision(first)],
                traffic: vec![Traffic { tag: first.tag.clone(), percent: 100 }],
            };
            inner.persist(&service)?;
            s.stored.insert(spec.name.clone(), service);
        }
        tokio::spawn({
            let inner = inner.clone();
            let (name, tag) = (spec.name.clone(), first.tag.clone());
            async move { inner.roll_out(name, tag).await }
        });
        Ok(())
    }

    async fn add_revision(&self, service: &str, revision: &RevisionSpec) -> Result<(), HostingError> {
        let inner = &self.inner;
        {
            let mut s = inner.services.lock().await;
            let stored =
                s.stored.get_mut(service).ok_or_else(|| HostingError::NotFound(service.to_owned()))?;
            if stored.revisions.iter().any(|r| r.tag == revision.tag) {
                return Ok(());
            }
            inner.stage(service, revision)?;
            let mut next = stored.clone();
            next.revisions.push(stored_revision(revision));
            next.traffic.push(Traffic { tag: revision.tag.clone(), percent: 0 });
            inner.persist(&next)?;
            *stored = next;
        }
        tokio::spawn({
            let inner = inner.clone();
            let (name, tag) = (service.to_owned(), revision.tag.clone());
            async move { inner.roll_out(name, tag).await }
        });
        Ok(())
    }

    async fn set_traffic(&self, service: &str, traffic: &[Traffic]) -> Result<(), HostingError> {
        check_split(traffic)?;
        let mut s = self.inner.services.lock().await;
        let stored = s.stored.get_mut(service).ok_or_else(|| HostingError::NotFound(service.to_owned()))?;
        if let Some(t) = traffic.iter().find(|t| !stored.revisions.iter().any(|r| r.tag == t.tag)) {
            return Err(HostingError::Invalid(format!("service {service} has no revision {}", t.tag)));
        }
        let mut next = stored.clone();
        next.traffic = next
            .revisions
            .iter()
            .map(|r| Traffic {
                tag: r.tag.clone(),
                percent: traffic.iter().find(|t| t.tag == r.tag).map_or(0, |t| t.percent),
            })
            .collect();
        self.inner.persist(&next)?;
        *stored = next;
        Ok(())
    }

    async fn set_scaling(&self, service: &str, scaling: Scaling) -> Result<(), HostingError> {
        check_scaling(scaling)?;
        let mut s = self.inner.services.lock().await;
        let stored = s.stored.get_mut(service).ok_or_else(|| HostingError::NotFound(service.to_owned()))?;
        if stored.scaling != scaling {
            let mut next = stored.clone();
            next.scaling = scaling;
            self.inner.persist(&next)?;
            *stored = next;
        }
        Ok(())
    }

    async fn get(&self, service: &str) -> Result<ServiceState, HostingError> {
        let s = self.inner.services.lock().await;
        s.stored.get(service).map(state_of).ok_or_else(|| HostingError::NotFound(service.to_owned()))
    }

    async fn list(&self) -> Result<Vec<ServiceState>, HostingError> {
        let s = self.inner.services.lock().await;
        Ok(s.stored.values().map(state_of).collect())
    }

    async fn delete(&self, service: &str) -> Result<(), HostingError> {
        let mut s = self.inner.services.lock().await;
        if s.stored.remove(service).is_none() {
            return Err(HostingError::NotFound(service.to_owned()));
        }
        let keys: Vec<_> = s.procs.keys().filter(|(name, _)| name == service).cloned().collect();
        let now = self.inner.clock.now();
        for key in keys {
            s.retire(&key, now);
        }
        let dir = self.inner.service_dir(service);
        std::fs::remove_dir_all(&dir).map_err(|e| io(&dir.display().to_string(), e))
    }

    async fn instance_time(
        &self,
        service: &str,
        window: (Timestamp, Timestamp),
    ) -> Result<Option<Duration>, HostingError> {
        let s = self.inner.services.lock().await;
        Ok(Some(s.instance_time(service, window, self.inner.clock.now())))
    }

    async fn route(&self, service: &str, tag: Option<&str>) -> Result<Route, HostingError> {
        let tag = match tag {
            Some(t) => t.to_owned(),
            None => {
                let s = self.inner.services.lock().await;
                let stored =
                    s.stored.get(service).ok_or_else(|| HostingError::NotFound(service.to_owned()))?;
                // Spread requests over the split in proportion, deterministically.
                let slot = (self.inner.spread.fetch_add(1, Ordering::Relaxed) % 100) as u32;
                let mut acc = 0;
                stored
                    .traffic
                    .iter()
                    .find(|t| {
                        acc += t.percent;
                        slot < acc
                    })
                    .map(|t| t.tag.clone())
                    .ok_or_else(|| {
                        HostingError::Unavailable(format!("service {service} has no traffic").into())
                    })?
            }
        };
        self.inner.start_reaper();
        let port = self.inner.ensure(service, &tag).await?;
        Ok(Route { url: format!("http://127.0.0.1:{port}"), authorization: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: i64) -> Timestamp {
        Timestamp::from_secs(1_800_000_000 + s)
    }

    /// A service's instance time is its servers' lifetimes clipped to the window.
    #[test]
    fn instance_time_is_the_lifetimes_within_the_window() {
        let mut s = Services::default();
        s.ended.insert("svc".into(), vec![(at(0), at(100)), (at(150), at(200)), (at(400), at(500))]);
        s.ended.insert("other".into(), vec![(at(0), at(1000))]);
        assert_eq!(s.instance_time("svc", (at(50), at(450)), at(1000)), Duration::from_secs(50 + 50 + 50));
        assert_eq!(s.instance_time("svc", (at(600), at(700)), at(1000)), Duration::ZERO);
        assert_eq!(s.instance_time("none", (at(0), at(700)), at(1000)), Duration::ZERO);
    }
}
