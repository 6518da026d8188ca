//! Token scopes and what each allows (`scope_allows`).
//!
//! A scope only narrows a token: an action needs both the owner's role and
//! one of the token's scopes, and `admin` covers whatever the role allows.
//! Each scope allows what its name promises (`models:read` reads,
//! `runs:create` starts and follows runs, `score:*` scores the project's
//! endpoints, the `…:write`, `…:manage`, `…:publish` and `…:promote` scopes
//! change their own resource). The hand-typed copy in `tests/fixtures/`
//! checks every row and how many scopes allow it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{Action, Resource};

/// A scope a token carries.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Everything the owner's role allows.
    Admin,
    ModelsRead,
    RunsCreate,
    /// Every endpoint of the project.
    ScoreAll,
    /// One endpoint: `score:<alias>`.
    ScoreAlias(String),
    PluginsPublish,
    DatasetsWrite,
    EndpointsPromote,
    WebhooksManage,
    WorkflowsWrite,
    WorkflowsRun,
    ModelsValidate,
    PoliciesManage,
    RunsWrite,
}

/// The columns of the scope table, in the order `docs/permissions.md` shows them.
pub const COLUMNS: [Scope; 12] = [
    Scope::ModelsRead,
    Scope::RunsCreate,
    Scope::ScoreAll,
    Scope::PluginsPublish,
    Scope::DatasetsWrite,
    Scope::EndpointsPromote,
    Scope::WebhooksManage,
    Scope::WorkflowsWrite,
    Scope::WorkflowsRun,
    Scope::ModelsValidate,
    Scope::PoliciesManage,
    Scope::RunsWrite,
];

impl Scope {
    pub fn as_str(&self) -> &str {
        match self {
            Scope::Admin => "admin",
            Scope::ModelsRead => "models:read",
            Scope::RunsCreate => "runs:create",
            Scope::ScoreAll => "score:*",
            Scope::ScoreAlias(a) => a.as_str(),
            Scope::PluginsPublish => "plugins:publish",
            Scope::DatasetsWrite => "datasets:write",
            Scope::EndpointsPromote => "endpoints:promote",
            Scope::WebhooksManage => "webhooks:manage",
            Scope::WorkflowsWrite => "workflows:write",
            Scope::WorkflowsRun => "workflows:run",
            Scope::ModelsValidate => "models:validate",
            Scope::PoliciesManage => "policies:manage",
            Scope::RunsWrite => "runs:write",
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::ScoreAlias(a) => write!(f, "score:{a}"),
            other => f.write_str(other.as_str()),
        }
    }
}

/// An unknown scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScopeError(pub String);

impl fmt::Display for ScopeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let known: Vec<String> = COLUMNS.iter().map(ToString::to_string).collect();
        write!(f, "unknown scope `{}`: use admin, score:<alias> or one of {}", self.0, known.join(", "))
    }
}

impl std::error::Error for ScopeError {}

impl FromStr for Scope {
    type Err = ScopeError;
    fn from_str(s: &str) -> Result<Scope, ScopeError> {
        if s == "admin" {
            return Ok(Scope::Admin);
        }
        if let Some(c) = COLUMNS.iter().find(|c| c.as_str() == s) {
            return Ok(c.clone());
        }
        match s.strip_prefix("score:") {
            Some(alias)
                if !alias.is_empty()
                    && alias.len() <= 63
                    && alias.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-') =>
            {
                Ok(Scope::ScoreAlias(alias.to_owned()))
            }
            _ => Err(ScopeError(s.chars().take(64).collect())),
        }
    }
}

impl Serialize for Scope {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Scope {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        mapi_domain::schema::string_matching(Scope::pattern())
            .description(Some("A token scope: admin, models:read, runs:create, score:*, score:<alias>, …"))
            .into()
    }
}

impl Scope {
    /// What `from_str` accepts, as the API document states it.
    pub fn pattern() -> String {
        let named: Vec<String> = COLUMNS.iter().map(|c| c.as_str().replace('*', "\\*")).collect();
        format!("^(admin|{}|score:[a-z0-9-]{{1,63}})$", named.join("|"))
    }
}

impl utoipa::ToSchema for Scope {}

use Action as A;
use Resource as R;
use Scope::*;

