//! Ways people organise a project's runs: experiments (named sets of runs;
//! a run names its experiment in its labels) and saved views of the runs
//! table (filters and columns under a name). Both are answered as stored.
//! Ids: `{tenant}:{project}:{name}`, so a name is unique in its project.

use mapi_domain::{ProjectId, ResourceClass, RunState, TenantId, Timestamp, UserId};
use serde::{Deserialize, Serialize};

use crate::Doc;

/// The id of a project's experiment or saved view called `name`.
pub fn named_id(tenant: &TenantId, project: &ProjectId, name: &str) -> String {
    format!("{tenant}:{project}:{name}")
}

/// An experiment: a named set of a project's runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExperimentDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub description: String,
    pub created_by: UserId,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Doc for ExperimentDoc {
    const COLLECTION: &'static str = "experiments";
    fn doc_id(&self) -> String {
        named_id(&self.tenant, &self.project, &self.name)
    }
}

/// The filters of the runs table, as `GET …/runs` takes them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunFilters {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<RunState>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ResourceClass>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<UserId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
    /// `NAME=VALUE`: runs whose param NAME is VALUE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param: Option<String>,
    /// `NAME OP NUMBER` (`r2>0.9`): runs whose metric NAME compares so
    /// (`mapi_api::tracking::MetricFilter`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
}

impl RunFilters {
    /// These filters, each one `over` sets replacing this one's.
    pub fn overridden_by(&self, over: &RunFilters) -> RunFilters {
        RunFilters {
            state: over.state.or(self.state),
            method: over.method.clone().or_else(|| self.method.clone()),
            class: over.class.or(self.class),
            created_by: over.created_by.clone().or_else(|| self.created_by.clone()),
            tag: over.tag.clone().or_else(|| self.tag.clone()),
            experiment: over.experiment.clone().or_else(|| self.experiment.clone()),
            param: over.param.clone().or_else(|| self.param.clone()),
            metric: over.metric.clone().or_else(|| self.metric.clone()),
        }
    }
}

/// A saved view of a project's runs table: its filters and the columns shown.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunViewDoc {
    pub tenant: TenantId,
    pub project: ProjectId,
    pub name: String,
    pub filters: RunFilters,
    /// The columns shown, in order (see `GET …/run-views/{name}`'s body).
    pub columns: Vec<String>,
    pub saved_by: UserId,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

impl Doc for RunViewDoc {
    const COLLECTION: &'static str = "run_views";
    fn doc_id(&self) -> String {
        named_id(&self.tenant, &self.project, &self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_given_replaces_the_saved_one_and_the_rest_are_kept() {
        let saved = RunFilters {
            state: Some(RunState::Succeeded),
            tag: Some("q3".into()),
            experiment: Some("study".into()),
            ..Default::default()
        };
        let asked = RunFilters { tag: Some("q4".into()), ..Default::default() };
        let merged = saved.overridden_by(&asked);
        assert_eq!(
            (merged.state, merged.tag.as_deref(), merged.experiment.as_deref()),
            (Some(RunState::Succeeded), Some("q4"), Some("study"))
        );
        assert_eq!(saved.overridden_by(&RunFilters::default()), saved);
    }
}
