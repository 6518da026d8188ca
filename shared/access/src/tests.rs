//! The permission matrix and the scope table, typed a second time by hand in
//! `tests/fixtures/` (one row a line), checked against the data through
//! [`decide`], for every role, grant kind, tenant state and caller.

use crate::*;

/// The permission matrix, typed by hand (see the file's header).
const SEED_MATRIX: &str = include_str!("../../../tests/fixtures/seed_permissions.txt");

const ROLES: [Role; 4] = [Role::Viewer, Role::Editor, Role::Runner, Role::Admin];

fn rows() -> Vec<(Resource, Action, [&'static str; 4], &'static str)> {
    SEED_MATRIX
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 7, "{l}");
            let resource: Resource = f[0].parse().expect("resource");
            let action: Action = f[1].parse().expect("action");
            (resource, action, [f[2], f[3], f[4], f[5]], f[6])
        })
        .collect()
}

#[test]
fn the_data_has_exactly_the_seed_rows() {
    let seed: Vec<(Resource, Action)> = rows().iter().map(|r| (r.0, r.1)).collect();
    let data: Vec<(Resource, Action)> = PERMISSIONS.iter().map(|r| (r.resource, r.action)).collect();
    assert_eq!(seed, data);
}

/// Every row × role × grant kind × (reviewer or not) × caller kind.
#[test]
fn every_cell_of_the_matrix_decides_as_the_seed_says() {
    let mut cases = 0;
    for (resource, action, cells, operator) in rows() {
        for (i, role) in ROLES.iter().enumerate() {
            for tenant_wide in [false, true] {
                for reviewer in [false, true] {
                    let membership = if tenant_wide {
                        Membership { tenant_role: Some(*role), project_role: None, reviewer }
                    } else {
                        Membership { tenant_role: None, project_role: Some(*role), reviewer }
                    };
                    let want = match cells[i] {
                        "y" => true,
                        "tw" => tenant_wide,
                        "rev" => reviewer,
                        _ => false,
                    };
                    let who = Who::Person { operator: false, membership };
                    let got = decide(who, TenantState::Active, resource, action, None);
                    assert_eq!(
                        got.allowed(),
                        want,
                        "{resource} {action} as {role} (tw={tenant_wide}, rev={reviewer}): {got:?}"
                    );
                    cases += 1;
                }
            }
        }
        let op = decide(
            Who::Person { operator: true, membership: Membership::default() },
            TenantState::Active,
            resource,
            action,
            None,
        );
        assert_eq!(op.allowed(), operator == "y", "{resource} {action} as operator: {op:?}");
        let internal = decide(Who::Internal, TenantState::Active, resource, action, None);
        assert_eq!(internal.allowed(), operator == "int", "{resource} {action} as internal");
        cases += 2;
    }
    assert_eq!(cases, 92 * (4 * 2 * 2 + 2));
}

#[test]
fn outsiders_cannot_see_and_members_are_told_why() {
    let stranger = Who::Person { operator: false, membership: Membership::default() };
    assert_eq!(
        decide(stranger, TenantState::Active, Resource::Run, Action::Read, None),
        Decision::Deny(Denial::NotVisible)
    );
    // A member of some project of the tenant sees the tenant, but is not its admin.
    let project_member = Who::Person {
        operator: false,
        membership: Membership { tenant_role: None, project_role: Some(Role::Admin), reviewer: false },
    };
    assert!(matches!(
        decide(project_member, TenantState::Active, Resource::Audit, Action::Read, None),
        Decision::Deny(Denial::Forbidden(_))
    ));
    let viewer = Who::Person {
        operator: false,
        membership: Membership { project_role: Some(Role::Viewer), ..Default::default() },
    };
    match decide(viewer, TenantState::Active, Resource::Run, Action::Create, None) {
        Decision::Deny(Denial::Forbidden(why)) => assert!(why.contains("runner"), "{why}"),
        d => panic!("{d:?}"),
    }
}

#[test]
fn suspended_tenants_read_only_and_deleting_tenants_vanish() {
    let admin = Who::Person {
        operator: false,
        membership: Membership { tenant_role: Some(Role::Admin), ..Default::default() },
    };
    assert!(decide(admin, TenantState::Suspended, Resource::Run, Action::Read, None).allowed());
    assert!(matches!(
        decide(admin, TenantState::Suspended, Resource::Run, Action::Create, None),
        Decision::Deny(Denial::Forbidden(_))
    ));
    assert_eq!(
        decide(admin, TenantState::Deleting, Resource::Run, Action::Read, None),
        Decision::Deny(Denial::NotVisible)
    );
    let operator = Who::Person { operator: true, membership: Membership::default() };
    assert!(
        decide(operator, TenantState::Suspended, Resource::Tenant, Action::Manage, None).allowed(),
        "operators can still act"
    );
}

