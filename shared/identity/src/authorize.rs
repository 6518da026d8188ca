//! `authorize`: reads the tenant, the project and the caller's memberships
//! (at every request, so a removed membership stops sessions and tokens at
//! once), asks `mapi_access::decide`, and answers as the decision says: a
//! thing the caller may not see is NOT_FOUND with the same words as a
//! missing one; a refusal is FORBIDDEN with the reason, and is audited.

use mapi_access::{Action, Decision, Denial, Membership, Resource, TenantState, Who, decide};
use mapi_domain::{ProjectId, TenantId, TenantStatus, UserId};
use mapi_problem::{ApiError, ProblemCode};
use mapi_schema::{Doc, MembershipDoc, Outcome, ProjectDoc, TenantDoc};
use mapi_store::{DocKey, Op, Query, StoreError};

use crate::{Audit, Caller, IdentityState, Principal, audit};

/// What an action is aimed at.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub tenant: &'a TenantId,
    /// The project, for project resources; `None` for tenant-level ones.
    pub project: Option<&'a ProjectId>,
    /// The endpoint, for `score:<alias>` scopes.
    pub endpoint: Option<&'a str>,
    /// How the thing is named in a NOT_FOUND answer (`run run_…`).
    pub what: &'a str,
}

impl<'a> Target<'a> {
    pub fn tenant(tenant: &'a TenantId, what: &'a str) -> Target<'a> {
        Target { tenant, project: None, endpoint: None, what }
    }

    pub fn project(tenant: &'a TenantId, project: &'a ProjectId, what: &'a str) -> Target<'a> {
        Target { tenant, project: Some(project), endpoint: None, what }
    }
}

/// An allowed action, with the tenant as read for the decision.
#[derive(Clone, Debug)]
pub struct Granted {
    pub tenant: TenantDoc,
    /// The operator column allowed it.
    pub as_operator: bool,
}

fn state_of(status: TenantStatus) -> TenantState {
    match status {
        TenantStatus::Active => TenantState::Active,
        TenantStatus::Suspended => TenantState::Suspended,
        TenantStatus::Deleting => TenantState::Deleting,
    }
}

fn store_err(e: StoreError) -> ApiError {
    ApiError::from(e)
}

/// The grants of `user` in `tenant`, for `project` (or, for tenant-level
/// actions, the highest role in any project, which makes the tenant visible).
pub async fn membership_of<S: IdentityState + ?Sized>(
    state: &S,
    tenant: &TenantId,
    project: Option<&ProjectId>,
    user: &UserId,
) -> Result<Membership, StoreError> {
    let mut keys = vec![DocKey::new(MembershipDoc::COLLECTION, MembershipDoc::id_of(tenant, None, user))?];
    if let Some(p) = project {
        keys.push(DocKey::new(MembershipDoc::COLLECTION, MembershipDoc::id_of(tenant, Some(p), user))?);
    }
    let docs = state.store().get(&keys, None).await?;
    let decode = |d: &Option<mapi_store::Document>| -> Result<Option<MembershipDoc>, StoreError> {
        d.as_ref().map(|d| d.decode()).transpose()
    };
    let tenant_wide = decode(&docs[0])?;
    let in_project = match docs.get(1) {
        Some(d) => decode(d)?,
        None => {
            // Tenant-level: any project grant makes the tenant visible.
            let q = Query::new(MembershipDoc::COLLECTION).filter("tenant", Op::Eq, tenant.as_str()).filter(
                "email",
                Op::Eq,
                user.as_str(),
            );
            let all: Vec<MembershipDoc> =
                state.store().query(&q, None).await?.iter().map(|d| d.decode()).collect::<Result<_, _>>()?;
            all.into_iter().filter(|m| m.project.is_some()).max_by_key(|m| m.role)
        }
    };
    let reviewer =
        tenant_wide.as_ref().is_some_and(|m| m.reviewer) || in_project.as_ref().is_some_and(|m| m.reviewer);
    Ok(Membership {
        tenant_role: tenant_wide.map(|m| m.role),
        project_role: in_project.map(|m| m.role),
        reviewer,
    })
}

