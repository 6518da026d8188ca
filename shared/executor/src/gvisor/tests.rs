use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use super::*;

fn sandbox(work: &Path) -> Sandbox {
    Sandbox {
        args: vec!["/usr/bin/python3".into(), "-c".into(), "print(1)".into()],
        env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
        work: Some(work.to_owned()),
        read_only: Vec::new(),
        max_processes: 64,
    }
}

/// What the spec grants, read off it: the allow-list of mounts, nobody, no capabilities, a
/// read-only empty root and a network namespace of its own.
#[test]
fn the_spec_grants_only_the_system_dirs_the_work_dir_and_nobody() {
    let spec = sandbox(Path::new("/srv/task-0")).runtime_spec();
    let mounts = spec["mounts"].as_array().expect("mounts");
    let writable: Vec<&Value> = mounts
        .iter()
        .filter(|m| m["type"] == "bind" && !m["options"].as_array().is_some_and(|o| o.contains(&json!("ro"))))
        .map(|m| &m["source"])
        .collect();
    assert_eq!(writable, [&json!("/srv/task-0")], "the work dir is the only host dir it may write");
    for m in mounts.iter().filter(|m| m["type"] == "bind" && m["source"] != "/srv/task-0") {
        let system = SYSTEM_DIRS.iter().any(|d| m["source"] == *d);
        assert!(system && m["source"] == m["destination"], "only system dirs, read-only: {m}");
    }
    assert_eq!((&spec["root"]["path"], &spec["root"]["readonly"]), (&json!("rootfs"), &json!(true)));
    let process = &spec["process"];
    assert_eq!(process["user"], json!({"uid": NOBODY, "gid": NOBODY}));
    assert_eq!(process["noNewPrivileges"], true);
    for set in ["bounding", "effective", "inheritable", "permitted", "ambient"] {
        assert_eq!(process["capabilities"][set], json!([]), "{set}");
    }
    let namespaces = spec["linux"]["namespaces"].as_array().expect("namespaces");
    assert!(namespaces.iter().all(|n| n.get("path").is_none()), "no namespace is the host's: {namespaces:?}");
    assert!(namespaces.contains(&json!({"type": "network"})));
}

/// runsc, from Debian's `runsc` package; a machine without it fails this test, never skips it.
fn runsc() -> PathBuf {
    find_program("runsc").expect("runsc is not installed: `apt-get install runsc` (.ci/run installs it)")
}

/// What the probe inside tries, each reported as `ok` or the error it met.
const PROBE: &str = r#"
import json, os, socket, sys
secret, port = sys.argv[1], int(sys.argv[2])
out = {"uid": os.getuid(), "root": sorted(os.listdir("/"))}
def attempt(name, f):
    try:
        f(); out[name] = "ok"
    except Exception as e:
        out[name] = type(e).__name__
attempt("read_secret", lambda: open(secret).read())
attempt("write_usr", lambda: open("/usr/probe", "w").write("x"))
attempt("write_work", lambda: open("/work/written", "w").write("from the sandbox"))
attempt("connect_host", lambda: socket.create_connection(("127.0.0.1", port), 2))
attempt("resolve", lambda: socket.getaddrinfo("metadata.google.internal", 80))
attempt("setuid_root", lambda: os.setuid(0))
print(json.dumps(out))
"#;

