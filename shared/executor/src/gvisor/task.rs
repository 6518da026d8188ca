//! What the execution host does differently for a task of the gvisor
//! executor: the task's one way out (a proxy on its own socket, allowing
//! the task's own bootstrap and no other), its bundle and `runsc run`, the
//! sandbox's memory as gVisor's kernel counts it, and signals sent through
//! runsc.
//!
//! Files, beside the local layout's:
//!
//! ```text
//! <execution>/runsc/                          runsc's state (`--root`)
//! <execution>/tasks/<i>/channel/platform.sock the proxy's socket (its directory is bound read-only at /run/mapi)
//! <execution>/tasks/<i>/bundle/               the task's OCI bundle
//! ```

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::channel::{Allowed, SOCKET};
use super::{Sandbox, run_command, runsc_command};

/// Where the worker program is inside the sandbox.
pub const WORKER: &str = "/opt/mapi/worker";

/// The host's public CA certificates (one bundle), bound read-only where it exists.
pub const CA_CERTIFICATES: &str = "/etc/ssl/certs/ca-certificates.crt";

/// How many processes and threads a task's sandbox may have: a fork bomb
/// stops here, far below what would trouble the host.
pub const MAX_PROCESSES: u32 = 256;

/// What the host needs to run an execution's tasks under gVisor (part of its spec).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxSpec {
    /// The `runsc` program.
    pub runsc: PathBuf,
    /// The platform's host, as the bootstrap URL names it.
    pub host: String,
    pub port: u16,
    /// The bootstrap's path with `{nonce}` where the task's nonce goes.
    pub bootstrap: String,
    /// The most processes a task's sandbox may have.
    pub max_processes: u32,
}

impl SandboxSpec {
    /// The spec for an execution whose bootstrap is at `bootstrap_url` (the platform's own
    /// `http://host:port/o/bootstrap/{nonce}`).
    ///
    /// # Errors
    ///
    /// In words, when the bootstrap is not an HTTP URL of the platform (a `gs://` bootstrap
    /// would need the network, which a sandbox has not).
    pub fn for_bootstrap(runsc: &Path, bootstrap_url: &str) -> Result<SandboxSpec, String> {
        const MARK: &str = "nonce-goes-here";
        let marked = bootstrap_url.replace("{nonce}", MARK);
        let url = reqwest::Url::parse(&marked).map_err(|e| format!("{bootstrap_url}: {e}"))?;
        let (Some(host), Some(port), "http", true) =
            (url.host_str(), url.port_or_known_default(), url.scheme(), url.path().contains(MARK))
        else {
            return Err(format!(
                "the gvisor executor reaches the platform only over plain HTTP, and the bootstrap is at {bootstrap_url}: use MAPI_OBJECTS=local"
            ));
        };
        Ok(SandboxSpec {
            runsc: runsc.to_owned(),
            host: host.to_owned(),
            port,
            bootstrap: url.path().replace(MARK, "{nonce}"),
            max_processes: MAX_PROCESSES,
        })
    }

    /// What the task with `nonce` may ask of the platform.
    pub fn allowed(&self, nonce: &mapi_domain::Nonce) -> Allowed {
        Allowed {
            host: self.host.clone(),
            port: self.port,
            bootstrap: self.bootstrap.replace("{nonce}", nonce.as_str()),
        }
    }

    fn state(exec_dir: &Path) -> PathBuf {
        exec_dir.join("runsc")
    }

