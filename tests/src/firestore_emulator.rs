//! A Firestore emulator for the Firestore store's suite: the npm package
//! `@firestore-emulator/server` at a pinned version (a gRPC server in
//! Node.js), installed on first use into
//! `$HOME/.cache/mapi-emulators/firestore-emulator-<version>/` under a file
//! lock (parallel test binaries install it once), started on 127.0.0.1 on a
//! port the system picks, and killed when the guard drops. It also exits
//! when its stdin closes, so a test process that dies leaves no server.
//!
//! Node.js and npm must be on the machine: without them the harness fails
//! and says so; it never skips.
//!
//! What this emulator does not do (so what its suite cannot prove) is
//! listed in `tests/tests/store_firestore.rs`.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use mapi_firestore::{Credentials, FirestoreStore, Settings};
use mapi_store::{DocKey, Store};

/// The emulator package and its pinned version (its own dependencies are
/// pinned exactly in its package.json).
pub const PACKAGE: &str = "@firestore-emulator/server";
pub const VERSION: &str = "0.3.15";

/// Started by `node`: binds the package's gRPC service to 127.0.0.1 on a
/// free port and prints it. The package's own `start(port)` binds every
/// interface, so its server is bound here instead.
const LAUNCHER: &str = r#"// Written by the mapi test harness (tests/src/firestore_emulator.rs).
const { FirestoreServer } = require("@firestore-emulator/server");
const { ServerCredentials } = require("@grpc/grpc-js");
const emulator = new FirestoreServer();
emulator.server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, port) => {
  if (err) {
    console.error(`cannot bind: ${err}`);
    process.exit(1);
  }
  console.log(`listening 127.0.0.1:${port}`);
});
// The test process holds our stdin: when it goes, so do we.
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
"#;

fn cache_root() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME").filter(|d| !d.is_empty()) {
        return PathBuf::from(d).join("mapi-emulators");
    }
    match std::env::var_os("HOME").filter(|d| !d.is_empty()) {
        Some(h) => PathBuf::from(h).join(".cache").join("mapi-emulators"),
        None => std::env::temp_dir().join("mapi-emulators"),
    }
}

/// Installs the pinned package once (under an exclusive file lock) and
/// returns the directory that holds it and the launcher.
pub fn install() -> Result<PathBuf, String> {
    let dir = cache_root().join(format!("firestore-emulator-{VERSION}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lock = std::fs::File::create(dir.join(".lock")).map_err(|e| format!("{}: {e}", dir.display()))?;
    lock.lock().map_err(|e| format!("locking {}: {e}", dir.display()))?;
    let marker = dir.join(".installed");
    if !marker.exists() {
        let npm = which("npm").ok_or(
            "npm is not on PATH: the Firestore store suite needs Node.js and npm to install its emulator \
             (apt-get install nodejs npm)",
        )?;
        std::fs::write(dir.join("package.json"), "{\"private\": true}\n")
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let out = Command::new(npm)
            .args(["install", "--no-audit", "--no-fund", "--ignore-scripts", "--loglevel=error"])
            .arg(format!("{PACKAGE}@{VERSION}"))
            .current_dir(&dir)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("running npm: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "npm install {PACKAGE}@{VERSION} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        std::fs::write(&marker, VERSION).map_err(|e| format!("{}: {e}", marker.display()))?;
    }
    // Rewritten only when it differs: another test binary may be starting it.
    let launcher = dir.join("launch.js");
    if std::fs::read_to_string(&launcher).ok().as_deref() != Some(LAUNCHER) {
        std::fs::write(&launcher, LAUNCHER).map_err(|e| format!("{}: {e}", launcher.display()))?;
    }
    drop(lock);
    Ok(dir)
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .and_then(|paths| std::env::split_paths(&paths).map(|p| p.join(program)).find(|p| p.is_file()))
}

/// A running emulator; killed on drop.
#[derive(Debug)]
pub struct FirestoreEmulator {
    child: Child,
    /// `http://127.0.0.1:<port>`.
    pub endpoint: String,
}

impl FirestoreEmulator {
    /// Installs (once) and starts an emulator; panics with the reason if it cannot.
    pub fn start() -> FirestoreEmulator {
        let dir = install().unwrap_or_else(|e| panic!("Firestore emulator: {e}"));
        match Self::spawn(&dir) {
            Ok(e) => e,
            Err(e) => panic!("Firestore emulator did not start: {e}"),
        }
    }

    fn spawn(dir: &Path) -> Result<FirestoreEmulator, String> {
        let node = which("node").ok_or("node is not on PATH: the Firestore emulator is a Node.js program")?;
        let mut child = Command::new(node)
            .arg("launch.js")
            .current_dir(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("node: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep draining, so the emulator never blocks on a full pipe.
            for _ in lines {}
        });
        let mut stderr = child.stderr.take().ok_or("no stderr")?;
        std::thread::spawn(move || {
            // The emulator reports each unimplemented request here; the
            // tests see the error in the answer, so this is only drained.
            let mut sink = Vec::new();
            let _ = stderr.read_to_end(&mut sink);
        });
        let line = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
                return Err(format!("no port announced within 60 s (exit: {status})"));
            }
        };
        let port = line
            .strip_prefix("listening 127.0.0.1:")
            .and_then(|p| p.trim().parse::<u16>().ok())
            .ok_or_else(|| format!("unexpected first line `{line}`"))?;
        Ok(FirestoreEmulator { child, endpoint: format!("http://127.0.0.1:{port}") })
    }

    /// A store on a project of its own (the emulator keeps projects
    /// apart), once the emulator answers reads.
    pub async fn store(&self) -> FirestoreStore {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let project = format!("mapi-test-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
        let mut settings = Settings::new(project);
        settings.endpoint = Some(self.endpoint.clone());
        let store = FirestoreStore::connect(&settings, Credentials::Anonymous).await.expect("connect");
        let probe = DocKey::new("probe", "probe").expect("key");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match store.get(std::slice::from_ref(&probe), None).await {
                Ok(_) => return store,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!("emulator not answering yet: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("the Firestore emulator at {} does not answer: {e}", self.endpoint),
            }
        }
    }
}

impl Drop for FirestoreEmulator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
