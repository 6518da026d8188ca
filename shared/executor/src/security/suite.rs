//! The security suite's host side: it opens what the probes aim at (a TCP
//! listener, a UDP resolver, a metadata server stand-in, all on
//! 127.0.0.1), plants another execution's secret and names the platform's
//! files, runs the probes as one execution and the memory bomb as another
//! through a [`Harness`], and judges what the host witnessed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use mapi_domain::{ExecutionStatus, ResourceClass};

use super::{Observed, Plan, REPORT, Witness, judge};
use crate::conformance::{Behaviour, Harness, attempt, wait_done};
use crate::evidence::SecurityReport;

/// What the suite aims the probes at, besides its own listeners.
#[derive(Clone, Debug, Default)]
pub struct Targets {
    /// The platform's store, keys and secrets (on the machine the executor runs on).
    pub platform_files: Vec<PathBuf>,
    /// Where executions' directories are: the suite plants another execution's secret there.
    pub executions_dir: Option<PathBuf>,
    /// A host process whose command line the probes try to read (the platform's).
    pub host_pid: Option<u32>,
    /// A host directory the probes try to write into (the platform's home).
    pub write_dir: Option<PathBuf>,
    /// The executions run on this machine, so its loopback listeners witness their egress.
    /// Elsewhere a listener here proves nothing (the execution could not reach it whatever
    /// its egress rules): the network probes then count as not run.
    pub same_machine: bool,
}

/// How many processes the fork bomb tries to start: more than any sandbox allows.
pub const FORK_LIMIT: u32 = 512;

/// One listener the probes aim at, counting what reached it until dropped.
struct Witnessed {
    addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Drop for Witnessed {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Witnessed {
    fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    /// A TCP listener that counts connections and answers each with `answer`.
    fn tcp(answer: &'static [u8]) -> std::io::Result<Witnessed> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let w = Witnessed { addr: listener.local_addr()?, hits: Arc::default(), stop: Arc::default() };
        let (hits, stop) = (w.hits.clone(), w.stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((mut conn, _)) => {
                        hits.fetch_add(1, Ordering::SeqCst);
                        let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
                        let _ = conn.read(&mut [0u8; 1024]);
                        let _ = conn.write_all(answer);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        Ok(w)
    }

    /// A UDP socket that counts packets.
    fn udp() -> std::io::Result<Witnessed> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        socket.set_read_timeout(Some(Duration::from_millis(50)))?;
        let w = Witnessed { addr: socket.local_addr()?, hits: Arc::default(), stop: Arc::default() };
        let (hits, stop) = (w.hits.clone(), w.stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !stop.load(Ordering::SeqCst) {
                if socket.recv_from(&mut buf).is_ok() {
                    hits.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        Ok(w)
    }
}

const TOKEN: &[u8] = b"HTTP/1.0 200 OK\r\ncontent-type: application/json\r\n\r\n{\"access_token\":\"stand-in\",\"expires_in\":3599,\"token_type\":\"Bearer\"}";

/// Runs the security suite through `h` against `targets`.
///
/// # Panics
///
/// When the host cannot open its listeners or plant its files (the suite cannot run).
pub async fn run(h: &dyn Harness, targets: &Targets) -> SecurityReport {
    let http = Witnessed::tcp(b"HTTP/1.0 204 No Content\r\n\r\n").expect("the egress listener");
    let dns = Witnessed::udp().expect("the resolver");
    let metadata = Witnessed::tcp(TOKEN).expect("the metadata stand-in");
    // Class M: the fork bomb's processes are not to be stopped by class S's memory limit
    // before the probes report (where only memory is enforced, that would hide the result).
    let mut a = attempt(40, Duration::from_secs(120), 1);
    a.class = ResourceClass::M;
    let tag = a.nonce.to_string();
    let planted = targets.executions_dir.as_ref().map(|dir| {
        let dir = dir.join(format!(".security-{tag}")).join("tasks").join("0");
        std::fs::create_dir_all(&dir).expect("another execution's directory");
        let secret = format!("secret-{tag}");
        std::fs::write(dir.join("secret"), &secret).expect("another execution's secret");
        (dir.join("secret"), secret)
    });
    // Files written on another machine never appear here: only on this one is it a probe.
    let mut write_paths = Vec::new();
    if targets.same_machine {
        write_paths.push(std::env::temp_dir().join(format!("mapi-security-{tag}")));
        write_paths.extend(targets.write_dir.iter().map(|d| d.join(format!("security-{tag}"))));
    }
    let host_cmdline = targets.host_pid.and_then(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok());
    let plan = Plan {
        http_egress: http.addr,
        dns_server: dns.addr,
        dns_name: "metadata.google.internal".to_owned(),
        metadata: vec![
            format!("http://{}/computeMetadata/v1/instance/service-accounts/default/token", metadata.addr),
            "http://169.254.169.254/computeMetadata/v1/instance/service-accounts/default/token".to_owned(),
        ],
        platform_files: targets.platform_files.clone(),
        other_run_file: planted.as_ref().map(|(path, _)| path.clone()),
        host_pid: targets.host_pid,
        write_paths: write_paths.clone(),
        fork_limit: FORK_LIMIT,
    };
    h.prepare(&a, Behaviour::Probe(Box::new(plan.clone()))).await;
    let handle = h.executor().submit(&a).await.expect("submit the probes");
    let info = wait_done(h, &handle).await;
    let seen: Observed = match h.output(&a, 0, REPORT).await {
        Some(stored) => serde_json::from_slice(&stored.bytes).unwrap_or_default(),
        None => {
            tracing::warn!(status = ?info.status, "the probes wrote no report: none of them counts as run");
            Observed::new()
        }
    };
    let memory_bomb_stopped = memory_bomb(h).await;
    let witness = Witness {
        http_connections: http.hits(),
        dns_packets: dns.hits(),
        metadata_requests: metadata.hits(),
        other_run_secret: planted.as_ref().map(|(_, secret)| secret.clone()),
        host_cmdline: host_cmdline.map(|b| String::from_utf8_lossy(&b).chars().take(256).collect()),
        written: write_paths.iter().filter(|p| p.exists()).count(),
        memory_bomb_stopped,
        network_witnessed: targets.same_machine,
    };
    for p in &write_paths {
        let _ = std::fs::remove_file(p);
    }
    if let (Some(dir), Some(_)) = (&targets.executions_dir, &planted) {
        let _ = std::fs::remove_dir_all(dir.join(format!(".security-{tag}")));
    }
    let _ = h.executor().forget(&handle).await;
    judge(&plan, &seen, &witness, h.now())
}

/// The memory bomb: a run of `diag.alloc` holding twice its class's memory. `Some(true)` when
/// the executor stopped it for memory.
async fn memory_bomb(h: &dyn Harness) -> Option<bool> {
    let a = attempt(41, Duration::from_secs(60), 1);
    h.prepare(&a, Behaviour::Allocate { mib: h.class_s_memory_mib() * 2 }).await;
    let handle = h.executor().submit(&a).await.ok()?;
    let status = wait_done(h, &handle).await.status;
    let _ = h.executor().forget(&handle).await;
    match status {
        ExecutionStatus::NotFound => None,
        s => Some(mapi_domain::classify(&s) == Some(mapi_domain::AttemptOutcome::OutOfMemory)),
    }
}
