//! The permission matrix, as data: every (resource, action) the platform
//! knows, with the grant it needs and whether operators may do it. A pair
//! that is not listed is refused to everyone.
//!
//! Each role includes the one before it (viewer < editor < runner < admin),
//! so a rule names only its lowest role: every role above it is allowed
//! too. The operator column stands apart from the roles: operators create,
//! suspend and delete tenants and set quotas, kill switches and executors,
//! and never read tenant content (datasets, specs, models, plots).
//! Approving needs the reviewer capability, which admins hold implicitly.
//! A hand-typed copy of the matrix in `tests/fixtures/` checks every row.

use mapi_domain::wire_enum;

wire_enum!(
    /// A role in a project, or tenant-wide. Ordered: each includes the one before.
    Role {
        Viewer => "viewer",
        Editor => "editor",
        Runner => "runner",
        Admin => "admin",
    }
);

wire_enum!(
    /// What an action is on.
    Resource {
        Tenant => "tenant",
        TenantMember => "tenant_member",
        Project => "project",
        Member => "member",
        Token => "token",
        Catalog => "catalog",
        Dataset => "dataset",
        Spec => "spec",
        Run => "run",
        Model => "model",
        Endpoint => "endpoint",
        Plot => "plot",
        Embed => "embed",
        Webhook => "webhook",
        Plugin => "plugin",
        Usage => "usage",
        Billing => "billing",
        Audit => "audit",
        Quota => "quota",
        KillSwitch => "kill_switch",
        Executor => "executor",
        Event => "event",
        TenantDeletion => "tenant_deletion",
        TenantExport => "tenant_export",
        Workflow => "workflow",
        Policy => "policy",
        TenantPolicy => "tenant_policy",
    }
);

wire_enum!(
    /// What is done.
    Action {
        Read => "read",
        Create => "create",
        Update => "update",
        Delete => "delete",
        Manage => "manage",
        Cancel => "cancel",
        Run => "run",
        Validate => "validate",
        Approve => "approve",
        Promote => "promote",
    }
);

/// Which memberships allow a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// No role: operators only (or nobody).
    None,
    /// This role or a higher one, in the project or tenant-wide.
    Min(Role),
    /// This role or a higher one, tenant-wide only.
    MinTenantWide(Role),
    /// This role or higher with the reviewer capability; admins have it implicitly.
    ReviewerFrom(Role),
    /// Only the platform's internal services.
    InternalOnly,
}

/// One (resource, action) of the matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    pub resource: Resource,
    pub action: Action,
    pub grant: Grant,
    /// Operators may, through a session.
    pub operator: bool,
    /// Only through a session, never a token.
    pub sessions_only: bool,
    pub note: &'static str,
}

const fn r(resource: Resource, action: Action, grant: Grant, operator: bool) -> Rule {
    Rule { resource, action, grant, operator, sessions_only: false, note: "" }
}

const fn noted(rule: Rule, note: &'static str, sessions_only: bool) -> Rule {
    Rule { note, sessions_only, ..rule }
}

use Action as A;
use Grant::{InternalOnly, Min, MinTenantWide, ReviewerFrom};
use Resource as R;
use Role::{Admin, Editor, Runner, Viewer};

