//! How near a tenant is to each of its limits on things it accumulates:
//! compute this UTC day and month, concurrent runs, stored bytes, egress
//! this UTC month. The usage
//! report shows it; webhooks warn from it. A quota warns at 70 % and again
//! at 90 % of its limit (a limit of 0 is at 100 % at once).

use mapi_domain::{TenantId, Timestamp};
use mapi_store::{Store, StoreError};
use serde::{Deserialize, Serialize};

use crate::{Limits, Period, counters};

/// The thresholds a quota warns at, in percent, lowest first.
pub const WARNINGS: [u8; 2] = [70, 90];

/// How near one quota is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Nearness {
    pub limit: String,
    pub value: u64,
    pub used: u64,
    pub fraction: f64,
    /// 70 or 90 when at or past that percentage.
    pub warning: Option<u8>,
}

impl Nearness {
    /// `used` of the limit `limit` set to `value`, if one is set. The
    /// warning is reckoned in integers: exactly 70 % warns.
    pub fn of(limit: &str, value: Option<u64>, used: u64) -> Option<Nearness> {
        let value = value?;
        let fraction = if value == 0 { 1.0 } else { used as f64 / value as f64 };
        let reached = |percent: u8| u128::from(used) * 100 >= u128::from(value) * u128::from(percent);
        let warning = WARNINGS.into_iter().rev().find(|&p| reached(p));
        Some(Nearness { limit: limit.to_owned(), value, used, fraction, warning })
    }

    /// The period a warning of this quota counts in: the UTC day for the
    /// daily compute, else the month, so a quota warns at each threshold at
    /// most once in it.
    pub fn warning_period(&self) -> Period {
        if self.limit == "vcpu_seconds_per_day" { Period::Day } else { Period::Month }
    }
}

/// How near `tenant` is to each of `limits` that is set, at `now`: its
/// total, day and month counters' shards in one batch read.
pub async fn of_tenant(
    store: &dyn Store,
    tenant: &TenantId,
    limits: &Limits,
    now: Timestamp,
) -> Result<Vec<Nearness>, StoreError> {
    let names = [
        counters::tenant(tenant),
        counters::tenant_period(tenant, Period::Day, now),
        counters::tenant_period(tenant, Period::Month, now),
    ];
    let sums: Vec<_> = counters::read_all(store, &names).await?.iter().map(|c| c.total()).collect();
    let at = |i: usize| sums.get(i).cloned().unwrap_or_default();
    let (total, day, month) = (at(0), at(1), at(2));
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok([
        Nearness::of("vcpu_seconds_per_day", limits.vcpu_seconds_per_day, day.vcpu_ms() / 1000),
        Nearness::of("vcpu_seconds_per_month", limits.vcpu_seconds_per_month, month.vcpu_ms() / 1000),
        Nearness::of("concurrent_runs", limits.concurrent_runs.map(u64::from), count(total.active_runs)),
        Nearness::of("storage_bytes", limits.storage_bytes, count(total.storage_bytes)),
        Nearness::of("egress_bytes_per_month", limits.egress_bytes_per_month, count(month.egress_bytes)),
    ]
    .into_iter()
    .flatten()
    .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_warns_from_seventy_and_ninety_percent() {
        let warning = |used| Nearness::of("storage_bytes", Some(100), used).and_then(|n| n.warning);
        assert_eq!([69, 70, 89, 90, 150].map(warning), [None, Some(70), Some(70), Some(90), Some(90)]);
        assert_eq!(Nearness::of("storage_bytes", Some(0), 0).and_then(|n| n.warning), Some(90));
        assert_eq!(Nearness::of("storage_bytes", None, 10), None, "no limit, no nearness");
        let huge = Nearness::of("storage_bytes", Some(u64::MAX), u64::MAX).and_then(|n| n.warning);
        assert_eq!(huge, Some(90), "reckoned without overflow");
    }

    #[test]
    fn daily_compute_warns_per_day_and_the_rest_per_month() {
        let now = Timestamp::from_secs(1_796_019_340); // 2026-11-30
        let day = Nearness::of("vcpu_seconds_per_day", Some(1), 1).expect("set");
        let month = Nearness::of("vcpu_seconds_per_month", Some(1), 1).expect("set");
        let key = |n: &Nearness| n.warning_period().key(now);
        assert_eq!((key(&day), key(&month)), ("2026-11-30".into(), "2026-11".into()));
    }
}
