//! Operations: kill switches, the reconcile tick's lease and executors.

use mapi_domain::{Timestamp, UserId};
use serde::{Deserialize, Serialize};

use crate::Doc;

/// The platform's kill switches. One document: `kill_switches/global`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct KillSwitchDoc {
    pub switches: mapi_quota::KillSwitches,
    pub reason: String,
    pub set_by: UserId,
    pub set_at: Timestamp,
}

impl KillSwitchDoc {
    pub const ID: &'static str = "global";
}

impl Doc for KillSwitchDoc {
    const COLLECTION: &'static str = "kill_switches";
    fn doc_id(&self) -> String {
        KillSwitchDoc::ID.to_owned()
    }
}

/// The reconcile tick's lease: one tick works at a time. Each taker bumps
/// `token` (the fencing token); a holder that finds another token has been
/// fenced out and stops. `cursor` is where the next tick resumes its sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TickLeaseDoc {
    pub holder: String,
    pub token: u64,
    pub until: Timestamp,
    /// The page token of the last run the sweep reached.
    pub cursor: Option<String>,
}

impl TickLeaseDoc {
    pub const ID: &'static str = "reconcile-tick";
}

impl Doc for TickLeaseDoc {
    const COLLECTION: &'static str = "leases";
    fn doc_id(&self) -> String {
        TickLeaseDoc::ID.to_owned()
    }
}

/// The spend-cap alarms' memory: the highest share of the cap (70 or 90 %)
/// already announced for the cap and period it was announced in. One
/// document: `alarms/spend-cap`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpendCapAlarmDoc {
    pub period_start: Timestamp,
    pub cap_micros: i64,
    pub announced_percent: u8,
}

impl SpendCapAlarmDoc {
    pub const ID: &'static str = "spend-cap";
}

impl Doc for SpendCapAlarmDoc {
    const COLLECTION: &'static str = "alarms";
    fn doc_id(&self) -> String {
        SpendCapAlarmDoc::ID.to_owned()
    }
}

/// An executor's operator switch and recorded evidence. Id: the
/// executor's name (`cloudrun-jobs`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExecutorDoc {
    pub name: String,
    /// The operators' switch (incident containment): a disabled executor
    /// takes no new attempts. Never the evidence gate's switch.
    pub enabled: bool,
    pub reason: Option<String>,
    pub set_by: Option<UserId>,
    pub set_at: Option<Timestamp>,
    pub evidence: Option<mapi_executor::evidence::Evidence>,
    pub evidence_recorded_by: Option<UserId>,
    pub evidence_recorded_at: Option<Timestamp>,
}

impl ExecutorDoc {
    /// The record of an executor nobody has switched or given evidence for.
    pub fn fresh(name: &str) -> ExecutorDoc {
        ExecutorDoc {
            name: name.to_owned(),
            enabled: true,
            reason: None,
            set_by: None,
            set_at: None,
            evidence: None,
            evidence_recorded_by: None,
            evidence_recorded_at: None,
        }
    }
}

impl Doc for ExecutorDoc {
    const COLLECTION: &'static str = "executors";
    fn doc_id(&self) -> String {
        self.name.clone()
    }
}

/// A run the executor suites made (`POST /v1/admin/executors/{name}/verify`):
/// it has no run or attempt record, and its executions' events are
/// acknowledged as the suite's, not counted as sandbox violations. Id: the
/// run's id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SuiteRunDoc {
    pub run: mapi_domain::RunId,
    pub executor: String,
    pub created_at: Timestamp,
}

impl Doc for SuiteRunDoc {
    const COLLECTION: &'static str = "suite_runs";
    fn doc_id(&self) -> String {
        self.run.to_string()
    }
}
