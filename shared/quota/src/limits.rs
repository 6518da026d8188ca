//! The limits at each level: the defaults of every trust tier (the spec's
//! tier table), an operator's per-tenant [`Policy`], the platform-wide limits
//! and the kill switches.

use mapi_domain::{ResourceClass, Tier};
use serde::{Deserialize, Serialize};

use crate::Period;

/// One GiB, 2^30 bytes.
pub const GIB: u64 = 1 << 30;

/// Platform-wide default for concurrent runs.
pub const PLATFORM_CONCURRENT_RUNS: u32 = 700;

/// Limits at one level; `None` = no limit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Limits {
    pub vcpu_seconds_per_day: Option<u64>,
    pub vcpu_seconds_per_month: Option<u64>,
    pub concurrent_runs: Option<u32>,
    pub max_fanout_tasks: Option<u32>,
    /// The largest class a run can use; a limit below GPU refuses the GPU class.
    pub max_resource_class: Option<ResourceClass>,
    pub storage_bytes: Option<u64>,
    pub egress_bytes_per_month: Option<u64>,
    pub requests_per_minute: Option<u32>,
    /// Items one item job may hold.
    #[serde(default)]
    pub max_items_per_job: Option<u64>,
    /// Model-server instances the tenant's endpoints may hold at once: the
    /// sum of their `max_instances` (what they may scale to, so an
    /// endpoint's own scaling never passes it).
    #[serde(default)]
    pub endpoint_instances: Option<u32>,
}

/// The defaults of a trust tier, exactly the spec's tier table.
pub fn tier_defaults(tier: Tier) -> Limits {
    match tier {
        Tier::Internal => Limits {
            concurrent_runs: Some(100),
            max_fanout_tasks: Some(1_000),
            requests_per_minute: Some(6_000),
            max_items_per_job: Some(100_000),
            endpoint_instances: Some(200),
            ..Limits::default()
        },
        Tier::SelfHostedTrusted => Limits::default(),
        Tier::Verified => Limits {
            vcpu_seconds_per_day: Some(86_400),
            vcpu_seconds_per_month: Some(1_000_000),
            concurrent_runs: Some(20),
            max_fanout_tasks: Some(256),
            max_resource_class: Some(ResourceClass::L),
            storage_bytes: Some(100 * GIB),
            egress_bytes_per_month: Some(100 * GIB),
            requests_per_minute: Some(600),
            max_items_per_job: Some(10_000),
            endpoint_instances: Some(20),
        },
        Tier::Public => Limits {
            vcpu_seconds_per_day: Some(3_600),
            vcpu_seconds_per_month: Some(36_000),
            concurrent_runs: Some(2),
            max_fanout_tasks: Some(16),
            max_resource_class: Some(ResourceClass::S),
            storage_bytes: Some(2 * GIB),
            egress_bytes_per_month: Some(5 * GIB),
            requests_per_minute: Some(60),
            max_items_per_job: Some(1_000),
            endpoint_instances: Some(3),
        },
    }
}

/// The platform-wide defaults: [`PLATFORM_CONCURRENT_RUNS`], nothing else.
pub fn platform_limits() -> Limits {
    Limits { concurrent_runs: Some(PLATFORM_CONCURRENT_RUNS), ..Limits::default() }
}

/// An operator's override: the limits given replace the tier's; the others
/// fall back to it. Setting a policy replaces the whole previous one, so a
/// limit left out goes back to the tier default.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Policy {
    pub vcpu_seconds_per_day: Option<u64>,
    pub vcpu_seconds_per_month: Option<u64>,
    pub concurrent_runs: Option<u32>,
    pub max_fanout_tasks: Option<u32>,
    pub max_resource_class: Option<ResourceClass>,
    pub storage_bytes: Option<u64>,
    pub egress_bytes_per_month: Option<u64>,
    pub requests_per_minute: Option<u32>,
    #[serde(default)]
    pub max_items_per_job: Option<u64>,
    #[serde(default)]
    pub endpoint_instances: Option<u32>,
    /// Days an item job is kept before the retention housekeeper deletes
    /// it; the platform's `MAPI_JOB_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub job_retention_days: Option<u32>,
    /// Days after a run ended before the run housekeeper removes what its
    /// executions left (their logs included; the run, its ledger entries and
    /// its outputs stay); the platform's `MAPI_RUN_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub run_retention_days: Option<u32>,
    /// Days an audit entry of the tenant is kept; the platform's
    /// `MAPI_AUDIT_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub audit_retention_days: Option<u32>,
    /// Days a webhook message of the tenant (with its delivery log) is
    /// kept; the platform's `MAPI_DELIVERY_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub delivery_retention_days: Option<u32>,
    /// Days after its upload a dataset of the tenant that no run reads is
    /// deleted; the platform's `MAPI_DATASET_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub dataset_retention_days: Option<u32>,
    /// Days after its creation a model version of the tenant that serves
    /// no endpoint keeps its bytes (its bundle and the outputs it seals);
    /// the platform's `MAPI_MODEL_VERSION_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub model_version_retention_days: Option<u32>,
    /// Days after its executions were forgotten (the run retention after
    /// its end) that a run of the tenant is kept: then it goes with its
    /// documents and objects, unless its model version serves an endpoint;
    /// the platform's `MAPI_RUN_RECORD_RETENTION_DAYS` when absent.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub run_record_retention_days: Option<u32>,
    /// Why the operator set it; no effect on the limits.
    pub note: Option<String>,
}