    /// Opens a task's channel: binds the proxy's socket in `<task>/channel/` and serves it,
    /// allowing what the task with `nonce` may ask, on a thread for as long as the host lives.
    ///
    /// # Errors
    ///
    /// Binding's, or the platform's address not resolving.
    fn open_channel(&self, task_dir: &Path, nonce: &mapi_domain::Nonce) -> std::io::Result<()> {
        let upstream: SocketAddr = (self.host.as_str(), self.port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{} does not resolve", self.host)))?;
        let dir = task_dir.join("channel");
        std::fs::create_dir_all(&dir)?;
        let socket = dir.join(file_name(SOCKET));
        // A restarted host binds afresh.
        let _ = std::fs::remove_file(&socket);
        let listener = UnixListener::bind(&socket)?;
        // The sandbox's user (nobody) connects; the proxy decides what passes.
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666))?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))?;
        let allowed = self.allowed(nonce);
        std::thread::spawn(move || super::proxy::serve(&listener, &allowed, upstream));
        Ok(())
    }

    /// The container id of task `index`.
    pub fn container(handle: &str, index: u32) -> String {
        format!("{handle}-{index}")
    }

    /// Opens the task's channel, writes its bundle and returns the `runsc run` that runs
    /// `program args` in it with `env` (plus the variables the sandbox needs) as container `id`.
    ///
    /// # Errors
    ///
    /// The filesystem's, or the channel's.
    pub fn task_command(
        &self,
        exec_dir: &Path,
        task_dir: &Path,
        id: &str,
        nonce: &mapi_domain::Nonce,
        program: (&Path, &[String]),
        mut env: BTreeMap<String, String>,
    ) -> std::io::Result<std::process::Command> {
        self.open_channel(task_dir, nonce)?;
        let (program, args) = program;
        env.insert("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into());
        env.insert("HOME".into(), super::WORK.into());
        env.insert("MAPI_WORKER_PROXY_SOCKET".into(), SOCKET.into());
        let socket_dir = Path::new(SOCKET).parent().unwrap_or(Path::new("/run"));
        let mut read_only = vec![
            (program.to_owned(), PathBuf::from(WORKER)),
            (task_dir.join("channel"), socket_dir.to_owned()),
        ];
        // Public CA certificates: the worker's HTTP client loads them when it is built. One
        // bundle file, named in SSL_CERT_FILE, reads far faster through the sandbox than the
        // directory of single certificates.
        let certs = Path::new(CA_CERTIFICATES);
        if certs.is_file() {
            read_only.push((certs.to_owned(), certs.to_owned()));
            env.insert("SSL_CERT_FILE".into(), CA_CERTIFICATES.into());
        }
        let sandbox = Sandbox {
            args: std::iter::once(WORKER.to_owned()).chain(args.iter().cloned()).collect(),
            env,
            work: None,
            read_only,
            max_processes: self.max_processes,
        };
        let bundle = task_dir.join("bundle");
        sandbox.write_bundle(&bundle)?;
        let state = Self::state(exec_dir);
        std::fs::create_dir_all(&state)?;
        Ok(run_command(&self.runsc, &state, &bundle, id))
    }

    /// Sends `signal` (`TERM`, `KILL`) to every process of container `id`; best effort (the
    /// sandbox may have exited).
    pub fn signal(&self, exec_dir: &Path, id: &str, signal: &str) {
        let _ = runsc_command(&self.runsc, &Self::state(exec_dir))
            .args(["kill", "--all", id, signal])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }

    /// Removes what is left of container `id` (runsc removes an exited one itself).
    pub fn delete(&self, exec_dir: &Path, id: &str) {
        let _ = runsc_command(&self.runsc, &Self::state(exec_dir))
            .args(["delete", "--force", id])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

fn file_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Where a task's sandbox memory is counted: the sandbox's memory file
/// (`runsc-memory`, a memfd of the `runsc-sandbox` process that backs every
/// page of the sandbox's processes and of its in-memory filesystems), found
/// once among the children of the `runsc run` process and then read each
/// poll without scanning `/proc` again.
#[derive(Debug, Default)]
pub struct SandboxMemory {
    file: Option<PathBuf>,
}

impl SandboxMemory {
    /// The memory the sandbox of `runsc` (the `runsc run` process) holds, in bytes, as gVisor's
    /// kernel counts it (the memory file's allocated blocks); `None` until its sandbox is up.
    pub fn bytes(&mut self, runsc: i32) -> Option<u64> {
        use std::os::unix::fs::MetadataExt;
        if self.file.is_none() {
            self.file = children(runsc).into_iter().find_map(memory_file);
        }
        let read = self.file.as_ref().and_then(|f| std::fs::metadata(f).ok()).map(|m| m.blocks() * 512);
        if read.is_none() {
            // The sandbox is gone or not up yet: look for it again next time.
            self.file = None;
        }
        read
    }
}

/// The processes whose parent is `parent`.
fn children(parent: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| crate::local::proc::stat_field(&stat, 4))
                .is_some_and(|ppid| ppid == u64::try_from(parent).unwrap_or(0))
        })
        .collect()
}

/// The `/proc/<pid>/fd/<n>` of `pid`'s sandbox memory file, if it has one.
fn memory_file(pid: i32) -> Option<PathBuf> {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    fds.flatten().map(|e| e.path()).find(|fd| {
        std::fs::read_link(fd).is_ok_and(|target| target.to_string_lossy().starts_with("/memfd:runsc-memory"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_names_the_platform_and_the_execution() {
        let runsc = Path::new("/usr/bin/runsc");
        let spec = SandboxSpec::for_bootstrap(runsc, "http://127.0.0.1:8080/o/bootstrap/{nonce}")
            .expect("an http bootstrap");
        let nonce = mapi_domain::Nonce::from_bytes([1; 16]);
        assert_eq!(
            spec.allowed(&nonce.for_task(2)),
            Allowed {
                host: "127.0.0.1".into(),
                port: 8080,
                bootstrap: format!("/o/bootstrap/{}", nonce.for_task(2)),
            }
        );
        let gcs = SandboxSpec::for_bootstrap(runsc, "gs://boot/{nonce}").expect_err("gs");
        assert!(gcs.contains("MAPI_OBJECTS=local"), "{gcs}");
    }
}