/// A process in the sandbox runs as nobody, sees only the system dirs and its work dir, cannot
/// read a secret of the host (it is not there), write outside its work dir, reach a listener on
/// the host's loopback (which sees no connection), resolve a name or become root.
#[test]
fn runsc_confines_a_process_to_its_work_dir_with_no_network() {
    let runsc = runsc();
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let secret = home.join("signing-key");
    std::fs::write(&secret, "the platform's key").expect("secret");
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).expect("work");
    std::os::unix::fs::chown(&work, Some(NOBODY), Some(NOBODY)).expect("chown the work dir");
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();

    let mut s = sandbox(&work);
    s.args = vec![
        "/usr/bin/python3".into(),
        "-c".into(),
        PROBE.into(),
        secret.display().to_string(),
        port.to_string(),
    ];
    let bundle = dir.path().join("bundle");
    s.write_bundle(&bundle).expect("bundle");
    let id = format!("probe-{}", std::process::id());
    let out = run_command(&runsc, &dir.path().join("state"), &bundle, &id)
        .stdin(std::process::Stdio::null())
        .output()
        .expect("runsc runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "runsc: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = stdout.lines().rev().find(|l| l.starts_with('{')).expect("the probe's report");
    let got: Value = serde_json::from_str(line).expect("json");

    assert_eq!(got["uid"], NOBODY);
    let mut expected: Vec<&str> = SYSTEM_DIRS
        .iter()
        .filter(|d| Path::new(d).exists())
        .filter_map(|d| d[1..].split('/').next())
        .collect();
    expected.dedup();
    expected.extend(["dev", "proc", "tmp", "work"]);
    expected.sort_unstable();
    let root: Vec<&str> = got["root"].as_array().expect("root").iter().filter_map(Value::as_str).collect();
    let root: Vec<&str> = root.into_iter().filter(|e| *e != "sys").collect();
    assert_eq!(root, expected, "{got}");
    assert_eq!(got["read_secret"], "FileNotFoundError", "{got}");
    assert_ne!(got["write_usr"], "ok", "{got}");
    assert_eq!(got["write_work"], "ok", "{got}");
    let mut written = String::new();
    std::fs::File::open(work.join("written"))
        .expect("on the host")
        .read_to_string(&mut written)
        .expect("read");
    assert_eq!(written, "from the sandbox");
    assert_ne!(got["connect_host"], "ok", "{got}");
    std::thread::sleep(Duration::from_millis(50));
    assert!(listener.accept().is_err(), "the host's listener saw a connection");
    assert_ne!(got["resolve"], "ok", "{got}");
    assert_eq!(got["setuid_root"], "PermissionError", "{got}");
}

/// The execution host with a sandbox in its spec: tasks are `python3 -c script` in gVisor (the
/// program is bound at the worker's place), reaching the stand-in platform at `port` only
/// through their channel.
mod host {
    use std::collections::BTreeMap;
    use std::io::Write;
    use std::path::PathBuf;

    use mapi_domain::{AttemptNo, ExecutionStatus, Nonce, ResourceClass, RunId, Timestamp};

    use crate::gvisor::task::SandboxSpec;
    use crate::local::host::run;
    use crate::local::layout::{self, Command, ExecSpec, StatusFile, StopReason};

