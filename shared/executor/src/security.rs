//! The security suite: probes that run inside an execution on the executor
//! under test and must be stopped there. Each probe tries something tenant
//! code would try; whether it got through is judged from what the host saw
//! (a connection on a listener the suite opened, a file that appeared, a
//! secret read back), not only from what the probe says, so an executor
//! cannot pass by making the probe report failure.
//!
//! | probe | what it tries | got through when |
//! |---|---|---|
//! | `http_egress` | a TCP connection to a listener the suite opens on the host | the listener saw a connection |
//! | `dns_egress` | a query to a UDP resolver the suite opens, and a name lookup | the resolver saw a packet or the name resolved |
//! | `metadata_token` | a token from the metadata server (a stand-in the suite runs, and `169.254.169.254`) | the stand-in saw a request or a token came back |
//! | `platform_home` | reading the platform's store, signing key and secrets | any of them was read |
//! | `other_run` | reading a file in another execution's directory | its secret came back |
//! | `host_processes` | reading a host process's command line in `/proc` | it came back as the host has it |
//! | `write_outside` | writing files outside its work directory, on the host | a file appeared on the host |
//! | `privileges` | becoming root (`setuid(0)`) | it ran as root or became root |
//! | `fork_bomb` | starting [`Plan::fork_limit`] processes | all of them started |
//! | `memory_bomb` | holding more memory than its class's limit (a run of `diag.alloc`) | the run was not stopped for memory |
//!
//! Pure: [`judge`] takes what the probe observed and what the host
//! witnessed. The suite that opens the listeners and runs the executions
//! is [`crate::security::suite`] (with the `conformance` feature).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

use crate::evidence::{ProbeResult, SecurityReport};

#[cfg(feature = "conformance")]
pub mod suite;

/// The method name of the probes' execution. It is not in the method
/// registry, so no tenant can submit it: only the suite writes a bootstrap
/// that names it.
pub const PROBE_METHOD: &str = "security.probe";

/// The output the probe execution writes: its [`Observed`], as JSON.
pub const REPORT: &str = "report.json";

/// Every probe, in the order of the report.
pub const PROBES: [&str; 10] = [
    "http_egress",
    "dns_egress",
    "metadata_token",
    "platform_home",
    "other_run",
    "host_processes",
    "write_outside",
    "privileges",
    "fork_bomb",
    "memory_bomb",
];

/// What the probes try (the probe execution's params).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// A TCP listener of the suite, on the host.
    pub http_egress: SocketAddr,
    /// A UDP "resolver" of the suite, on the host.
    pub dns_server: SocketAddr,
    /// A name to look up with the system resolver.
    pub dns_name: String,
    /// Token URLs of metadata servers: the suite's stand-in and the real address.
    pub metadata: Vec<String>,
    /// The platform's files (store, keys, secrets); empty where the executor
    /// runs elsewhere (then the probe does not run).
    pub platform_files: Vec<PathBuf>,
    /// A file in another execution's directory (`None`: the probe does not run).
    pub other_run_file: Option<PathBuf>,
    /// A host process (the platform) whose command line the probe tries to read.
    pub host_pid: Option<u32>,
    /// Files the probe tries to create, outside its work directory.
    pub write_paths: Vec<PathBuf>,
    /// How many processes the fork bomb tries to start.
    pub fork_limit: u32,
}

/// What one probe saw, in the execution.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// The probe ran.
    pub ran: bool,
    /// What it tried succeeded, as far as it could tell.
    pub succeeded: bool,
    /// What it read, where it reads something (at most 256 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read: Option<String>,
    /// The error or count it met, in words.
    #[serde(default)]
    pub detail: String,
}

/// The probe execution's report: each probe by name.
pub type Observed = BTreeMap<String, Seen>;

/// What the host saw while the probes ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Witness {
    /// Connections the egress listener accepted.
    pub http_connections: usize,
    /// Packets the resolver received.
    pub dns_packets: usize,
    /// Requests the metadata stand-in received.
    pub metadata_requests: usize,
    /// The secret planted in another execution's directory.
    pub other_run_secret: Option<String>,
    /// The host process's command line, as the host reads it.
    pub host_cmdline: Option<String>,
    /// The probe's files that appeared on the host.
    pub written: usize,
    /// How the memory bomb's run ended: `Some(true)` stopped for memory,
    /// `Some(false)` not, `None` it did not run.
    pub memory_bomb_stopped: Option<bool>,
    /// The listeners could have been reached (the execution ran on the listeners' machine);
    /// otherwise the network probes prove nothing and count as not run.
    pub network_witnessed: bool,
}

