//! The job quotas of a tenant: items per job, and items in flight at once
//! (enqueued and not finished). The second is also what keeps tenants fair:
//! the fan-out never lets one tenant have more than its window of tasks in
//! the queue, so another tenant's items wait behind at most that many.

use mapi_domain::Tier;

/// Items one job may hold, by tier (the platform's `MAPI_JOB_MAX_ITEMS` caps it too).
pub fn max_items_per_job(tier: Tier) -> u64 {
    match tier {
        Tier::Internal | Tier::SelfHostedTrusted => 100_000,
        Tier::Verified => 10_000,
        Tier::Public => 1_000,
    }
}

/// A tenant's concurrent items: its `max_fanout_tasks` limit (the tier's
/// or its policy's; none means no limit), capped by the platform's window
/// (`MAPI_JOB_TENANT_WINDOW`), at least 1.
pub fn concurrent_items(max_fanout_tasks: Option<u32>, platform_window: u32) -> u32 {
    max_fanout_tasks.map_or(platform_window, |m| m.min(platform_window)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_take_the_smaller_limit() {
        assert_eq!(concurrent_items(Some(16), 200), 16);
        assert_eq!(concurrent_items(Some(1_000), 200), 200);
        assert_eq!(concurrent_items(None, 200), 200);
        assert_eq!(concurrent_items(Some(0), 200), 1);
        assert!(max_items_per_job(Tier::Public) < max_items_per_job(Tier::Verified));
    }
}