/// Which scopes allow each (resource, action). A pair not listed is allowed
/// only by `admin`.
pub const SCOPES: &[(Resource, Action, &[Scope])] = &[
    (R::Project, A::Read, &[ModelsRead, RunsCreate, ScoreAll]),
    (R::Catalog, A::Read, &[ModelsRead, RunsCreate, ScoreAll, PluginsPublish]),
    (R::Dataset, A::Read, &[ModelsRead, RunsCreate, DatasetsWrite, WorkflowsWrite, WorkflowsRun]),
    (R::Dataset, A::Create, &[DatasetsWrite]),
    (R::Dataset, A::Update, &[DatasetsWrite]),
    (R::Spec, A::Read, &[ModelsRead, RunsCreate, WorkflowsWrite]),
    (R::Run, A::Read, &[ModelsRead, RunsCreate, WorkflowsRun, ModelsValidate, RunsWrite]),
    (R::Run, A::Create, &[RunsCreate, WorkflowsRun, RunsWrite]),
    (R::Run, A::Cancel, &[RunsCreate, RunsWrite]),
    (R::Run, A::Update, &[RunsWrite]),
    (R::Model, A::Read, &[ModelsRead, RunsCreate, ScoreAll, EndpointsPromote, ModelsValidate]),
    (R::Model, A::Run, &[RunsCreate, ScoreAll, WorkflowsRun]),
    (R::Model, A::Validate, &[ModelsValidate]),
    (R::Endpoint, A::Read, &[ModelsRead, ScoreAll, EndpointsPromote, WorkflowsRun, ModelsValidate]),
    (R::Endpoint, A::Run, &[ScoreAll, WorkflowsRun]),
    (R::Endpoint, A::Create, &[EndpointsPromote]),
    (R::Endpoint, A::Update, &[EndpointsPromote]),
    (R::Endpoint, A::Promote, &[EndpointsPromote]),
    (R::Endpoint, A::Delete, &[EndpointsPromote]),
    (R::Plot, A::Read, &[ModelsRead, RunsCreate, RunsWrite]),
    (R::Plot, A::Run, &[RunsCreate]),
    (R::Webhook, A::Read, &[WebhooksManage]),
    (R::Webhook, A::Create, &[WebhooksManage]),
    (R::Webhook, A::Update, &[WebhooksManage]),
    (R::Webhook, A::Delete, &[WebhooksManage]),
    (R::Plugin, A::Read, &[PluginsPublish]),
    (R::Plugin, A::Create, &[PluginsPublish]),
    (R::Plugin, A::Delete, &[PluginsPublish]),
    (R::Usage, A::Read, &[ModelsRead, RunsCreate, ScoreAll]),
    (R::Workflow, A::Read, &[ModelsRead, RunsCreate, WorkflowsWrite, WorkflowsRun, PoliciesManage]),
    (R::Workflow, A::Create, &[WorkflowsWrite]),
    (R::Workflow, A::Update, &[WorkflowsWrite, WorkflowsRun]),
    (R::Workflow, A::Run, &[WorkflowsRun]),
    (R::Workflow, A::Cancel, &[WorkflowsRun]),
    (R::Policy, A::Read, &[ModelsRead, WorkflowsWrite, WorkflowsRun, ModelsValidate, PoliciesManage]),
    (R::Policy, A::Create, &[PoliciesManage]),
    (R::Policy, A::Update, &[PoliciesManage]),
    (R::Policy, A::Delete, &[PoliciesManage]),
];

/// Whether `scopes` allow (resource, action). `endpoint` names the endpoint
/// acted on, for `score:<alias>`.
pub fn scope_allows(scopes: &[Scope], resource: Resource, action: Action, endpoint: Option<&str>) -> bool {
    let row =
        SCOPES.iter().find(|(r, a, _)| *r == resource && *a == action).map(|(_, _, s)| *s).unwrap_or(&[]);
    scopes.iter().any(|s| match s {
        Scope::Admin => true,
        Scope::ScoreAlias(alias) => {
            row.contains(&Scope::ScoreAll)
                && (resource != Resource::Endpoint || endpoint == Some(alias.as_str()))
        }
        other => row.contains(other),
    })
}
