//! The shared-tier gate: `verified` and `public` tenants' runs are placed
//! on an executor only when its caps allow it (isolation of gVisor or
//! stronger, egress and DNS enforced) and a passing conformance report and
//! a passing security report are on record for exactly the caps it reports
//! now, neither older than `MAPI_EXECUTOR_EVIDENCE_MAX_AGE_S`. Until then
//! such runs wait in the queue; they never fail for missing evidence. Pure:
//! the caller brings the caps, the recorded evidence and the time.

use std::time::Duration;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

use crate::{Capabilities, Isolation};

/// Probes of the security suite that must run and be stopped: a skipped
/// probe is not evidence.
pub const REQUIRED_PROBES: [&str; 3] = ["http_egress", "dns_egress", "metadata_token"];

/// What the suites ran against.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EvidenceTarget {
    pub executor: String,
    pub caps: Capabilities,
    pub remote_control_api: bool,
    pub enforces_memory_limit: bool,
}

/// One case of the conformance suite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CaseResult {
    pub name: String,
    pub passed: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The executor conformance suite's report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ConformanceReport {
    pub executor: String,
    pub finished_at: Timestamp,
    pub cases: Vec<CaseResult>,
}

impl ConformanceReport {
    /// Every case of the suite ran and passed.
    pub fn passed(&self) -> bool {
        crate::conformance_cases::CASES
            .iter()
            .all(|name| self.cases.iter().any(|c| c.name == *name && c.passed))
            && self.cases.iter().all(|c| c.passed)
    }
}

/// One probe of the security suite.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ProbeResult {
    pub name: String,
    /// The probe ran (a skipped probe proves nothing).
    pub ran: bool,
    /// The executor stopped what the probe tried.
    pub blocked: bool,
    /// What the host and the probe saw, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// The security suite's report (`mapi-security --json`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SecurityReport {
    pub finished_at: Timestamp,
    pub probes: Vec<ProbeResult>,
}

impl SecurityReport {
    /// The required probes ran and were stopped, and nothing that ran got through.
    pub fn passed(&self) -> bool {
        REQUIRED_PROBES.iter().all(|name| self.probes.iter().any(|p| p.name == *name && p.ran && p.blocked))
            && self.probes.iter().all(|p| !p.ran || p.blocked)
    }
}

/// What `PUT /v1/admin/executors/{name}/evidence` records.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Evidence {
    pub target: EvidenceTarget,
    pub conformance: ConformanceReport,
    pub security: SecurityReport,
}

/// The gate's answer, as `GET /v1/admin/executors` shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GateDecision {
    pub shared_tiers_enabled: bool,
    pub conformance_passed: bool,
    pub security_passed: bool,
    /// Why the gate is closed (or that it is open).
    pub message: String,
}

