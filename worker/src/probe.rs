//! The security suite's probes, run inside an execution when its bootstrap
//! names [`PROBE_METHOD`] (only the suite writes such a bootstrap: the
//! method is not in the registry). Each probe tries what tenant code would
//! try and reports what it saw; the suite judges from what the host saw
//! (`mapi_executor::security`). Every attempt is bounded: a connection
//! waits at most [`WAIT`], the fork bomb starts at most its plan's limit and
//! ends every process it started.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::time::Duration;

use mapi_executor::security::{Observed, Plan, Seen};

pub use mapi_executor::security::PROBE_METHOD;

/// The longest a probe waits for a connection or an answer.
const WAIT: Duration = Duration::from_secs(2);

/// Runs every probe of `plan` (the memory bomb is a run of its own).
pub fn run(plan: &Plan) -> Observed {
    let mut seen = Observed::new();
    seen.insert("http_egress".into(), http_egress(plan));
    seen.insert("dns_egress".into(), dns_egress(plan));
    seen.insert("metadata_token".into(), metadata_token(plan));
    seen.insert("platform_home".into(), platform_home(plan));
    seen.insert("other_run".into(), read_back(plan.other_run_file.as_deref()));
    let cmdline = plan.host_pid.map(|pid| std::path::PathBuf::from(format!("/proc/{pid}/cmdline")));
    seen.insert("host_processes".into(), read_back(cmdline.as_deref()));
    seen.insert("write_outside".into(), write_outside(plan));
    seen.insert("privileges".into(), privileges());
    seen.insert("fork_bomb".into(), fork_bomb(plan.fork_limit));
    seen
}

fn ran(succeeded: bool, detail: impl Into<String>) -> Seen {
    Seen { ran: true, succeeded, read: None, detail: detail.into() }
}

fn http_egress(plan: &Plan) -> Seen {
    match TcpStream::connect_timeout(&plan.http_egress, WAIT) {
        Ok(mut s) => {
            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\n");
            ran(true, format!("connected to {}", plan.http_egress))
        }
        Err(e) => ran(false, format!("connecting to {}: {e}", plan.http_egress)),
    }
}

/// A DNS query for `name` (type A), as a resolver receives it.
fn query(name: &str) -> Vec<u8> {
    let mut q = vec![0x6d, 0x61, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(u8::try_from(label.len().min(63)).unwrap_or(63));
        q.extend(label.bytes().take(63));
    }
    q.extend([0, 0, 1, 0, 1]);
    q
}

fn dns_egress(plan: &Plan) -> Seen {
    let sent =
        UdpSocket::bind(("0.0.0.0", 0)).and_then(|s| s.send_to(&query(&plan.dns_name), plan.dns_server));
    let looked_up = (plan.dns_name.as_str(), 80).to_socket_addrs().map(|mut a| a.next());
    let detail =
        format!("query to {}: {sent:?}; lookup of {}: {looked_up:?}", plan.dns_server, plan.dns_name);
    // A datagram is sent even where nothing receives it: only the resolver's witness tells.
    ran(matches!(looked_up, Ok(Some(_))), detail)
}

/// `GET` of a metadata token URL with the metadata header, over plain HTTP.
fn token(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or("not an http URL")?;
    let (authority, path) =
        rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
    let host = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:80") };
    let addr = host.to_socket_addrs().map_err(|e| e.to_string())?.next().ok_or("no address")?;
    let mut s = TcpStream::connect_timeout(&addr, WAIT).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(WAIT)).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {authority}\r\nMetadata-Flavor: Google\r\n\r\n")
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    let _ = s.take(4096).read_to_string(&mut answer);
    Ok(answer.lines().next().unwrap_or("").to_owned())
}

fn metadata_token(plan: &Plan) -> Seen {
    let tries: Vec<(String, Result<String, String>)> =
        plan.metadata.iter().map(|u| (u.clone(), token(u))).collect();
    let got = tries.iter().any(|(_, r)| r.as_ref().is_ok_and(|line| line.contains(" 200")));
    ran(got, format!("{tries:?}"))
}

fn platform_home(plan: &Plan) -> Seen {
    let reads: Vec<String> = plan
        .platform_files
        .iter()
        .map(|f| match std::fs::read(f) {
            Ok(bytes) => format!("{}: read {} bytes", f.display(), bytes.len()),
            Err(e) => format!("{}: {e}", f.display()),
        })
        .collect();
    let read_any = plan.platform_files.iter().any(|f| std::fs::read(f).is_ok());
    ran(read_any, reads.join("; "))
}

/// Reads `path` back (at most 256 characters), for the suite to compare with the host's copy.
fn read_back(path: Option<&Path>) -> Seen {
    let Some(path) = path else { return Seen::default() };
    match std::fs::read(path) {
        Ok(bytes) => {
            let text: String = String::from_utf8_lossy(&bytes).chars().take(256).collect();
            Seen { ran: true, succeeded: true, read: Some(text), detail: format!("{}: read", path.display()) }
        }
        Err(e) => ran(false, format!("{}: {e}", path.display())),
    }
}

fn write_outside(plan: &Plan) -> Seen {
    let tries: Vec<String> = plan
        .write_paths
        .iter()
        .map(|p| match std::fs::write(p, b"written by the security probe") {
            Ok(()) => format!("{}: written", p.display()),
            Err(e) => format!("{}: {e}", p.display()),
        })
        .collect();
    ran(tries.iter().any(|t| t.ends_with(": written")), tries.join("; "))
}

fn privileges() -> Seen {
    let euid = nix::unistd::geteuid();
    let became = nix::unistd::setuid(nix::unistd::Uid::from_raw(0));
    ran(euid.is_root() || became.is_ok(), format!("euid {euid}; setuid(0): {became:?}"))
}

/// Starts up to `limit` sleeping processes, counts those that started, and ends them all.
fn fork_bomb(limit: u32) -> Seen {
    let mut children = Vec::new();
    let mut stopped = None;
    for _ in 0..limit {
        match std::process::Command::new("/bin/sleep")
            .arg("30")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
        {
            Ok(child) => children.push(child),
            Err(e) => {
                stopped = Some(e.to_string());
                break;
            }
        }
    }
    let started = children.len();
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
    let detail = match stopped {
        Some(e) => format!("{started} of {limit} processes started, then: {e}"),
        None => format!("all {limit} processes started"),
    };
    ran(started >= usize::try_from(limit).unwrap_or(usize::MAX), detail)
}
