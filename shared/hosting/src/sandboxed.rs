//! A container revision on one machine: the tenant's image, unpacked from a
//! local OCI image layout ([`crate::oci`]), run under gVisor's `runsc` with
//! no network, and reached by the platform through a Unix socket.
//!
//! What the container gets, and nothing else:
//! - its image's root filesystem, with an in-memory overlay on top
//!   (`--overlay2=root:memory`: it may write anywhere, as on Cloud Run's
//!   in-memory filesystem, and the unpacked copy on the host never changes),
//!   a `/tmp` and a private `/dev` in memory, and its own `/proc`;
//! - its image's entrypoint, command, working directory and variables, plus
//!   `PORT` and the secrets its revision names, as user `nobody` with no
//!   capabilities and `no_new_privs` (the image's `User` is not honoured);
//! - no network: `runsc --network=none` gives it a loopback device of its
//!   own and nothing else, so no address of the host or beyond, and no DNS.
//!
//! The one way in is a forwarder (`mapi-worker forward`), the container's
//! first process: it starts the entrypoint, listens on a Unix socket in a
//! directory bound read-write at [`RUN_DIR`] (runsc's `--host-uds=all` makes
//! the socket a host socket), and joins each connection to the server's TCP
//! port on the sandbox's loopback. The host side listens on a loopback TCP
//! port and joins each connection to that socket, so the platform speaks
//! plain HTTP to `127.0.0.1:{port}`. The forwarder is the host's own binary,
//! run through the host's dynamic loader bound read-only at [`LIB_DIR`], so it
//! needs nothing of the image.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::oci::ImageConfig;

/// Where the forwarder's socket directory is inside the sandbox.
pub const RUN_DIR: &str = "/.mapi/run";
/// Where the host's libraries (its dynamic loader among them) are inside the sandbox.
pub const LIB_DIR: &str = "/.mapi/lib";
/// Where the forwarder's program is inside the sandbox.
pub const FORWARDER: &str = "/.mapi/bin/forwarder";
/// The forwarder's socket, inside the sandbox.
pub const SOCKET: &str = "http.sock";
/// The user and group the container runs as (`nobody`).
pub const NOBODY: u32 = 65_534;
/// The most processes (and threads) the container's user may have.
pub const MAX_PROCESSES: u32 = 4096;

/// What runs a container revision: `runsc`, and the forwarder (the worker
/// program with its leading arguments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerRuntime {
    pub runsc: PathBuf,
    pub forwarder: PathBuf,
    pub forwarder_args: Vec<String>,
    /// The host's directory of the C library and its dynamic loader.
    pub libs: PathBuf,
    /// The loader's file name in `libs` (`ld-linux-x86-64.so.2`).
    pub loader: String,
}

impl ContainerRuntime {
    /// The runtime with `runsc`, and the forwarder `program args…`; `None`
    /// when this machine's dynamic loader is not where a Debian-like system
    /// keeps it.
    pub fn new(runsc: PathBuf, program: PathBuf, args: Vec<String>) -> Option<ContainerRuntime> {
        let libs = PathBuf::from(format!("/lib/{}-linux-gnu", std::env::consts::ARCH));
        let loader = std::fs::read_dir(&libs)
            .ok()?
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .find(|n| n.starts_with("ld-linux") && n.contains(".so"))?;
        Some(ContainerRuntime { runsc, forwarder: program, forwarder_args: args, libs, loader })
    }

