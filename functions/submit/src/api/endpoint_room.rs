//! The room a tenant's endpoints hold: the instances they may scale to
//! together, and the one admission of an endpoint's compute (its creation,
//! a new revision, a change of bounds).

use mapi_admission::quota;
use mapi_domain::TenantId;
use mapi_domain::endpoint::Accelerator;
use mapi_endpoints::EndpointDoc;
use mapi_identity::Caller;
use mapi_problem::ApiError;
use mapi_quota::Ask;
use mapi_schema::Doc;
use mapi_store::{Op, Query};

/// Every endpoint of `tenant`, in all its projects.
pub(super) fn tenant_endpoints(tenant: &TenantId) -> Query {
    Query::new(EndpointDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str())
}

/// The instances the endpoints of `docs` other than `except` may scale to, together.
pub(super) fn held_instances(docs: &[mapi_store::Document], except: &str) -> Result<u32, ApiError> {
    docs.iter().try_fold(0u32, |sum, d| {
        let e = d.decode::<EndpointDoc>()?;
        Ok(if e.id == except { sum } else { sum.saturating_add(e.scaling.max) })
    })
}

/// The admission of `doc`'s compute (its creation, or a new revision of
/// it): its instances' class under `max_resource_class`, its
/// `max_instances` with the `held` of the tenant's other endpoints under
/// `endpoint_instances`, a spent vCPU limit and the spend cap.
pub(super) fn admission_of<'a>(
    caller: &'a Caller,
    tier: mapi_domain::Tier,
    doc: &'a EndpointDoc,
    held: u32,
) -> quota::Request<'a> {
    let class = match doc.accelerator {
        Accelerator::L4 => mapi_domain::ResourceClass::GPU,
        Accelerator::Cpu => mapi_domain::ResourceClass::S,
    };
    quota::Request {
        caller,
        tenant: &doc.tenant,
        tier,
        ask: Ask::Endpoint { class, instances: doc.scaling.max, held },
        seed: &doc.id,
        what: format!("projects/{}/{}/endpoints/{}", doc.tenant, doc.project, doc.alias),
    }
}
