//! Saved views of a project's runs table: filters and columns under a name
//! (runners save and delete them, with the `run` update grant and, for
//! tokens, `runs:write`; everyone who reads runs reads them), audited
//! `run_view.save` and `run_view.delete`. `GET …/runs?view=name` lists by
//! a view's filters; the console and `mapi runs ls --view` show its columns.

use axum::extract::State;
use axum::http::StatusCode;
use mapi_access::{Action, Resource};
use mapi_api::labels::{experiment_name_rule, is_experiment_name};
use mapi_domain::{ProjectId, TenantId};
use mapi_identity::{Audit, Caller};
use mapi_platform::AppState;
use mapi_problem::{ApiError, Json, Path, Query};
use mapi_schema::{Doc, RunFilters, RunViewDoc, tx_get, tx_put};
use mapi_store::{Direction, transact};
use serde::{Deserialize, Serialize};

use super::datasets::{PageQuery, project_page, require_project};

/// The columns a view may show besides `params.{name}` and `metrics.{name}`.
pub const COLUMNS: &[&str] = &[
    "id",
    "name",
    "method",
    "dataset",
    "state",
    "class",
    "attempt",
    "created_at",
    "created_by",
    "charged",
    "tags",
    "experiment",
];
/// The columns of a view saved without any.
pub const DEFAULT_COLUMNS: &[&str] = &["id", "name", "method", "state", "class", "created_at", "charged"];
/// The most columns a view shows.
pub const MAX_COLUMNS: usize = 30;

type NamedPath = Path<(TenantId, ProjectId, String)>;

/// The body of `PUT …/run-views/{name}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SaveRunView {
    #[serde(default)]
    pub filters: RunFilters,
    /// Up to 30 of `id`, `name`, `method`, `dataset`, `state`, `class`,
    /// `attempt`, `created_at`, `created_by`, `charged`, `tags`,
    /// `experiment`, `params.{name}`, `metrics.{name}`; the default set when absent.
    #[schema(value_type = Option<Vec<ColumnName>>, nullable = false, min_items = 1, max_items = 30)]
    pub columns: Option<Vec<String>>,
}

/// A project's saved views, by name.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct RunViewPage {
    pub views: Vec<RunViewDoc>,
    pub next_page_token: Option<String>,
}

/// Whether `c` is a column a view may show.
/// How the API document states a column: what [`is_column`] accepts.
#[derive(Debug)]
pub struct ColumnName;

impl ColumnName {
    const PATTERN: &str = "^(id|name|method|dataset|state|class|attempt|created_at|created_by|charged|tags|experiment|(params|metrics)\\.[A-Za-z0-9_./-]{1,64})$";
}

impl utoipa::PartialSchema for ColumnName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        mapi_domain::schema::string_matching(ColumnName::PATTERN).into()
    }
}

impl utoipa::ToSchema for ColumnName {}

fn is_column(c: &str) -> bool {
    let named = |n: &str| {
        !n.is_empty() && n.len() <= 64 && n.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b))
    };
    COLUMNS.contains(&c)
        || c.strip_prefix("params.").or_else(|| c.strip_prefix("metrics.")).is_some_and(named)
}

/// `?columns=` of the runs list: comma-separated columns a view may show, checked as a view's are.
pub fn value_columns(text: &str) -> Result<Vec<String>, ApiError> {
    let named: Vec<String> =
        text.split(',').map(str::trim).filter(|c| !c.is_empty()).map(str::to_owned).collect();
    check_columns(Some(&named))
}

fn check_columns(columns: Option<&[String]>) -> Result<Vec<String>, ApiError> {
    let Some(columns) = columns else {
        return Ok(DEFAULT_COLUMNS.iter().map(|c| (*c).to_owned()).collect());
    };
    if columns.is_empty() || columns.len() > MAX_COLUMNS {
        return Err(ApiError::invalid(format!(
            "columns: name 1 to {MAX_COLUMNS} columns, or leave it out for the default"
        )));
    }
    if let Some(bad) = columns.iter().find(|c| !is_column(c)) {
        let shown: String = bad.chars().take(80).collect();
        return Err(ApiError::invalid(format!(
            "columns: `{shown}` is not a column; use {}, params.NAME or metrics.NAME",
            COLUMNS.join(", ")
        )));
    }
    Ok(columns.to_vec())
}

/// The project's saved view `name`.
pub async fn find(
    state: &AppState,
    tenant: &TenantId,
    project: &ProjectId,
    name: &str,
) -> Result<RunViewDoc, ApiError> {
    super::experiments::named(state, tenant, project, name, "saved view").await
}

/// Save a view of the runs table under a name, replacing one of that name.
#[utoipa::path(put, path = "/v1/tenants/{tenant}/projects/{project}/run-views/{name}", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path, description = "1 to 64 of a-z, 0-9, -, _, .")),
    request_body = SaveRunView,
    responses((status = 201, body = RunViewDoc, description = "Saved anew"), (status = 200, body = RunViewDoc, description = "Replaced"),
        (status = 400, body = mapi_problem::Problem)),
    security(("session" = []), ("token" = [])))]