/// The matrix. A (resource, action) not listed is refused to everyone.
pub const PERMISSIONS: &[Rule] = &[
    r(R::Tenant, A::Read, MinTenantWide(Viewer), true),
    r(R::Tenant, A::Update, MinTenantWide(Admin), false),
    r(R::Tenant, A::Create, Grant::None, true),
    r(R::Tenant, A::Delete, Grant::None, true),
    noted(
        r(R::Tenant, A::Manage, Grant::None, true),
        "tier, status, residency, identity verification",
        false,
    ),
    r(R::TenantMember, A::Read, MinTenantWide(Viewer), true),
    r(R::TenantMember, A::Create, MinTenantWide(Admin), false),
    r(R::TenantMember, A::Update, MinTenantWide(Admin), false),
    r(R::TenantMember, A::Delete, MinTenantWide(Admin), false),
    r(R::Project, A::Read, Min(Viewer), true),
    r(R::Project, A::Create, MinTenantWide(Admin), false),
    r(R::Project, A::Update, Min(Admin), false),
    r(R::Project, A::Delete, MinTenantWide(Admin), false),
    r(R::Member, A::Read, Min(Viewer), true),
    r(R::Member, A::Create, Min(Admin), false),
    r(R::Member, A::Update, Min(Admin), false),
    r(R::Member, A::Delete, Min(Admin), false),
    r(R::Token, A::Read, Min(Viewer), true),
    r(R::Token, A::Create, Min(Viewer), false),
    noted(r(R::Token, A::Delete, Min(Viewer), false), "own tokens; manage covers everyone's", false),
    noted(r(R::Token, A::Manage, Min(Admin), false), "list and revoke other members' tokens", false),
    r(R::Catalog, A::Read, Min(Viewer), true),
    r(R::Dataset, A::Read, Min(Viewer), false),
    r(R::Dataset, A::Create, Min(Editor), false),
    r(R::Dataset, A::Update, Min(Editor), false),
    r(R::Dataset, A::Delete, Min(Admin), false),
    r(R::Spec, A::Read, Min(Viewer), false),
    r(R::Spec, A::Create, Min(Editor), false),
    r(R::Spec, A::Update, Min(Editor), false),
    r(R::Spec, A::Delete, Min(Admin), false),
    r(R::Run, A::Read, Min(Viewer), true),
    r(R::Run, A::Create, Min(Runner), false),
    r(R::Run, A::Cancel, Min(Runner), false),
    r(R::Run, A::Update, Min(Runner), false),
    r(R::Model, A::Read, Min(Viewer), false),
    noted(r(R::Model, A::Run, Min(Runner), false), "score", false),
    r(R::Model, A::Delete, Min(Admin), false),
    noted(
        r(R::Model, A::Validate, Min(Runner), false),
        "submit, resubmit or cancel a governance validation",
        false,
    ),
    noted(
        r(R::Model, A::Approve, ReviewerFrom(Editor), false),
        "needs the reviewer capability; never the submitter, never a token",
        true,
    ),
    noted(r(R::Model, A::Update, Min(Admin), false), "deprecate a validated version", false),
    r(R::Endpoint, A::Read, Min(Viewer), false),
    noted(r(R::Endpoint, A::Run, Min(Runner), false), "score", false),
    r(R::Endpoint, A::Create, Min(Admin), false),
    r(R::Endpoint, A::Update, Min(Admin), false),
    r(R::Endpoint, A::Promote, Min(Admin), false),
    r(R::Endpoint, A::Delete, Min(Admin), false),
    noted(r(R::Endpoint, A::Manage, Min(Admin), false), "override a promotion gate; sessions only", true),
    r(R::Plot, A::Read, Min(Viewer), false),
    r(R::Plot, A::Create, Min(Editor), false),
    noted(r(R::Plot, A::Run, Min(Runner), false), "render", false),
    noted(r(R::Plot, A::Delete, Min(Editor), false), "saved plots", false),
    r(R::Embed, A::Read, Min(Viewer), false),
    r(R::Embed, A::Create, Min(Editor), false),
    r(R::Embed, A::Delete, Min(Editor), false),
    r(R::Webhook, A::Read, Min(Admin), false),
    r(R::Webhook, A::Create, Min(Admin), false),
    noted(
        r(R::Webhook, A::Update, Min(Admin), false),
        "includes rotating the secret and replaying deliveries",
        false,
    ),
    r(R::Webhook, A::Delete, Min(Admin), false),
    r(R::Plugin, A::Read, Min(Viewer), false),
    r(R::Plugin, A::Create, Min(Admin), false),
    r(R::Plugin, A::Delete, Min(Admin), false),
    r(R::Usage, A::Read, Min(Viewer), true),
    r(R::Billing, A::Read, MinTenantWide(Admin), true),
    r(R::Audit, A::Read, MinTenantWide(Admin), true),
    r(R::Quota, A::Read, Grant::None, true),
    r(R::Quota, A::Update, Grant::None, true),
    r(R::Quota, A::Delete, Grant::None, true),
    r(R::KillSwitch, A::Read, Grant::None, true),
    r(R::KillSwitch, A::Update, Grant::None, true),
    r(R::Executor, A::Read, Grant::None, true),
    r(R::Executor, A::Update, Grant::None, true),
    r(R::Event, A::Create, InternalOnly, false),
    r(R::TenantDeletion, A::Read, MinTenantWide(Admin), true),
    r(R::TenantDeletion, A::Create, MinTenantWide(Admin), false),
    noted(r(R::TenantDeletion, A::Cancel, MinTenantWide(Admin), false), "within the grace period", false),
    noted(r(R::TenantDeletion, A::Manage, Grant::None, true), "purge, retry", false),
    r(R::TenantExport, A::Read, MinTenantWide(Admin), false),
    r(R::TenantExport, A::Create, MinTenantWide(Admin), false),
    r(R::Workflow, A::Read, Min(Viewer), false),
    r(R::Workflow, A::Create, Min(Editor), false),
    r(R::Workflow, A::Update, Min(Editor), false),
    r(R::Workflow, A::Delete, Min(Admin), false),
    r(R::Workflow, A::Run, Min(Runner), false),
    r(R::Workflow, A::Cancel, Min(Runner), false),
    r(R::Policy, A::Read, Min(Viewer), false),
    r(R::Policy, A::Create, Min(Admin), false),
    r(R::Policy, A::Update, Min(Admin), false),
    r(R::Policy, A::Delete, Min(Admin), false),
    r(R::TenantPolicy, A::Read, MinTenantWide(Viewer), false),
    r(R::TenantPolicy, A::Create, MinTenantWide(Admin), false),
    r(R::TenantPolicy, A::Update, MinTenantWide(Admin), false),
    r(R::TenantPolicy, A::Delete, MinTenantWide(Admin), false),
];

/// The rule of (resource, action), if the platform has one.
pub fn rule(resource: Resource, action: Action) -> Option<&'static Rule> {
    PERMISSIONS.iter().find(|r| r.resource == resource && r.action == action)
}

impl Rule {
    /// A tenant-level action: only a tenant-wide grant counts, and tokens never may.
    pub fn tenant_level(&self) -> bool {
        matches!(self.grant, Grant::MinTenantWide(_))
    }
}
