//! A task's sandbox under gVisor's `runsc`: the OCI bundle it runs from and
//! the command that runs it. The first part of the gvisor executor (which
//! will start each task of an execution this way instead of as a host
//! process); nothing starts it yet.
//!
//! What a sandboxed process gets, and nothing else:
//! - a root filesystem that is an empty directory, read-only, with the
//!   host's system directories ([`SYSTEM_DIRS`], those that exist) and the
//!   directories [`Sandbox::read_only`] names bound read-only at the same
//!   paths: the platform's home, its store, its keys and every other
//!   task's directory are not in the sandbox at all;
//! - its work directory bound read-write at [`WORK`], a private `/tmp`
//!   (tmpfs) and `/dev`, its own `/proc` (its own processes only) and the
//!   read-only `/sys` runsc gives every sandbox;
//! - an unprivileged user ([`NOBODY`]), no capabilities, `no_new_privs`;
//! - no network, twice over: a network namespace of its own (the spec) and
//!   `runsc --network=none` (gVisor's stack with a loopback device of its
//!   own and nothing else), so no address of the host or beyond, and no DNS.
//!
//! `runsc do` is not used: it mounts the whole host filesystem read-only,
//! which would let tenant code read the platform's home.
//!
//! What the task may ask of the platform through its one way out is
//! [`channel`]'s rule, applied by [`proxy`]. Not yet here: the bridge from
//! the sandbox's loopback to the proxy's socket, the executor, and memory,
//! CPU and process-count limits (the OCI `linux.resources` are refused by
//! runsc on this machine's cgroups, so the executor will enforce them from
//! outside, as the local host does).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

pub mod channel;
pub mod proxy;

/// Where the task's work directory is inside the sandbox.
pub const WORK: &str = "/work";

/// The user and group a sandboxed process runs as (`nobody`).
pub const NOBODY: u32 = 65_534;

/// The host's directories a process needs to run programs (the dynamic
/// loader, libraries, interpreters), bound read-only where they exist.
pub const SYSTEM_DIRS: &[&str] = &["/usr", "/lib", "/lib64", "/bin", "/sbin"];

/// One sandboxed process: what it runs and what it may see.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sandbox {
    /// The program and its arguments (paths as the sandbox sees them).
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// The host directory bound read-write at [`WORK`].
    pub work: PathBuf,
    /// More host directories bound read-only at the same paths (the
    /// worker's own directory, say).
    pub read_only: Vec<PathBuf>,
}

impl Sandbox {
    /// The OCI runtime spec (`config.json`) of the sandbox; its root is the
    /// bundle's empty `rootfs`.
    pub fn runtime_spec(&self) -> Value {
        let bind_ro = |p: &Path| json!({"destination": p, "type": "bind", "source": p, "options": ["rbind", "ro", "nosuid", "nodev"]});
        let mut mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc"}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "noexec"]}),
            json!({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]}),
        ];
        let system = SYSTEM_DIRS.iter().map(Path::new).filter(|p| p.exists());
        mounts.extend(system.chain(self.read_only.iter().map(PathBuf::as_path)).map(bind_ro));
        mounts.push(json!({
            "destination": WORK, "type": "bind", "source": self.work,
            "options": ["rbind", "rw", "nosuid", "nodev"],
        }));
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
                "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
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
/// runsc's state under `state`, with no network.
pub fn run_command(runsc: &Path, state: &Path, bundle: &Path, id: &str) -> std::process::Command {
    let mut cmd = std::process::Command::new(runsc);
    cmd.arg("--network=none").arg("--platform=ptrace").arg("--root").arg(state);
    cmd.arg("run").arg("--bundle").arg(bundle).arg(id);
    cmd
}

#[cfg(test)]
mod tests;