pub async fn save(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): NamedPath,
    Json(body): Json<SaveRunView>,
) -> Result<(StatusCode, Json<RunViewDoc>), ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Update).await?;
    if !is_experiment_name(&name) {
        return Err(ApiError::invalid(format!("the view's name {}", experiment_name_rule(&name))));
    }
    let columns = check_columns(body.columns.as_deref())?;
    // The filters are checked as the runs list checks them.
    super::run_filters::narrowed(mapi_store::Query::new("runs"), &body.filters)?;
    let now = state.clock.now();
    let record = Audit::by(&caller, "run_view.save", format!("run-views/{name}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .detail(format!("{} columns", columns.len()))
        .into_doc(now, &*state.entropy);
    let view = RunViewDoc {
        tenant: tenant.clone(),
        project: project.clone(),
        name: name.clone(),
        filters: body.filters,
        columns,
        saved_by: caller.user().clone(),
        created_at: now,
        updated_at: now,
    };
    let (view_ref, record) = (&view, &record);
    let saved = transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        let before = tx_get::<RunViewDoc>(&mut tx, &view_ref.doc_id()).await?;
        let view =
            RunViewDoc { created_at: before.as_ref().map_or(now, |b| b.created_at), ..view_ref.clone() };
        tx_put(&mut tx, &view)?;
        mapi_schema::tx_create(&mut tx, record)?;
        Ok(tx.finish((before.is_none(), view)))
    })
    .await?;
    let status = if saved.0 { StatusCode::CREATED } else { StatusCode::OK };
    Ok((status, Json(saved.1)))
}

/// The project's saved views, by name.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/run-views", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), PageQuery),
    responses((status = 200, body = RunViewPage), (status = 400, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project)): Path<(TenantId, ProjectId)>,
    Query(q): Query<PageQuery>,
) -> Result<Json<RunViewPage>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Read).await?;
    let (views, next_page_token) =
        project_page(&state, &tenant, &project, &q, ("name", Direction::Asc)).await?;
    Ok(Json(RunViewPage { views, next_page_token }))
}

/// A saved view.
#[utoipa::path(get, path = "/v1/tenants/{tenant}/projects/{project}/run-views/{name}", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path)),
    responses((status = 200, body = RunViewDoc), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn get_view(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): NamedPath,
) -> Result<Json<RunViewDoc>, ApiError> {
    require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Read).await?;
    Ok(Json(find(&state, &tenant, &project, &name).await?))
}

/// Delete a saved view.
#[utoipa::path(delete, path = "/v1/tenants/{tenant}/projects/{project}/run-views/{name}", tag = "runs",
    params(("tenant" = mapi_domain::TenantId, Path), ("project" = mapi_domain::ProjectId, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = mapi_problem::Problem)), security(("session" = []), ("token" = [])))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path((tenant, project, name)): NamedPath,
) -> Result<StatusCode, ApiError> {
    let granted = require_project(&state, &caller, &tenant, &project, Resource::Run, Action::Update).await?;
    let view = find(&state, &tenant, &project, &name).await?;
    let record = Audit::by(&caller, "run_view.delete", format!("run-views/{name}"))
        .tenant(&tenant)
        .project(&project)
        .operator(granted.as_operator)
        .into_doc(state.clock.now(), &*state.entropy);
    let key = mapi_schema::key::<RunViewDoc>(&view.doc_id())?;
    let (key, record) = (&key, &record);
    transact::<_, ApiError, _, _>(&*state.store, |mut tx| async move {
        tx.delete(key);
        mapi_schema::tx_create(&mut tx, record)?;
        Ok(tx.finish(()))
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_the_tables_or_a_param_or_metric_by_name() {
        for ok in ["id", "charged", "params.y", "metrics.val/acc", "metrics.r_squared"] {
            assert!(is_column(ok), "{ok}");
        }
        for bad in ["", "cost", "params.", "metrics.a b", "params.x;y", "labels.tags"] {
            assert!(!is_column(bad), "{bad}");
        }
        assert_eq!(check_columns(None).expect("default").len(), DEFAULT_COLUMNS.len());
        assert!(check_columns(Some(&[])).is_err());
    }

    #[test]
    fn the_stated_column_pattern_is_what_is_a_column() {
        let re = regex::Regex::new(ColumnName::PATTERN).expect("compiles");
        let long = format!("params.{}", "a".repeat(64));
        let too_long = format!("params.{}", "a".repeat(65));
        let mut samples =
            vec!["", "cost", "params.", "params.y", "metrics.val/acc", "metrics.a b", "params.x;y", "Id"];
        samples.extend([long.as_str(), too_long.as_str(), "id\n"]);
        samples.extend(COLUMNS);
        for c in samples {
            assert_eq!(re.is_match(c), is_column(c), "{c:?}");
        }
    }
}