/// Decides whether `verified` and `public` tenants may run on an executor
/// reporting `caps`, with `evidence` on record, at `now`.
pub fn shared_tier_gate(
    caps: &Capabilities,
    evidence: Option<&Evidence>,
    now: Timestamp,
    max_age: Duration,
) -> GateDecision {
    let (conformance_passed, security_passed) = match evidence {
        Some(e) if e.target.caps == *caps && e.target.executor == caps.executor => {
            let fresh = |t: Timestamp| t <= now && now.since(t) <= max_age;
            (
                e.conformance.passed()
                    && e.conformance.executor == caps.executor
                    && fresh(e.conformance.finished_at),
                e.security.passed() && fresh(e.security.finished_at),
            )
        }
        _ => (false, false),
    };
    let closed = |message: String| GateDecision {
        shared_tiers_enabled: false,
        conformance_passed,
        security_passed,
        message,
    };
    if caps.isolation < Isolation::Gvisor {
        return closed(format!("isolation {:?} is weaker than gVisor", caps.isolation).to_lowercase());
    }
    if !caps.egress_enforced {
        return closed("egress is not enforced".to_owned());
    }
    if !caps.dns_enforced {
        return closed("DNS is not enforced".to_owned());
    }
    let Some(e) = evidence else {
        return closed("no conformance and security reports are on record".to_owned());
    };
    if e.target.executor != caps.executor || e.target.caps != *caps {
        return closed("the evidence on record is for other caps than the executor reports now".to_owned());
    }
    if !conformance_passed {
        return closed(if e.conformance.passed() {
            "the conformance report is too old".to_owned()
        } else {
            "the conformance report did not pass every case".to_owned()
        });
    }
    if !security_passed {
        return closed(if e.security.passed() {
            "the security report is too old".to_owned()
        } else {
            "the security report did not stop every required probe (http_egress, dns_egress, metadata_token)"
                .to_owned()
        });
    }
    GateDecision {
        shared_tiers_enabled: true,
        conformance_passed,
        security_passed,
        message: "caps allow shared tiers and passing reports for them are on record".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use mapi_domain::ResourceClass;

    use super::*;

    fn caps() -> Capabilities {
        Capabilities {
            executor: "cloudrun-jobs".into(),
            isolation: Isolation::MicroVm,
            classes: vec![ResourceClass::S],
            enforces_memory_limit: true,
            egress_enforced: true,
            dns_enforced: true,
            remote_control_api: true,
            max_task_count: 10_000,
            regions: vec!["europe-west1".into()],
            gpus: 0,
        }
    }

    fn evidence(at: Timestamp) -> Evidence {
        Evidence {
            target: EvidenceTarget {
                executor: "cloudrun-jobs".into(),
                caps: caps(),
                remote_control_api: true,
                enforces_memory_limit: true,
            },
            conformance: ConformanceReport {
                executor: "cloudrun-jobs".into(),
                finished_at: at,
                cases: crate::conformance_cases::CASES
                    .iter()
                    .map(|n| CaseResult { name: (*n).into(), passed: true, detail: None })
                    .collect(),
            },
            security: SecurityReport {
                finished_at: at,
                probes: REQUIRED_PROBES
                    .iter()
                    .map(|n| ProbeResult { name: (*n).into(), ran: true, blocked: true, detail: None })
                    .collect(),
            },
        }
    }

    const DAYS_3: Duration = Duration::from_secs(3 * 86_400);

    #[test]
    fn the_gate_opens_only_for_fresh_passing_evidence_of_exactly_the_current_caps() {
        let now = Timestamp::from_secs(2_000_000_000);
        let e = evidence(now - Duration::from_secs(3600));
        assert!(shared_tier_gate(&caps(), Some(&e), now, DAYS_3).shared_tiers_enabled);

        let g = shared_tier_gate(&caps(), None, now, DAYS_3);
        assert!(!g.shared_tiers_enabled && g.message.contains("no conformance"), "{g:?}");

        let mut other = caps();
        other.dns_enforced = false;
        let g = shared_tier_gate(&other, Some(&e), now, DAYS_3);
        assert_eq!(g.message, "DNS is not enforced");
        let mut other = caps();
        other.classes.push(ResourceClass::GPU);
        let g = shared_tier_gate(&other, Some(&e), now, DAYS_3);
        assert!(g.message.contains("other caps"), "{g:?}");

        let old = evidence(now - DAYS_3 - Duration::from_secs(1));
        let g = shared_tier_gate(&caps(), Some(&old), now, DAYS_3);
        assert_eq!(
            (g.shared_tiers_enabled, g.message.as_str()),
            (false, "the conformance report is too old")
        );

        let mut skipped = evidence(now);
        skipped.security.probes[1].ran = false;
        let g = shared_tier_gate(&caps(), Some(&skipped), now, DAYS_3);
        assert!(!g.security_passed && g.conformance_passed && !g.shared_tiers_enabled, "{g:?}");

        let mut failed = evidence(now);
        failed.conformance.cases[0].passed = false;
        assert!(!shared_tier_gate(&caps(), Some(&failed), now, DAYS_3).conformance_passed);

        let mut weak = caps();
        weak.isolation = Isolation::Process;
        let g = shared_tier_gate(&weak, Some(&e), now, DAYS_3);
        assert!(g.message.contains("weaker than gvisor"), "{g:?}");
    }
}