/// The decision for `caller`, without answering or auditing it: for
/// access checks (`can I?`) and for filtering lists. `Err` only when the
/// store fails; a missing tenant or project is `NotVisible`.
pub async fn check<S: IdentityState + ?Sized>(
    state: &S,
    caller: &Caller,
    target: Target<'_>,
    resource: Resource,
    action: Action,
) -> Result<(Decision, Option<TenantDoc>), ApiError> {
    let mut keys = vec![DocKey::new(TenantDoc::COLLECTION, target.tenant.as_str()).map_err(store_err)?];
    if let Some(p) = target.project {
        keys.push(
            DocKey::new(ProjectDoc::COLLECTION, ProjectDoc::id_of(target.tenant, p)).map_err(store_err)?,
        );
    }
    let docs = state.store().get(&keys, None).await.map_err(store_err)?;
    let Some(tenant) = docs[0].as_ref().map(|d| d.decode::<TenantDoc>()).transpose().map_err(store_err)?
    else {
        return Ok((Decision::Deny(Denial::NotVisible), None));
    };
    if target.project.is_some() && docs.get(1).is_none_or(Option::is_none) {
        // A missing project is invisible, except to those who may see the
        // whole tenant's projects (they learn it is missing, nothing more).
        return Ok((Decision::Deny(Denial::NotVisible), Some(tenant)));
    }
    if caller.is_anonymous() {
        // Nobody is a member of anything; the routes that serve anyone decide for themselves.
        return Ok((Decision::Deny(Denial::NotVisible), Some(tenant)));
    }
    let membership =
        membership_of(state, target.tenant, target.project, caller.user()).await.map_err(store_err)?;
    let scopes;
    let who = match &caller.principal {
        Principal::Session { operator, .. } => Who::Person { operator: *operator, membership },
        Principal::Token(t) => {
            scopes = t.scopes.clone();
            let same_project = &t.tenant == target.tenant && target.project.is_none_or(|p| p == &t.project);
            Who::Token { membership, scopes: &scopes, same_project }
        }
        Principal::Anonymous => return Ok((Decision::Deny(Denial::NotVisible), Some(tenant))),
    };
    Ok((decide(who, state_of(tenant.status), resource, action, target.endpoint), Some(tenant)))
}

/// Decides whether `caller` may do `action` on `resource` at `target`, and
/// answers a refusal: NOT_FOUND (with the same words as for a missing thing)
/// when the caller may not see it, FORBIDDEN with the reason otherwise.
/// Refusals are audited.
pub async fn authorize<S: IdentityState + ?Sized>(
    state: &S,
    caller: &Caller,
    target: Target<'_>,
    resource: Resource,
    action: Action,
) -> Result<Granted, ApiError> {
    let (decision, tenant) = check(state, caller, target, resource, action).await?;
    let denied = |code: ProblemCode, detail: &str| {
        let mut entry = Audit::by(caller, &format!("{resource}.{action}"), target.what.to_owned())
            .tenant(target.tenant)
            .operator(caller.is_operator())
            .outcome(Outcome::Denied, code)
            .detail(detail.to_owned());
        if let Some(p) = target.project {
            entry = entry.project(p);
        }
        entry
    };
    match (decision, tenant) {
        (Decision::Allow { as_operator }, Some(tenant)) => Ok(Granted { tenant, as_operator }),
        (Decision::Deny(Denial::Forbidden(why)), _) => {
            audit(state, denied(ProblemCode::Forbidden, &why)).await;
            Err(ApiError::forbidden(why))
        }
        _ => {
            audit(state, denied(ProblemCode::NotFound, "not visible to the caller")).await;
            Err(ApiError::not_found(format!("{} not found", target.what)))
        }
    }
}

/// For operator actions that name no tenant (creating and listing tenants,
/// the platform's audit log, executors): allowed to operators' sessions only.
pub async fn authorize_operator<S: IdentityState + ?Sized>(
    state: &S,
    caller: &Caller,
    resource: Resource,
    action: Action,
    what: &str,
) -> Result<(), ApiError> {
    let who = match &caller.principal {
        Principal::Session { operator, .. } => {
            Who::Person { operator: *operator, membership: Membership::default() }
        }
        Principal::Token(_) | Principal::Anonymous => {
            Who::Token { membership: Membership::default(), scopes: &[], same_project: false }
        }
    };
    match decide(who, TenantState::Active, resource, action, None) {
        Decision::Allow { .. } => Ok(()),
        _ => {
            let why = "only platform operators, signed in, may do this";
            let entry = Audit::by(caller, &format!("{resource}.{action}"), what.to_owned())
                .outcome(Outcome::Denied, ProblemCode::Forbidden)
                .detail(why);
            audit(state, entry).await;
            Err(ApiError::forbidden(why))
        }
    }
}
