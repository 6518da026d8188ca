//! A task's sandbox under gVisor's `runsc`: the OCI bundle it runs from and
//! the command that runs it. The gvisor executor (the local-process
//! executor's host with [`task::SandboxSpec`] in the execution's spec)
//! starts each task of an execution this way instead of as a host process.
//!
//! What a sandboxed process gets, and nothing else:
//! - a root filesystem that is an empty directory, read-only, with the
//!   host's system directories ([`SYSTEM_DIRS`], those that exist) bound
//!   read-only at the same paths and the files [`Sandbox::read_only`] names
//!   (the worker, the proxy's socket) read-only where it says: the
//!   platform's home, its store, its keys and every other task's directory
//!   are not in the sandbox at all;
//! - a work directory at [`WORK`] and a `/tmp`, both in the sandbox's own
//!   memory (tmpfs of gVisor's kernel, so what a task writes counts against
//!   its memory limit, as on Cloud Run's in-memory filesystem, and it cannot
//!   fill the host's disk), or a host directory bound read-write at [`WORK`]
//!   where [`Sandbox::work`] names one; a private `/dev`, its own `/proc`
//!   (its own processes only) and the read-only `/sys` runsc gives every
//!   sandbox;
//! - an unprivileged user ([`NOBODY`]), no capabilities, `no_new_privs`, and
//!   at most [`Sandbox::max_processes`] processes (`RLIMIT_NPROC`, which
//!   gVisor's kernel enforces);
//! - no network, twice over: a network namespace of its own (the spec) and
//!   `runsc --network=none` (gVisor's stack with a loopback device of its
//!   own and nothing else), so no address of the host or beyond, and no DNS.
//!
//! `runsc do` is not used: it mounts the whole host filesystem read-only,
//! which would let tenant code read the platform's home.
//!
//! What the task may ask of the platform through its one way out is
//! [`channel`]'s rule, applied by [`proxy`] on a Unix socket bound into the
//! sandbox (runsc's `--host-uds=open` lets the sandbox connect to a host
//! socket that is mounted into it, and to nothing else). Memory is enforced
//! from outside by the host (see [`task::SandboxMemory`]): the OCI
//! `linux.resources` are refused by runsc on this machine's cgroups.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub mod channel;
pub mod proxy;
pub mod task;

/// Where the task's work directory is inside the sandbox.
pub const WORK: &str = "/work";

/// The user and group a sandboxed process runs as (`nobody`).
pub const NOBODY: u32 = 65_534;

/// The host's directories a process needs to run programs (the dynamic
/// loader, libraries, interpreters), bound read-only where they exist.
/// `/etc/alternatives` holds only Debian's links choosing one of several
/// installed libraries (the BLAS and LAPACK numpy loads go through it), and
/// nothing else of `/etc` is bound.
pub const SYSTEM_DIRS: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/alternatives"];

/// One sandboxed process: what it runs and what it may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// The program and its arguments (paths as the sandbox sees them).
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The host directory bound read-write at [`WORK`]; `None`: [`WORK`] is
    /// in the sandbox's memory.
    pub work: Option<PathBuf>,
    /// Host files or directories bound read-only: (host path, path inside).
    pub read_only: Vec<(PathBuf, PathBuf)>,
    /// The most processes (and threads) the sandbox's user may have.
    pub max_processes: u32,
}

impl Sandbox {
    /// The OCI runtime spec (`config.json`) of the sandbox; its root is the
    /// bundle's empty `rootfs`.
    pub fn runtime_spec(&self) -> Value {
        let bind_ro = |from: &Path, to: &Path| json!({"destination": to, "type": "bind", "source": from, "options": ["rbind", "ro", "nosuid", "nodev"]});
        let memory = |to: &str| json!({"destination": to, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]});
        let mut mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc"}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "noexec"]}),
            memory("/tmp"),
        ];
        let system = SYSTEM_DIRS.iter().map(Path::new).filter(|p| p.exists());
        mounts.extend(system.map(|p| bind_ro(p, p)));
        mounts.extend(self.read_only.iter().map(|(from, to)| bind_ro(from, to)));
        mounts.push(match &self.work {
            Some(dir) => json!({
                "destination": WORK, "type": "bind", "source": dir,
                "options": ["rbind", "rw", "nosuid", "nodev"],
            }),
            None => memory(WORK),
        });
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let none: [&str; 0] = [];
        json!({
            "ociVersion": "1.0.0",
            "root": {"path": "rootfs", "readonly": true},
            "hostname": "sandbox",
            "process": {
                "terminal": false,
                "user": {"uid": NOBODY, "gid": NOBODY},
                "args": self.args,
                "env": env,
                "cwd": WORK,
                "noNewPrivileges": true,
                "capabilities": {
                    "bounding": none, "effective": none, "inheritable": none, "permitted": none, "ambient": none,
                },
                "rlimits": [
                    {"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024},
                    {"type": "RLIMIT_NPROC", "hard": self.max_processes, "soft": self.max_processes},
                ],
            },
            "mounts": mounts,
            "linux": {
                "namespaces": [
                    {"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"},
                ],
            },
        })
    }

    /// Writes the bundle into `dir`: an empty `rootfs` and `config.json`.
    ///
    /// # Errors
    ///
    /// The filesystem's.
    pub fn write_bundle(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir.join("rootfs"))?;
        let spec = serde_json::to_vec_pretty(&self.runtime_spec()).map_err(std::io::Error::other)?;
        std::fs::write(dir.join("config.json"), spec)
    }
}

/// The command that runs the bundle in `bundle` as container `id`, keeping
/// runsc's state under `state`, with no network; the sandbox may connect to
/// host Unix sockets mounted into it (`--host-uds=open`), which are only
/// those [`Sandbox::read_only`] names.
pub fn run_command(runsc: &Path, state: &Path, bundle: &Path, id: &str) -> std::process::Command {
    let mut cmd = runsc_command(runsc, state);
    cmd.arg("run").arg("--bundle").arg(bundle).arg(id);
    cmd
}

/// The program `named`: a path (when it has a `/`), or a name looked up on `PATH`; `None` when no
/// such file is there.
pub fn find_program(named: &str) -> Option<PathBuf> {
    if named.contains('/') {
        return Some(PathBuf::from(named)).filter(|p| p.is_file());
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(named))
        .find(|p| p.is_file())
}

/// `runsc` with the global flags every call about a sandbox of this state directory needs.
pub fn runsc_command(runsc: &Path, state: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(runsc);
    // `--ignore-cgroups`: no cgroup is made for the sandbox (its limits are enforced from outside,
    // see the module's docs); it saves about 40 ms of each start.
    cmd.args(["--network=none", "--platform=ptrace", "--host-uds=open", "--ignore-cgroups", "--root"])
        .arg(state);
    cmd
}

#[cfg(test)]
mod tests;
