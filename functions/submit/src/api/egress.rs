//! Data leaving the platform through a link it gives (a dataset's file, a
//! run's output or image, a model version's artifacts): the bytes the link
//! can send count against the tenant's egress of the month, admitted in the
//! commit of the link's audit entry. Refused, no link is given: `429
//! QUOTA_EXCEEDED` naming `egress_bytes_per_month`.

use mapi_admission::quota;
use mapi_domain::TenantId;
use mapi_identity::{Caller, Granted};
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_quota::Ask;
use mapi_schema::AuditDoc;

/// Admits `bytes` of `tenant`'s egress for `caller` and commits `record` (the link's audit
/// entry) with the month's increments. `what` names the link for a refusal's audit.
///
/// # Errors
///
/// The refusal (audited), or the store's; nothing was committed.
pub async fn admit_link(
    state: &AppState,
    caller: &Caller,
    granted: &Granted,
    tenant: &TenantId,
    bytes: u64,
    record: &AuditDoc,
    what: String,
) -> Result<(), ApiError> {
    let request = quota::Request {
        caller,
        tenant,
        tier: granted.tenant.tier,
        ask: Ask::Egress { bytes },
        seed: record.id.as_str(),
        what,
    };
    quota::admit_and_commit(state, &request, |plan| async move {
        super::admitted::create_with(state, &plan, record).await
    })
    .await
}
