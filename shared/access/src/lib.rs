//! Who may do what.
//!
//! The permission matrix ([`PERMISSIONS`]) and the token scope table
//! ([`SCOPES`]) are data, in one place; [`decide`] is the one function every
//! handler authorizes through, and [`permissions_markdown`] renders
//! `docs/permissions.md` from the same data.
//!
//! Architecture invariant: no handler compares roles itself; it names a
//! (resource, action) and asks [`decide`].

mod decide;
mod matrix;
mod scopes;

pub use decide::{Decision, Denial, Membership, TenantState, Who, decide};
pub use matrix::{Action, Grant, PERMISSIONS, Resource, Role, Rule, rule};
pub use scopes::{COLUMNS as SCOPE_COLUMNS, SCOPES, Scope, ScopeError, scope_allows};

/// `docs/permissions.md`: both tables, generated from the data.
pub fn permissions_markdown() -> String {
    let mut out = String::from(
        "# Permissions\n\nGenerated from `shared/access` (`PERMISSIONS`, `SCOPES`) by the test \
         `permissions_document_is_current`; do not edit by hand.\n\n## Roles\n\nRoles are ordered \
         viewer < editor < runner < admin; each includes the one before. *tenant-wide*: only a \
         tenant-wide grant counts. A token acts as its owner but never does tenant-wide or operator \
         actions, and its scopes must allow the action too.\n\n",
    );
    out.push_str("| Resource | Action | viewer | editor | runner | admin | Operator | Notes |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in PERMISSIONS {
        let cell = |role: Role| match r.grant {
            Grant::Min(min) if role >= min => "✓".to_owned(),
            Grant::MinTenantWide(min) if role >= min => "✓ tenant-wide".to_owned(),
            Grant::ReviewerFrom(min) if role == Role::Admin && role >= min => "✓".to_owned(),
            Grant::ReviewerFrom(min) if role >= min => "✓ with reviewer".to_owned(),
            Grant::InternalOnly => "—".to_owned(),
            _ => String::new(),
        };
        let operator = match (r.grant, r.operator) {
            (Grant::InternalOnly, _) => "internal services only",
            (_, true) => "✓",
            _ => "",
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.resource,
            r.action,
            cell(Role::Viewer),
            cell(Role::Editor),
            cell(Role::Runner),
            cell(Role::Admin),
            operator,
            r.note
        ));
    }
    out.push_str(
        "\n## Token scopes\n\nThe role of the token's owner and a scope must both allow an action. \
         `admin` covers everything the owner's role allows. `score:<alias>` allows what `score:*` \
         allows, for the one endpoint named.\n\n",
    );
    let names: Vec<&str> = scopes::COLUMNS.iter().map(|s| s.as_str()).collect();
    out.push_str(&format!("| Resource | Action | {} |\n", names.join(" | ")));
    out.push_str(&format!("|---|---|{}\n", "---|".repeat(names.len())));
    for (resource, action, allowed) in SCOPES {
        let cells: Vec<&str> =
            scopes::COLUMNS.iter().map(|c| if allowed.contains(c) { "✓" } else { "" }).collect();
        out.push_str(&format!("| {resource} | {action} | {} |\n", cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests;
