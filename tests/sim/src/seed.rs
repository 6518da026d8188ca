//! What a seed starts with: its tenants (tenant, project, owner, token) as
//! the store holds them, a dataset, and the executor's passing evidence.

use std::time::Duration;

use mapi_access::{Role, Scope};
use mapi_domain::{ProjectId, Residency, TenantId, TenantStatus, Tier, Timestamp, UserId};
use mapi_executor::Executor;
use mapi_platform::AppState;
use mapi_schema::{Doc, MembershipDoc, ProjectDoc, TenantDoc, TokenDoc};
use mapi_store::{DocKey, Fields};
use serde_json::Value;

/// The Longley data (the README's example).
pub const LONGLEY: &str = include_str!("../../../examples/longley.csv");

/// The documents of tenant `name` on `tier`: its default project, `owner`
/// as its admin, and `token` (an admin-scoped API token of the owner).
pub fn tenant(
    state: &AppState,
    name: &str,
    tier: Tier,
    owner: &str,
    token: &str,
    now: Timestamp,
) -> Vec<(DocKey, Fields)> {
    let tenant = TenantId::parse(name).expect("a tenant id");
    let project = ProjectId::parse("default").expect("a project id");
    let user = UserId::parse(owner).expect("an e-mail");
    let t = TenantDoc {
        id: tenant.clone(),
        name: name.to_owned(),
        tier,
        status: TenantStatus::Active,
        residency: Residency::parse("eu").expect("a residency"),
        admin_email: Some(user.clone()),
        status_reason: None,
        created_at: now,
        updated_at: now,
    };
    let p = ProjectDoc {
        tenant: tenant.clone(),
        project: project.clone(),
        name: "Default".into(),
        created_at: now,
    };
    let m = MembershipDoc {
        tenant: tenant.clone(),
        project: None,
        email: user.clone(),
        role: Role::Admin,
        reviewer: false,
        claimed: true,
        created_at: now,
        created_by: user.clone(),
    };
    let k = TokenDoc {
        hash: state.pepper.hash(token),
        tenant,
        project,
        user,
        name: "sim".into(),
        scopes: vec![Scope::Admin],
        created_at: now,
        expires_at: now + Duration::from_secs(365 * 86_400),
        revoked_at: None,
        revoked_by: None,
        rate_limit_per_minute: None,
        budget: None,
    };
    let enc = |key: Result<DocKey, mapi_store::StoreError>,
               fields: Result<Fields, mapi_store::StoreError>| {
        (key.expect("a key"), fields.expect("fields"))
    };
    vec![
        enc(t.key(), mapi_store::encode(&t)),
        enc(p.key(), mapi_store::encode(&p)),
        enc(m.key(), mapi_store::encode(&m)),
        enc(k.key(), mapi_store::encode(&k)),
    ]
}

/// Passing conformance and security reports for `executor`, as the nightly
/// suites record them in a deployment: they open the shared tiers on it.
pub fn evidence(executor: &dyn Executor, now: Timestamp) -> Value {
    use mapi_executor::evidence::{
        CaseResult, ConformanceReport, Evidence, EvidenceTarget, ProbeResult, REQUIRED_PROBES, SecurityReport,
    };
    let caps = executor.capabilities();
    let evidence = Evidence {
        target: EvidenceTarget {
            executor: caps.executor.clone(),
            remote_control_api: caps.remote_control_api,
            enforces_memory_limit: caps.enforces_memory_limit,
            caps: caps.clone(),
        },
        conformance: ConformanceReport {
            executor: caps.executor.clone(),
            finished_at: now,
            cases: mapi_executor::conformance_cases::CASES
                .iter()
                .map(|n| CaseResult { name: (*n).to_owned(), passed: true, detail: None })
                .collect(),
        },
        security: SecurityReport {
            finished_at: now,
            probes: REQUIRED_PROBES
                .iter()
                .map(|n| ProbeResult { name: (*n).to_owned(), ran: true, blocked: true, detail: None })
                .collect(),
        },
    };
    serde_json::to_value(evidence).expect("json")
}
