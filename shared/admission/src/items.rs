//! The fan-out's share of a tenant's window of items in flight: before each
//! batch, the platform's spend cap may hold the job's compute (admitted
//! jobs wait, as admitted runs do), and otherwise the window gives what it
//! has free ([`mapi_quota::items_window`]). The counter is read outside the
//! step's transaction: the step's commit writes guarded increments, so a
//! race for the last room fails the commit and the step asks again, and
//! items finishing meanwhile never conflict with it.

use mapi_domain::TenantId;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_quota::{ItemsTake, counters};

/// What a fan-out step may enqueue now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Window {
    /// This many items (0: the window is full), taken by these increments.
    Take(ItemsTake),
    /// No new compute starts: look again after `wait_s` seconds.
    Held { wait_s: u64, why: String },
}

/// Asks for up to `want` items of `tenant`'s window of `window` items in
/// flight for the job `seed` names.
pub async fn window(
    state: &AppState,
    tenant: &TenantId,
    window: u32,
    want: u64,
    seed: &str,
) -> Result<Window, ApiError> {
    if let Some((wait_s, why)) = crate::compute_stopped(state, tenant).await? {
        return Ok(Window::Held { wait_s, why });
    }
    let name = counters::tenant(tenant);
    let counter = counters::read_all(&*state.store, std::slice::from_ref(&name))
        .await?
        .pop()
        .ok_or_else(|| ApiError::internal("reading one counter gave none"))?;
    mapi_quota::items_window(&counter, window, want, seed)
        .map(Window::Take)
        .map_err(|e| ApiError::internal(e.0))
}