    fn spec(script: &str, port: u16, timeout_ms: u64, memory_limit_mib: u64) -> ExecSpec {
        // runsc names a sandbox's control socket after its container, machine-wide.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        ExecSpec {
            handle: format!("exec-{n}-{}", std::process::id()),
            job: "local-s".into(),
            run: RunId::generate(Timestamp::from_secs(1), [1; 10]),
            attempt: AttemptNo::FIRST,
            nonce: Nonce::from_bytes([1; 16]),
            class: ResourceClass::S,
            task_count: 1,
            created: Timestamp::from_secs(1),
            task_timeout_ms: timeout_ms,
            grace_ms: 1_000,
            memory_limit_mib,
            task: Command { program: "/usr/bin/python3".into(), args: vec!["-c".into(), script.into()] },
            env: BTreeMap::new(),
            sandbox: Some(SandboxSpec {
                runsc: super::runsc(),
                host: "127.0.0.1".into(),
                port,
                bootstrap: "/o/bootstrap/{nonce}".into(),
                max_processes: 32,
            }),
        }
    }

    fn host(spec: &ExecSpec) -> (tempfile::TempDir, StatusFile, String) {
        let dir = tempfile::tempdir().expect("tempdir");
        layout::write_json(dir.path(), layout::SPEC, spec).expect("spec");
        let status = run(dir.path()).expect("host run");
        let out = |name: &str| {
            std::fs::read_to_string(layout::task_dir(dir.path(), 0).join(name)).unwrap_or_default()
        };
        let printed = format!("{}{}", out("stdout.log"), out("stderr.log"));
        (dir, status, printed)
    }

    /// A stand-in platform: answers every connection `200` with the request line it got.
    fn platform() -> (u16, std::sync::mpsc::Receiver<String>) {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for mut conn in listener.incoming().flatten() {
                let mut line = String::new();
                let _ = BufReader::new(&conn).read_line(&mut line);
                let _ = tx.send(line.trim().to_owned());
                let _ =
                    conn.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\ntaken");
            }
        });
        (port, rx)
    }

    /// Through its channel a task gets its own bootstrap and nothing else of the platform,
    /// and it sees the Cloud Run variables and the proxy's socket.
    #[test]
    fn a_task_reaches_its_bootstrap_through_its_channel_and_nothing_else() {
        let (port, seen) = platform();
        let script = r#"
import os, socket
def ask(path):
    s = socket.socket(socket.AF_UNIX); s.connect(os.environ["MAPI_WORKER_PROXY_SOCKET"])
    s.sendall(f"GET http://127.0.0.1:{os.environ['PORT']}{path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    return s.makefile("rb").readline().decode().strip()
print("bootstrap", ask("/o/bootstrap/" + os.environ["MAPI_NONCE"]))
print("whoami", ask("/v1/whoami"))
print("index", os.environ["CLOUD_RUN_TASK_INDEX"], os.getuid())
"#;
        let mut s = spec(script, port, 20_000, 256);
        s.env.insert("PORT".into(), port.to_string());
        s.env.insert("MAPI_NONCE".into(), s.nonce.to_string());
        let (_d, status, printed) = host(&s);
        assert_eq!(status.status, ExecutionStatus::Succeeded, "{printed}");
        assert!(printed.contains("bootstrap HTTP/1.1 200 OK"), "{printed}");
        assert!(printed.contains("whoami HTTP/1.1 403"), "{printed}");
        assert!(printed.contains("index 0 65534"), "{printed}");
        let got: Vec<String> = seen.try_iter().collect();
        assert_eq!(
            got,
            [format!("GET /o/bootstrap/{} HTTP/1.1", s.nonce)],
            "only the bootstrap reached the platform"
        );
    }

    /// Memory the sandbox holds, in its processes or its in-memory work directory, counts
    /// against the limit: over it the task is killed and the execution fails with 137.
    #[test]
    fn memory_over_the_limit_kills_the_sandbox_with_137() {
        let held =
            "import time; b = bytearray(96 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); time.sleep(30)";
        let written = "import time; open('/work/big', 'wb').write(b'x' * (96 * 1024 * 1024)); time.sleep(30)";
        for script in [held, written] {
            let started = std::time::Instant::now();
            let (_d, status, printed) = host(&spec(script, 9, 60_000, 48));
            assert!(
                matches!(status.status, ExecutionStatus::Failed { exit_code: Some(137), .. }),
                "{script}: {:?} {printed}",
                status.status
            );
            assert_eq!(status.tasks[0].stopped, Some(StopReason::MemoryLimit));
            assert!(started.elapsed() < std::time::Duration::from_secs(20));
        }
    }

    /// The timeout stops the sandbox through runsc (143), and a fork bomb stops at the
    /// sandbox's process limit without troubling the host.
    #[test]
    fn timeout_and_fork_bomb_stop_inside_the_sandbox() {
        let (_d, status, printed) = host(&spec("import time; time.sleep(30)", 9, 500, 256));
        assert_eq!(
            status.status,
            ExecutionStatus::Failed { exit_code: Some(143), signal: None, message: "task timed out".into() },
            "{printed}"
        );
        let bomb = r#"
import os, time
n = 0
try:
    while n < 1000:
        if os.fork() == 0:
            time.sleep(5); os._exit(0)
        n += 1
except OSError as e:
    print("stopped after", n, e.errno)
"#;
        let (_d, status, printed) = host(&spec(bomb, 9, 30_000, 256));
        assert_eq!(status.status, ExecutionStatus::Succeeded, "{printed}");
        let n: u32 = printed
            .split_whitespace()
            .skip_while(|w| *w != "after")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{printed}"));
        assert!(n < 32, "{printed}");
    }

    /// The host removes what runsc left: no container of a finished execution stays.
    #[test]
    fn a_finished_execution_leaves_no_container() {
        let (dir, status, printed) = host(&spec("print('done')", 9, 20_000, 256));
        assert_eq!(status.status, ExecutionStatus::Succeeded, "{printed}");
        let list = std::process::Command::new(super::runsc())
            .arg("--root")
            .arg(dir.path().join("runsc"))
            .args(["list", "-quiet"])
            .output()
            .expect("runsc list");
        assert_eq!(String::from_utf8_lossy(&list.stdout).trim(), "", "{list:?}");
        let _: PathBuf = dir.path().join("runsc");
    }
}
