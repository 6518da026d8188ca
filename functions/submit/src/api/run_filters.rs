//! The runs' filters as a store query, for the runs list and the saved views
//! (which check a view's filters when it is saved).

use mapi_problem::ApiError;
use mapi_schema::RunFilters;
use mapi_store::Op;

/// `base` narrowed by `f`. Each equality filter has its own index ending in
/// `created_at`; a combination is served by merging them (Firestore's index
/// merging, and SQLite reads one index and checks the rest).
pub(super) fn narrowed(mut base: mapi_store::Query, f: &RunFilters) -> Result<mapi_store::Query, ApiError> {
    if let Some(s) = f.state {
        base = base.filter("state", Op::Eq, s.as_str());
    }
    if let Some(m) = &f.method {
        base = base.filter("method", Op::Eq, m.as_str());
    }
    if let Some(c) = f.class {
        base = base.filter("class", Op::Eq, c.as_str());
    }
    if let Some(u) = &f.created_by {
        base = base.filter("created_by", Op::Eq, u.as_str());
    }
    if let Some(t) = &f.tag {
        if !mapi_api::labels::is_tag(t) {
            let shown: String = t.chars().take(64).collect();
            return Err(ApiError::invalid(format!(
                "tag `{shown}` is not a tag: 1 to 64 of a-z, 0-9, -, _, ., : and ="
            )));
        }
        base = base.filter("labels.tags", Op::Contains, t.as_str());
    }
    if let Some(p) = &f.param {
        let valid = p.split_once('=').is_some_and(|(name, _)| !name.is_empty()) && p.chars().count() <= 200;
        if !valid {
            let shown: String = p.chars().take(64).collect();
            return Err(ApiError::invalid(format!(
                "param `{shown}`: write NAME=VALUE, e.g. param=y=employed (at most 200 characters)"
            )));
        }
        if f.tag.is_some() {
            return Err(ApiError::invalid(
                "filter by a tag or by a param, not both: each is one index of the runs, and a query reads one",
            ));
        }
        base = base.filter("param_keys", Op::Contains, p.as_str());
    }
    if let Some(e) = &f.experiment {
        if !mapi_api::labels::is_experiment_name(e) {
            return Err(ApiError::invalid(format!(
                "experiment {}",
                mapi_api::labels::experiment_name_rule(e)
            )));
        }
        base = base.filter("labels.experiment", Op::Eq, e.as_str());
    }
    // A metric is not a field of the run: the list checks it run by run.
    if let Some(m) = &f.metric {
        mapi_api::tracking::MetricFilter::parse(m).map_err(ApiError::invalid)?;
    }
    Ok(base)
}