#[test]
fn a_deleting_tenant_lets_its_admins_cancel_the_deletion_and_nothing_else() {
    let member = |role| Who::Person {
        operator: false,
        membership: Membership { tenant_role: Some(role), ..Default::default() },
    };
    let d = |who, resource, action| decide(who, TenantState::Deleting, resource, action, None);
    assert!(d(member(Role::Admin), Resource::TenantDeletion, Action::Cancel).allowed());
    // Everything else, down to reading the deletion itself, is invisible.
    for rule in PERMISSIONS {
        if (rule.resource, rule.action) == (Resource::TenantDeletion, Action::Cancel) {
            continue;
        }
        assert_eq!(
            d(member(Role::Admin), rule.resource, rule.action),
            Decision::Deny(Denial::NotVisible),
            "{} {}",
            rule.action,
            rule.resource
        );
    }
    // Anyone but its admins tenant-wide, and any token, sees nothing.
    assert_eq!(
        d(member(Role::Editor), Resource::TenantDeletion, Action::Cancel),
        Decision::Deny(Denial::NotVisible)
    );
    let project_admin = Who::Person {
        operator: false,
        membership: Membership { project_role: Some(Role::Admin), ..Default::default() },
    };
    assert_eq!(
        d(project_admin, Resource::TenantDeletion, Action::Cancel),
        Decision::Deny(Denial::NotVisible)
    );
    let token = Who::Token {
        membership: Membership { tenant_role: Some(Role::Admin), ..Default::default() },
        scopes: &[Scope::Admin],
        same_project: true,
    };
    assert_eq!(d(token, Resource::TenantDeletion, Action::Cancel), Decision::Deny(Denial::NotVisible));
}

/// The scope table, typed by hand (see the file's header).
const SEED_SCOPES: &str = include_str!("../../../tests/fixtures/seed_scopes.txt");

#[test]
fn every_scope_decides_as_the_seed_says() {
    let table: Vec<(Resource, Action, Vec<Scope>)> = SEED_SCOPES
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let count: usize = f[2].parse().expect("count");
            let scopes: Vec<Scope> = f[3..].iter().map(|s| s.parse().expect("scope")).collect();
            assert_eq!(scopes.len(), count, "{l}");
            (f[0].parse().expect("resource"), f[1].parse().expect("action"), scopes)
        })
        .collect();
    assert_eq!(table.len(), SCOPES.len());
    let admin = Membership { tenant_role: Some(Role::Admin), project_role: None, reviewer: false };
    let mut cases = 0;
    for rule in PERMISSIONS {
        let row = table.iter().find(|(r, a, _)| *r == rule.resource && *a == rule.action);
        for scope in crate::scopes::COLUMNS.iter() {
            let scopes = [scope.clone()];
            let who = Who::Token { membership: admin, scopes: &scopes, same_project: true };
            let got = decide(who, TenantState::Active, rule.resource, rule.action, None).allowed();
            let role_ok = !rule.tenant_level()
                && !rule.sessions_only
                && matches!(rule.grant, Grant::Min(_) | Grant::ReviewerFrom(_));
            let want = role_ok && row.is_some_and(|(_, _, s)| s.contains(scope));
            assert_eq!(got, want, "{} {} with {scope}", rule.resource, rule.action);
            cases += 1;
        }
        let scopes = [Scope::Admin];
        let who = Who::Token { membership: admin, scopes: &scopes, same_project: true };
        let got = decide(who, TenantState::Active, rule.resource, rule.action, None).allowed();
        let role_ok = !rule.tenant_level()
            && !rule.sessions_only
            && matches!(rule.grant, Grant::Min(_) | Grant::ReviewerFrom(_));
        assert_eq!(got, role_ok, "{} {} with admin", rule.resource, rule.action);
        cases += 1;
    }
    assert_eq!(cases, PERMISSIONS.len() * 13);
}

#[test]
fn tokens_never_exceed_their_owner_nor_leave_their_project() {
    let scopes = [Scope::Admin];
    let viewer = Membership { project_role: Some(Role::Viewer), ..Default::default() };
    let who = Who::Token { membership: viewer, scopes: &scopes, same_project: true };
    assert!(!decide(who, TenantState::Active, Resource::Run, Action::Create, None).allowed());
    let admin = Membership { tenant_role: Some(Role::Admin), ..Default::default() };
    let elsewhere = Who::Token { membership: admin, scopes: &scopes, same_project: false };
    assert!(!decide(elsewhere, TenantState::Active, Resource::Run, Action::Read, None).allowed());
    let gone = Who::Token { membership: Membership::default(), scopes: &scopes, same_project: true };
    assert_eq!(
        decide(gone, TenantState::Active, Resource::Run, Action::Read, None),
        Decision::Deny(Denial::NotVisible)
    );
}

#[test]
fn score_alias_covers_one_endpoint() {
    let scopes: Vec<Scope> = vec!["score:geo-mmm-prod".parse().expect("scope")];
    assert!(scope_allows(&scopes, Resource::Endpoint, Action::Run, Some("geo-mmm-prod")));
    assert!(!scope_allows(&scopes, Resource::Endpoint, Action::Run, Some("other")));
    assert!(scope_allows(&scopes, Resource::Model, Action::Run, None));
    assert!(!scope_allows(&scopes, Resource::Run, Action::Create, None));
    assert!("score:".parse::<Scope>().is_err());
    assert!("runs:delete".parse::<Scope>().is_err());
    assert_eq!("score:*".parse::<Scope>().ok(), Some(Scope::ScoreAll));
}

/// The pattern a scope states in the API document accepts exactly what
/// parses as a scope.
#[test]
fn a_scopes_stated_pattern_is_what_parses() {
    let re = regex::Regex::new(&crate::Scope::pattern()).expect("compiles");
    let long = format!("score:{}", "a".repeat(63));
    let too_long = format!("score:{}", "a".repeat(64));
    let mut samples = vec![
        "admin",
        "score:*",
        "score:churn-1",
        "score:",
        "score:A",
        "score:*x",
        "runs:create",
        "runs:creat",
        "",
        "admin ",
        "models:read\n",
        &long,
        &too_long,
    ];
    let named: Vec<String> = crate::scopes::COLUMNS.iter().map(|c| c.to_string()).collect();
    samples.extend(named.iter().map(String::as_str));
    for s in samples {
        assert_eq!(re.is_match(s), s.parse::<crate::Scope>().is_ok(), "{s:?}");
    }
}