/// The tenant-level limits: each limit the policy gives, else the tier's.
pub fn effective(tier: Tier, policy: Option<&Policy>) -> Limits {
    let tier = tier_defaults(tier);
    let Some(p) = policy else { return tier };
    Limits {
        vcpu_seconds_per_day: p.vcpu_seconds_per_day.or(tier.vcpu_seconds_per_day),
        vcpu_seconds_per_month: p.vcpu_seconds_per_month.or(tier.vcpu_seconds_per_month),
        concurrent_runs: p.concurrent_runs.or(tier.concurrent_runs),
        max_fanout_tasks: p.max_fanout_tasks.or(tier.max_fanout_tasks),
        max_resource_class: p.max_resource_class.or(tier.max_resource_class),
        storage_bytes: p.storage_bytes.or(tier.storage_bytes),
        egress_bytes_per_month: p.egress_bytes_per_month.or(tier.egress_bytes_per_month),
        requests_per_minute: p.requests_per_minute.or(tier.requests_per_minute),
        max_items_per_job: p.max_items_per_job.or(tier.max_items_per_job),
        endpoint_instances: p.endpoint_instances.or(tier.endpoint_instances),
    }
}

/// The platform's kill switches. A stored document may omit fields; the
/// missing ones take the defaults (uploaded code on, no spend cap, monthly).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct KillSwitches {
    /// Off: the platform does not accept or lease runs of plugin code that a
    /// tenant uploaded. Built-in models continue to work.
    pub untrusted_execution_enabled: bool,
    /// Global spend cap in micros: once the platform's spend in the current
    /// UTC period reaches it, no new compute starts except for internal tenants.
    pub spend_cap_micros: Option<i64>,
    /// The UTC period the spend cap counts over.
    pub spend_cap_period: Period,
}

