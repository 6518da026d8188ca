//! Items in flight at once for a tenant (enqueued and not finished). This
//! is also what keeps tenants fair: the fan-out never lets one tenant have
//! more than its window of tasks in the queue, so another tenant's items
//! wait behind at most that many. (Items per job is a quota, admitted with
//! the job by `mapi_quota::admit`.)

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
    }
}