/// Each probe's verdict: it ran, and whether the executor stopped it.
pub fn judge(plan: &Plan, seen: &Observed, witness: &Witness, finished_at: Timestamp) -> SecurityReport {
    let get = |name: &str| seen.get(name).cloned().unwrap_or_default();
    let mut probes = Vec::new();
    let mut verdict = |name: &str, ran: bool, got_through: bool, detail: String| {
        probes.push(ProbeResult {
            name: name.to_owned(),
            ran,
            blocked: ran && !got_through,
            detail: Some(detail),
        });
    };
    // The network probes: what reached the suite's listener, and what the probe got back.
    let network = [
        ("http_egress", witness.http_connections, "connection(s) reached the listener"),
        ("dns_egress", witness.dns_packets, "packet(s) reached the resolver"),
        ("metadata_token", witness.metadata_requests, "request(s) reached the stand-in"),
    ];
    for (name, reached, what) in network {
        let s = get(name);
        let mut detail = format!("{reached} {what}; in the execution: {}", s.detail);
        if !witness.network_witnessed {
            detail
                .push_str(" (not evidence: the execution ran on another machine than the suite's listeners)");
        }
        verdict(name, s.ran && witness.network_witnessed, reached > 0 || s.succeeded, detail);
    }
    let home = get("platform_home");
    verdict("platform_home", home.ran && !plan.platform_files.is_empty(), home.succeeded, home.detail);
    let other = get("other_run");
    let leaked = other.read.is_some() && other.read == witness.other_run_secret;
    verdict("other_run", other.ran && witness.other_run_secret.is_some(), leaked, other.detail);
    let procs = get("host_processes");
    let seen_host = procs.read.is_some() && procs.read == witness.host_cmdline;
    verdict("host_processes", procs.ran && witness.host_cmdline.is_some(), seen_host, procs.detail);
    let write = get("write_outside");
    verdict(
        "write_outside",
        write.ran && !plan.write_paths.is_empty(),
        witness.written > 0,
        format!("{} file(s) appeared on the host; in the execution: {}", witness.written, write.detail),
    );
    let root = get("privileges");
    verdict("privileges", root.ran, root.succeeded, root.detail);
    let fork = get("fork_bomb");
    verdict("fork_bomb", fork.ran, fork.succeeded, fork.detail);
    let memory = witness.memory_bomb_stopped;
    verdict(
        "memory_bomb",
        memory.is_some(),
        memory == Some(false),
        match memory {
            Some(true) => "stopped for memory".to_owned(),
            Some(false) => "held more than its class's memory".to_owned(),
            None => "did not run".to_owned(),
        },
    );
    SecurityReport { finished_at, probes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> Plan {
        Plan {
            http_egress: "127.0.0.1:1".parse().expect("addr"),
            dns_server: "127.0.0.1:2".parse().expect("addr"),
            dns_name: "probe.invalid".into(),
            metadata: vec!["http://127.0.0.1:3/token".into()],
            platform_files: vec!["/home/mapi/mapi.db".into()],
            other_run_file: Some("/home/mapi/executions/x/secret".into()),
            host_pid: Some(1),
            write_paths: vec!["/home/mapi/probe".into()],
            fork_limit: 512,
        }
    }

    fn all_ran(succeeded: bool) -> Observed {
        PROBES.iter().map(|p| ((*p).to_owned(), Seen { ran: true, succeeded, ..Seen::default() })).collect()
    }

    /// The host's witness outweighs what the probe says: a connection the listener saw is
    /// egress even if the probe reports failure.
    #[test]
    fn the_host_witness_decides() {
        let witness = Witness {
            other_run_secret: Some("s3cret".into()),
            host_cmdline: Some("mapi dev".into()),
            memory_bomb_stopped: Some(true),
            network_witnessed: true,
            ..Witness::default()
        };
        let report = judge(&plan(), &all_ran(false), &witness, Timestamp::EPOCH);
        assert!(report.passed(), "{report:#?}");
        assert_eq!(report.probes.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), PROBES);
        let leaky = Witness { http_connections: 1, dns_packets: 1, written: 1, ..witness.clone() };
        let report = judge(&plan(), &all_ran(false), &leaky, Timestamp::EPOCH);
        let through: Vec<&str> =
            report.probes.iter().filter(|p| !p.blocked).map(|p| p.name.as_str()).collect();
        assert_eq!(through, ["http_egress", "dns_egress", "write_outside"]);
        assert!(!report.passed());
    }

    /// A probe that did not run is not evidence, and a secret read back is a leak.
    #[test]
    fn a_probe_that_did_not_run_is_not_evidence() {
        let mut seen = all_ran(false);
        seen.remove("dns_egress");
        seen.insert("other_run".into(), Seen { ran: true, read: Some("s3cret".into()), ..Seen::default() });
        let witness = Witness {
            other_run_secret: Some("s3cret".into()),
            network_witnessed: true,
            ..Witness::default()
        };
        let report = judge(&plan(), &seen, &witness, Timestamp::EPOCH);
        let dns = report.probes.iter().find(|p| p.name == "dns_egress").expect("dns");
        assert!(!dns.ran && !dns.blocked);
        let other = report.probes.iter().find(|p| p.name == "other_run").expect("other");
        assert!(other.ran && !other.blocked);
        assert!(!report.passed());
        // Listeners the execution could not have reached witness nothing.
        let far = Witness { network_witnessed: false, ..witness.clone() };
        let report = judge(&plan(), &all_ran(false), &far, Timestamp::EPOCH);
        let http = report.probes.iter().find(|p| p.name == "http_egress").expect("http");
        assert!(!http.ran && http.detail.as_deref().is_some_and(|d| d.contains("not evidence")), "{http:?}");
        assert!(!report.passed());
    }
}
