//! The one authorization decision. The checks run in this order: the
//! action must exist; internal callers may only deliver events; an
//! operator's session may do what the operator column allows; otherwise
//! the caller must see the tenant (a member of it, and it is not being
//! deleted, but for its admins' cancel of the deletion), hold the role the rule needs where the rule needs it (in the
//! project, or tenant-wide), and, for a token, be in the token's project,
//! not a tenant-level or session-only action, and within the token's scopes.
//! A suspended tenant refuses everything but reads.

use crate::{Action, Grant, Resource, Role, Rule, Scope, rule, scope_allows};

/// The caller's grants in the tenant, read at each request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Membership {
    /// The tenant-wide role, if any.
    pub tenant_role: Option<Role>,
    /// The role in the project acted on, if any. For a tenant-level action,
    /// the caller's highest role in any project of the tenant (it makes the
    /// tenant visible to them).
    pub project_role: Option<Role>,
    /// The reviewer capability in the project.
    pub reviewer: bool,
}

impl Membership {
    fn visible(&self) -> bool {
        self.tenant_role.is_some() || self.project_role.is_some()
    }

    fn effective(&self, rule: &Rule) -> Option<Role> {
        if rule.tenant_level() { self.tenant_role } else { self.tenant_role.max(self.project_role) }
    }
}

/// The tenant's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TenantState {
    Active,
    Suspended,
    Deleting,
}

/// Who is asking.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Who<'a> {
    /// The platform's own services (queue, scheduler, event push).
    Internal,
    /// A person signed in; `operator` when their verified e-mail is an operator's.
    Person { operator: bool, membership: Membership },
    /// An API token, acting as its owner (whose membership is read now).
    Token { membership: Membership, scopes: &'a [Scope], same_project: bool },
}

/// Why not.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Denial {
    /// The caller may not know the thing exists: answer as for a missing one.
    NotVisible,
    /// The caller sees it but may not do this; the sentence says why.
    Forbidden(String),
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; `as_operator` when the operator column allowed it.
    Allow {
        as_operator: bool,
    },
    Deny(Denial),
}

impl Decision {
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow { .. })
    }
}

fn forbidden(s: impl Into<String>) -> Decision {
    Decision::Deny(Denial::Forbidden(s.into()))
}

fn needs(rule: &Rule) -> String {
    match rule.grant {
        Grant::Min(r) => format!("the {r} role"),
        Grant::MinTenantWide(r) => format!("the {r} role tenant-wide"),
        Grant::ReviewerFrom(r) => format!("the {r} role with the reviewer capability, or admin"),
        Grant::None => "an operator".to_owned(),
        Grant::InternalOnly => "the platform's internal services: no person or token may".to_owned(),
    }
}

/// The one action a member may take on a tenant being deleted: its admins
/// (tenant-wide) may cancel the deletion; the handler holds it to the grace
/// period. Everything else, and everything for anyone else, is invisible.
fn open_while_deleting(rule: &Rule, m: Membership) -> bool {
    rule.resource == Resource::TenantDeletion
        && rule.action == Action::Cancel
        && m.tenant_role == Some(Role::Admin)
}

fn by_membership(rule: &Rule, m: Membership, tenant: TenantState) -> Decision {
    if (tenant == TenantState::Deleting && !open_while_deleting(rule, m)) || !m.visible() {
        return Decision::Deny(Denial::NotVisible);
    }
    let effective = m.effective(rule);
    // A project the caller has no grant in is as invisible as a missing one.
    if effective.is_none() && !rule.tenant_level() {
        return Decision::Deny(Denial::NotVisible);
    }
    let allowed = match (rule.grant, effective) {
        (Grant::Min(min) | Grant::MinTenantWide(min), Some(role)) => role >= min,
        (Grant::ReviewerFrom(min), Some(role)) => role == Role::Admin || (role >= min && m.reviewer),
        _ => false,
    };
    if !allowed {
        return forbidden(format!("{} {} needs {}", rule.action, rule.resource, needs(rule)));
    }
    if tenant == TenantState::Suspended && rule.action != Action::Read {
        return forbidden("the tenant is suspended: its members can read and download, nothing else");
    }
    Decision::Allow { as_operator: false }
}

/// May `who` do `action` on `resource` in a tenant in state `tenant`?
/// `endpoint` names the endpoint acted on, for `score:<alias>` scopes.
pub fn decide(
    who: Who<'_>,
    tenant: TenantState,
    resource: Resource,
    action: Action,
    endpoint: Option<&str>,
) -> Decision {
    let Some(rule) = rule(resource, action) else {
        return forbidden(format!("nobody may {action} {resource}"));
    };
    match who {
        Who::Internal if rule.grant == Grant::InternalOnly => Decision::Allow { as_operator: false },
        Who::Internal => forbidden("internal callers may only deliver events"),
        Who::Person { operator: true, .. } if rule.operator => Decision::Allow { as_operator: true },
        Who::Person { membership, .. } => by_membership(rule, membership, tenant),
        Who::Token { membership, scopes, same_project } => {
            if tenant == TenantState::Deleting || !membership.visible() {
                return Decision::Deny(Denial::NotVisible);
            }
            if !same_project {
                return forbidden("this token is bound to another project");
            }
            if rule.grant == Grant::None {
                return forbidden("a token never has operator powers");
            }
            if rule.tenant_level() {
                return forbidden("a token cannot do tenant-level actions: sign in");
            }
            if rule.sessions_only {
                return forbidden(format!(
                    "{action} {resource} is possible only through a session, never a token"
                ));
            }
            match by_membership(rule, membership, tenant) {
                Decision::Allow { .. } if !scope_allows(scopes, resource, action, endpoint) => {
                    forbidden(format!("the token's scopes do not allow {action} {resource}"))
                }
                d => d,
            }
        }
    }
}