impl Default for KillSwitches {
    fn default() -> Self {
        KillSwitches {
            untrusted_execution_enabled: true,
            spend_cap_micros: None,
            spend_cap_period: Period::Month,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec's tier table, typed again by hand. Columns: tier, vCPU-s/day,
    /// vCPU-s/month, concurrent runs, fan-out tasks, largest class, storage,
    /// egress/month, requests/min, items per item job, endpoint instances. A
    /// dash means no limit (the platform's `MAPI_JOB_MAX_ITEMS` still caps a
    /// job's items). The last column is the platform's own, not the spec's.
    const TABLE: &str = "
        | internal            | —      | —         | 100 | 1,000 | — | —       | —       | 6,000 | 100,000 | 200 |
        | self-hosted-trusted | —      | —         | —   | —     | — | —       | —       | —     | —       | —   |
        | verified            | 86,400 | 1,000,000 | 20  | 256   | L | 100 GiB | 100 GiB | 600   | 10,000  | 20  |
        | public              | 3,600  | 36,000    | 2   | 16    | S | 2 GiB   | 5 GiB   | 60    | 1,000   | 3   |
    ";

    fn number(cell: &str) -> Option<u64> {
        (cell != "—").then(|| cell.replace(',', "").parse().expect("a number"))
    }

    fn bytes(cell: &str) -> Option<u64> {
        (cell != "—").then(|| {
            let n: u64 = cell.strip_suffix(" GiB").expect("GiB").parse().expect("a number");
            n * (1 << 30)
        })
    }

    fn small(cell: &str) -> Option<u32> {
        number(cell).map(|n| u32::try_from(n).expect("fits u32"))
    }

    #[test]
    fn tier_defaults_are_the_spec_table() {
        let mut seen = Vec::new();
        for row in TABLE.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let c: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
            assert_eq!(c.len(), 11, "{row}");
            let tier: Tier = c[0].parse().expect("a tier");
            let expected = Limits {
                vcpu_seconds_per_day: number(c[1]),
                vcpu_seconds_per_month: number(c[2]),
                concurrent_runs: small(c[3]),
                max_fanout_tasks: small(c[4]),
                max_resource_class: (c[5] != "—").then(|| c[5].parse().expect("a class")),
                storage_bytes: bytes(c[6]),
                egress_bytes_per_month: bytes(c[7]),
                requests_per_minute: small(c[8]),
                max_items_per_job: number(c[9]),
                endpoint_instances: small(c[10]),
            };
            assert_eq!(tier_defaults(tier), expected, "{tier}");
            seen.push(tier);
        }
        seen.sort();
        assert_eq!(seen, Tier::ALL, "every tier has a row");
    }

    #[test]
    fn platform_limits_only_cap_concurrent_runs() {
        assert_eq!(platform_limits(), Limits { concurrent_runs: Some(700), ..Limits::default() });
    }

    #[test]
    fn no_policy_is_the_tier_defaults() {
        for &tier in Tier::ALL {
            assert_eq!(effective(tier, None), tier_defaults(tier));
            assert_eq!(effective(tier, Some(&Policy::default())), tier_defaults(tier));
        }
    }

    #[test]
    fn a_policy_replaces_only_the_limits_it_gives() {
        let policy = Policy {
            vcpu_seconds_per_day: Some(7_200),
            note: Some("course project, ends in June".into()),
            ..Policy::default()
        };
        let limits = effective(Tier::Public, Some(&policy));
        assert_eq!(limits, Limits { vcpu_seconds_per_day: Some(7_200), ..tier_defaults(Tier::Public) });

        let every = Policy {
            vcpu_seconds_per_day: Some(1),
            vcpu_seconds_per_month: Some(2),
            concurrent_runs: Some(3),
            max_fanout_tasks: Some(4),
            max_resource_class: Some(ResourceClass::GPU),
            storage_bytes: Some(5),
            egress_bytes_per_month: Some(6),
            requests_per_minute: Some(7),
            max_items_per_job: Some(9),
            endpoint_instances: Some(16),
            job_retention_days: Some(8),
            run_retention_days: Some(10),
            audit_retention_days: Some(11),
            delivery_retention_days: Some(12),
            dataset_retention_days: Some(13),
            model_version_retention_days: Some(14),
            run_record_retention_days: Some(15),
            note: None,
        };
        let expected = Limits {
            vcpu_seconds_per_day: Some(1),
            vcpu_seconds_per_month: Some(2),
            concurrent_runs: Some(3),
            max_fanout_tasks: Some(4),
            max_resource_class: Some(ResourceClass::GPU),
            storage_bytes: Some(5),
            egress_bytes_per_month: Some(6),
            requests_per_minute: Some(7),
            max_items_per_job: Some(9),
            endpoint_instances: Some(16),
        };
        assert_eq!(effective(Tier::Verified, Some(&every)), expected);
        // A policy also limits a tier that has no defaults.
        assert_eq!(effective(Tier::SelfHostedTrusted, Some(&every)), expected);
    }

    #[test]
    fn policy_json_refuses_unknown_fields() {
        let p: Policy =
            serde_json::from_str(r#"{"concurrent_runs": 5, "max_resource_class": "GPU", "note": "x"}"#)
                .expect("valid policy");
        assert_eq!(p.concurrent_runs, Some(5));
        assert_eq!(p.max_resource_class, Some(ResourceClass::GPU));
        let err = serde_json::from_str::<Policy>(r#"{"concurent_runs": 5}"#).expect_err("typo");
        assert!(err.to_string().contains("concurent_runs"), "{err}");
    }

    #[test]
    fn kill_switches_default_to_open_and_monthly() {
        let d = KillSwitches::default();
        assert!(d.untrusted_execution_enabled);
        assert_eq!((d.spend_cap_micros, d.spend_cap_period), (None, Period::Month));
        assert_eq!(serde_json::from_str::<KillSwitches>("{}").expect("empty document"), d);
        let s: KillSwitches =
            serde_json::from_str(r#"{"spend_cap_micros": 10, "spend_cap_period": "day"}"#).expect("valid");
        assert_eq!((s.untrusted_execution_enabled, s.spend_cap_period), (true, Period::Day));
    }
}