    /// The OCI runtime spec (`config.json`) of a container whose root is the
    /// bundle's `rootfs`: the image's command behind the forwarder, its
    /// variables with `env` over them, the socket directory `run` bound
    /// read-write.
    pub fn runtime_spec(
        &self,
        image: &ImageConfig,
        port: u16,
        env: &BTreeMap<String, String>,
        run: &Path,
    ) -> Value {
        let bind = |from: &Path, to: &str, mode: &str| json!({"destination": to, "type": "bind", "source": from, "options": ["rbind", mode, "nosuid", "nodev"]});
        let memory = |to: &str| json!({"destination": to, "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"]});
        let mounts = vec![
            json!({"destination": "/proc", "type": "proc", "source": "proc"}),
            json!({"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "noexec"]}),
            memory("/tmp"),
            bind(&self.libs, LIB_DIR, "ro"),
            bind(&self.forwarder, FORWARDER, "ro"),
            bind(run, RUN_DIR, "rw"),
        ];
        let mut args = vec![
            format!("{LIB_DIR}/{}", self.loader),
            "--library-path".to_owned(),
            LIB_DIR.to_owned(),
            FORWARDER.to_owned(),
        ];
        args.extend(self.forwarder_args.iter().cloned());
        args.extend(["forward", "--uds"].map(str::to_owned));
        args.push(format!("{RUN_DIR}/{SOCKET}"));
        args.extend(["--port".to_owned(), port.to_string(), "--".to_owned()]);
        args.extend(image.command());
        let mut vars: BTreeMap<String, String> = image.env.iter().cloned().collect();
        vars.entry("HOME".into()).or_insert_with(|| "/tmp".into());
        vars.entry("PATH".into()).or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".into());
        vars.extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
        vars.insert("PORT".into(), port.to_string());
        let vars: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let none: [&str; 0] = [];
        json!({
            "ociVersion": "1.0.0",
            "root": {"path": "rootfs", "readonly": false},
            "hostname": "model-server",
            "process": {
                "terminal": false,
                "user": {"uid": NOBODY, "gid": NOBODY},
                "args": args,
                "env": vars,
                "cwd": image.working_dir.clone().filter(|d| d.starts_with('/')).unwrap_or_else(|| "/".into()),
                "noNewPrivileges": true,
                "capabilities": {
                    "bounding": none, "effective": none, "inheritable": none, "permitted": none, "ambient": none,
                },
                "rlimits": [
                    {"type": "RLIMIT_NOFILE", "hard": 65_536, "soft": 65_536},
                    {"type": "RLIMIT_NPROC", "hard": MAX_PROCESSES, "soft": MAX_PROCESSES},
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

    /// `runsc` with the flags every call about a container of state directory `state` needs.
    pub fn runsc(&self, state: &Path) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.runsc);
        cmd.args([
            "--network=none",
            "--platform=ptrace",
            "--host-uds=all",
            "--ignore-cgroups",
            "--overlay2=root:memory",
            "--root",
        ])
        .arg(state);
        cmd
    }

    /// Stops container `id` and removes what is left of it (both quiet: it may be gone).
    pub fn remove(&self, state: &Path, id: &str) {
        for args in [&["kill", "--all", id, "KILL"][..], &["delete", "--force", id][..]] {
            let _ = self
                .runsc(state)
                .args(args)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Makes the mount points the runtime spec binds, in an unpacked `rootfs`
/// (its root is writable only through the in-memory overlay).
pub fn prepare_rootfs(rootfs: &Path) -> std::io::Result<()> {
    for dir in ["proc", "dev", "tmp", ".mapi/lib", ".mapi/bin", ".mapi/run"] {
        let path = rootfs.join(dir);
        if path.is_symlink() || path.is_file() {
            std::fs::remove_file(&path)?;
        }
        std::fs::create_dir_all(path)?;
    }
    let forwarder = rootfs.join(FORWARDER.trim_start_matches('/'));
    if !forwarder.is_file() {
        std::fs::write(forwarder, b"")?;
    }
    Ok(())
}

/// The values of `tenant`'s `wanted` secrets, by variable, from the secrets
/// file at `file`: a JSON object of tenants, each an object of secret names
/// and their values. The error names what is missing.
pub fn read_secrets(
    file: &Path,
    tenant: &mapi_domain::TenantId,
    wanted: &[crate::SecretEnv],
) -> Result<BTreeMap<String, String>, String> {
    if wanted.is_empty() {
        return Ok(BTreeMap::new());
    }
    let all: BTreeMap<String, BTreeMap<String, String>> = match std::fs::read(file) {
        // No file holds no secret: the first one wanted is named below.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => return Err(format!("the secrets file {} cannot be read: {e}", file.display())),
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            format!(
                "the secrets file {} is not a JSON object of tenants, each an object of secret names and values: {e}",
                file.display()
            )
        })?,
    };
    wanted
        .iter()
        .map(|s| {
            let value = all.get(tenant.as_str()).and_then(|t| t.get(&s.name)).ok_or_else(|| {
                format!(
                    "secret {} of tenant {tenant} (for {}) is not in the secrets file {}: add it under \
                     \"{tenant}\" (a JSON object of tenants, each an object of secret names and values)",
                    s.name,
                    s.env,
                    file.display()
                )
            })?;
            Ok((s.env.clone(), value.clone()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_container_runs_behind_the_forwarder_as_nobody_without_network() {
        let rt = ContainerRuntime {
            runsc: "/usr/bin/runsc".into(),
            forwarder: "/opt/mapi-worker".into(),
            forwarder_args: vec![],
            libs: "/lib/x86_64-linux-gnu".into(),
            loader: "ld-linux-x86-64.so.2".into(),
        };
        let image = ImageConfig {
            entrypoint: vec!["/app/server".into()],
            cmd: vec!["--fast".into()],
            env: vec![("PORT".into(), "1".into()), ("A".into(), "b".into())],
            working_dir: Some("/app".into()),
            exposed_ports: vec![],
        };
        let env = BTreeMap::from([("TOKEN".to_owned(), "s3cret".to_owned())]);
        let spec = rt.runtime_spec(&image, 8000, &env, Path::new("/state/run"));
        let args: Vec<&str> = spec["process"]["args"]
            .as_array()
            .expect("test")
            .iter()
            .map(|a| a.as_str().expect("test"))
            .collect();
        assert_eq!(
            args,
            [
                "/.mapi/lib/ld-linux-x86-64.so.2",
                "--library-path",
                "/.mapi/lib",
                FORWARDER,
                "forward",
                "--uds",
                "/.mapi/run/http.sock",
                "--port",
                "8000",
                "--",
                "/app/server",
                "--fast",
            ]
        );
        let vars: Vec<&str> = spec["process"]["env"]
            .as_array()
            .expect("test")
            .iter()
            .map(|a| a.as_str().expect("test"))
            .collect();
        assert!(
            vars.contains(&"PORT=8000") && vars.contains(&"TOKEN=s3cret") && vars.contains(&"A=b"),
            "{vars:?}"
        );
        assert_eq!(spec["process"]["user"]["uid"], NOBODY);
        assert_eq!(spec["process"]["cwd"], "/app");
        assert_eq!(spec["process"]["capabilities"]["bounding"], json!([]));
        let namespaces = spec["linux"]["namespaces"].to_string();
        assert!(namespaces.contains("network"), "{namespaces}");
        let flags = format!("{:?}", rt.runsc(Path::new("/s")));
        assert!(flags.contains("--network=none") && flags.contains("--overlay2=root:memory"), "{flags}");
        let binds: Vec<(&str, &str)> = spec["mounts"]
            .as_array()
            .expect("test")
            .iter()
            .filter(|m| m["type"] == "bind")
            .map(|m| (m["destination"].as_str().expect("test"), m["options"][1].as_str().expect("test")))
            .collect();
        assert_eq!(binds, [(LIB_DIR, "ro"), (FORWARDER, "ro"), (RUN_DIR, "rw")]);
    }

    #[test]
    fn secrets_come_from_the_tenants_own_entries_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().expect("test");
        let file = dir.path().join("secrets.json");
        std::fs::write(&file, r#"{"acme": {"hf-token": "abc"}, "other": {"db": "x"}}"#).expect("test");
        let want = |name: &str| crate::SecretEnv {
            env: "TOKEN".into(),
            name: name.into(),
            version: "latest".into(),
        };
        let acme = mapi_domain::TenantId::parse("acme").expect("test");
        assert_eq!(read_secrets(&file, &acme, &[want("hf-token")]).expect("test")["TOKEN"], "abc");
        // Another tenant's secret is not the tenant's, whatever its name.
        let err = read_secrets(&file, &acme, &[want("db")]).expect_err("test");
        assert!(err.contains("secret db of tenant acme"), "{err}");
        assert!(read_secrets(&dir.path().join("none"), &acme, &[]).expect("test").is_empty());
    }
}
