use std::io::Read;
use std::net::TcpListener;
use std::time::Duration;

use super::*;

fn sandbox(work: &Path) -> Sandbox {
    Sandbox {
        args: vec!["/usr/bin/python3".into(), "-c".into(), "print(1)".into()],
        env: BTreeMap::from([("PATH".into(), "/usr/bin:/bin".into())]),
        work: work.to_owned(),
        read_only: Vec::new(),
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
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("runsc"))
        .find(|p| p.is_file());
    found.expect("runsc is not installed: `apt-get install runsc` (.ci/run installs it)")
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
    let mut expected: Vec<&str> =
        SYSTEM_DIRS.iter().filter(|d| Path::new(d).exists()).map(|d| &d[1..]).collect();
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
