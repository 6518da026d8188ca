//! A workflow's definition: its nodes, what each does and which nodes it
//! needs, checked before it is stored so every error names the node and
//! the field to fix.
//!
//! Four kinds of node:
//! - `run`: one run of `method` on `dataset` with `params` (and `class`,
//!   `timeout_s`, `tasks` as a run's spec has them);
//! - `search.grid`: a run's spec and a `grid` of parameter values; it runs
//!   one child run per combination of the grid's values (its cartesian
//!   product, at most [`MAX_GRID`]) and its output is the child whose
//!   `metric` is best (`goal`: `maximize`, the default, or `minimize`);
//! - `validate`: submits the model version its one upstream node made for
//!   validation under the policy in force, and succeeds once the
//!   validation admits it (`endpoint`: the alias an improvement is measured
//!   against, when the policy asks one);
//! - `deploy`: promotes the model version its one upstream node made (or
//!   validated) on the endpoint `endpoint`, through the promotion gate.
//!
//! A node starts once every node it `needs` has succeeded. The nodes and
//! their needs form a graph without cycles; `validate` and `deploy` need
//! exactly one node that yields a model version.

use std::collections::{BTreeMap, BTreeSet};

use mapi_domain::{DatasetId, ResourceClass, RunSpecInput};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The most nodes in one workflow.
pub const MAX_NODES: usize = 50;
/// The most child runs one `search.grid` node makes.
pub const MAX_GRID: usize = 100;
/// How a node's id is written: a lowercase letter, then up to 62
/// lowercase letters, digits, `-` or `_`.
pub const NODE_ID_PATTERN: &str = "^[a-z][a-z0-9_-]{0,62}$";

/// A workflow's definition, as written (YAML or JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WorkflowDefinition)]
pub struct Definition {
    /// What the workflow is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its nodes, in the order they are shown.
    pub nodes: Vec<Node>,
}

/// One node of a workflow. Which fields a node takes depends on its kind.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = WorkflowNode)]
pub struct Node {
    /// Unique in the workflow; see [`NODE_ID_PATTERN`].
    pub id: String,
    pub kind: Kind,
    /// The nodes that must succeed before this one starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// `run`, `search.grid`: the method.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// `run`, `search.grid`: the dataset the method reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// `run`, `search.grid`: the method's parameters (a grid's combination
    /// is added to them).
    #[serde(default, skip_serializing_if = "Map::is_empty")]
    #[schema(value_type = Object)]
    pub params: Map<String, Value>,
    /// `run`, `search.grid`: the resource class; `S` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ResourceClass>,
    /// `run`, `search.grid`: each run's timeout; 3600 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u32>,
    /// `run`, `search.grid`: each run's tasks; 1 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<u32>,
    /// `search.grid`: each parameter's values to try.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub grid: Option<BTreeMap<String, Vec<Value>>>,
    /// `search.grid`: the metric that picks the best child.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metric: Option<String>,
    /// `search.grid`: whether the best child's metric is the highest
    /// (`maximize`, the default) or the lowest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goal: Option<Goal>,
    /// `deploy`: the endpoint to promote on; `validate`: the endpoint an
    /// improvement is measured against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
}

/// What a node does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(as = WorkflowNodeKind)]
pub enum Kind {
    #[serde(rename = "run")]
    Run,
    #[serde(rename = "search.grid")]
    Grid,
    #[serde(rename = "validate")]
    Validate,
    #[serde(rename = "deploy")]
    Deploy,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Run => "run",
            Kind::Grid => "search.grid",
            Kind::Validate => "validate",
            Kind::Deploy => "deploy",
        }
    }
}

/// Which end of a grid's metric is best.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Goal {
    #[default]
    Maximize,
    Minimize,
}

/// A run a node submits: its spec, and the grid's combination it tries
/// (empty for a `run` node).
pub type Spec = (RunSpecInput, Map<String, Value>);

/// A definition that cannot run: where (the node and the field) and why.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}{}: {detail}", node.as_ref().map(|n| format!("node `{n}`, ")).unwrap_or_default(), field_text(field))]
pub struct DefinitionError {
    /// The node's id (or its place, `nodes[3]`, when it has none readable).
    pub node: Option<String>,
    /// The field, as a path within the node (or the document).
    pub field: String,
    pub detail: String,
}

fn field_text(field: &str) -> String {
    if field.is_empty() { "the document".to_owned() } else { format!("field `{field}`") }
}

fn error(node: Option<&str>, field: &str, detail: impl Into<String>) -> DefinitionError {
    DefinitionError { node: node.map(str::to_owned), field: field.to_owned(), detail: detail.into() }
}

/// What the checks need to know of a method: whether the platform knows
/// it, and whether its runs make a model version. Answered by the method
/// registry (plugin methods are checked when their runs are submitted).
pub trait Methods {
    /// `None` for a method this check cannot judge (a plugin's), else
    /// whether its runs make model versions; `Err` with what to use for an
    /// unknown one.
    fn produces_model(&self, method: &str) -> Result<Option<bool>, String>;
    /// Checks `params` against the method's parameters.
    fn check_params(&self, method: &str, params: &Map<String, Value>) -> Result<(), String>;
}

impl Definition {
    /// Reads a definition from YAML or JSON text (JSON is YAML), naming the
    /// node and field of a value of the wrong shape.
    pub fn parse(text: &str) -> Result<Value, DefinitionError> {
        let value: Value =
            serde_norway::from_str(text).map_err(|e| error(None, "", format!("not YAML or JSON: {e}")))?;
        Ok(value)
    }

    /// Decodes a definition from its JSON value, naming the node and field
    /// of a value of the wrong shape or an unknown field.
    pub fn decode(value: &Value) -> Result<Definition, DefinitionError> {
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let detail = e.into_inner().to_string();
            located(value, &path, detail)
        })
    }

    /// Checks everything that can be checked before a run: node ids, each
    /// kind's fields, the needs (known, no cycle), each `run` and
    /// `search.grid` node's specs (every combination of a grid), and that a
    /// `validate` or `deploy` node has one upstream node with a model version.
    pub fn check(&self, methods: &dyn Methods) -> Result<(), DefinitionError> {
        if self.nodes.is_empty() {
            return Err(error(None, "nodes", "a workflow has at least one node"));
        }
        if self.nodes.len() > MAX_NODES {
            return Err(error(None, "nodes", format!("{} nodes: at most {MAX_NODES}", self.nodes.len())));
        }
        let mut seen = BTreeSet::new();
        for node in &self.nodes {
            check_id(&node.id)?;
            if !seen.insert(node.id.as_str()) {
                return Err(error(Some(&node.id), "id", "another node has this id: ids are unique"));
            }
        }
        for node in &self.nodes {
            self.check_needs(node)?;
            check_fields(node)?;
            match node.kind {
                Kind::Run | Kind::Grid => {
                    check_dataset(node)?;
                    for spec in node.specs(&any_dataset())? {
                        check_spec(node, &spec, methods)?;
                    }
                }
                Kind::Validate | Kind::Deploy => self.check_upstream(node, methods)?,
            }
        }
        self.order().map(|_| ())
    }

    /// The node `id`.
    pub fn node(&self, id: &str) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    fn check_needs(&self, node: &Node) -> Result<(), DefinitionError> {
        let mut seen = BTreeSet::new();
        for (i, need) in node.needs.iter().enumerate() {
            let field = format!("needs[{i}]");
            if need == &node.id {
                return Err(error(Some(&node.id), &field, "a node cannot need itself"));
            }
            if self.node(need).is_none() {
                return Err(error(Some(&node.id), &field, format!("no node `{need}` in this workflow")));
            }
            if !seen.insert(need) {
                return Err(error(Some(&node.id), &field, format!("`{need}` is named twice")));
            }
        }
        Ok(())
    }

    fn check_upstream(&self, node: &Node, methods: &dyn Methods) -> Result<(), DefinitionError> {
        let yields: Vec<&Node> = node
            .needs
            .iter()
            .filter_map(|n| self.node(n))
            .filter(|n| self.yields_model(n, methods))
            .collect();
        if yields.len() != 1 {
            return Err(error(
                Some(&node.id),
                "needs",
                format!(
                    "a {} node needs exactly one node that yields a model version (a run or search.grid \
                     of a method that fits a model, or a validate node); it has {}",
                    node.kind.as_str(),
                    yields.len()
                ),
            ));
        }
        Ok(())
    }

    /// Whether `node`'s output is a model version (for a plugin's method,
    /// not known until its run: assumed, and refused at the run if not).
    fn yields_model(&self, node: &Node, methods: &dyn Methods) -> bool {
        match node.kind {
            Kind::Run | Kind::Grid => node
                .method
                .as_deref()
                .is_some_and(|m| methods.produces_model(m).ok().flatten().unwrap_or(true)),
            Kind::Validate => true,
            Kind::Deploy => false,
        }
    }

    /// The upstream node whose model version a `validate` or `deploy` node
    /// takes: its first need that yields one.
    pub fn model_source(&self, node: &Node) -> Option<&Node> {
        node.needs.iter().filter_map(|n| self.node(n)).find(|n| n.kind != Kind::Deploy)
    }

    /// The nodes in an order where each comes after those it needs, or the
    /// error naming a node on a cycle.
    pub fn order(&self) -> Result<Vec<&Node>, DefinitionError> {
        let mut placed: BTreeSet<&str> = BTreeSet::new();
        let mut order = Vec::with_capacity(self.nodes.len());
        while order.len() < self.nodes.len() {
            let next = self
                .nodes
                .iter()
                .filter(|n| !placed.contains(n.id.as_str()))
                .find(|n| n.needs.iter().all(|d| placed.contains(d.as_str())));
            let Some(next) = next else {
                let stuck = self.nodes.iter().find(|n| !placed.contains(n.id.as_str()));
                return Err(error(
                    stuck.map(|n| n.id.as_str()),
                    "needs",
                    "the needs form a cycle: a node cannot wait on itself through others",
                ));
            };
            placed.insert(&next.id);
            order.push(next);
        }
        Ok(order)
    }
}

impl Node {
    /// The grid's combinations a `search.grid` node runs, in the grid's
    /// order; one empty combination for any other node.
    pub fn combinations(&self) -> Result<Vec<Map<String, Value>>, DefinitionError> {
        match (&self.kind, &self.grid) {
            (Kind::Grid, Some(grid)) => combinations(&self.id, grid),
            _ => Ok(vec![Map::new()]),
        }
    }

    /// The dataset a `run` or `search.grid` node reads, as written.
    pub fn dataset(&self) -> Option<DatasetRef> {
        let given = self.dataset.as_deref()?;
        Some(match DatasetId::parse(given) {
            Ok(id) => DatasetRef::Id(id),
            Err(_) => DatasetRef::Name(given.to_owned()),
        })
    }

    /// The run spec of one combination (`combo`) of this node, on `dataset`.
    pub fn spec(
        &self,
        dataset: &DatasetId,
        combo: &Map<String, Value>,
    ) -> Result<RunSpecInput, DefinitionError> {
        let mut params = self.params.clone();
        params.extend(combo.clone());
        let mut spec = serde_json::json!({
            "method": self.method.clone().unwrap_or_default(),
            "dataset": dataset,
            "params": params,
        });
        if let Some(class) = self.class {
            spec["class"] = serde_json::json!(class);
        }
        if let Some(t) = self.timeout_s {
            spec["timeout_s"] = t.into();
        }
        if let Some(t) = self.tasks {
            spec["tasks"] = t.into();
        }
        serde_json::from_value(spec).map_err(|e| error(Some(&self.id), "params", e.to_string()))
    }

    /// The run specs a `run` (one) or `search.grid` node (one per
    /// combination, in the grid's order) submits on `dataset`, each with
    /// its combination's values.
    pub fn specs(&self, dataset: &DatasetId) -> Result<Vec<Spec>, DefinitionError> {
        self.combinations()?.into_iter().map(|c| Ok((self.spec(dataset, &c)?, c))).collect()
    }
}

/// A node's dataset: an id (`ds_…`), or a name, the project's newest
/// dataset of that name when a run of the node is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DatasetRef {
    Id(DatasetId),
    Name(String),
}

/// A stand-in dataset id, for what is checked before a dataset is chosen.
pub fn any_dataset() -> DatasetId {
    DatasetId::generate(mapi_domain::Timestamp::from_secs(0), [0; 10])
}

/// A dataset is an id or a name of 1 to 200 printable characters.
fn check_dataset(node: &Node) -> Result<(), DefinitionError> {
    match node.dataset() {
        Some(DatasetRef::Name(n))
            if n.is_empty() || n.chars().count() > 200 || n.chars().any(char::is_control) =>
        {
            Err(error(
                Some(&node.id),
                "dataset",
                "give a dataset's id (ds_…) or its name (1 to 200 printable characters)",
            ))
        }
        _ => Ok(()),
    }
}

fn check_id(id: &str) -> Result<(), DefinitionError> {
    let mut chars = id.chars();
    let ok = chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && id.len() <= 63
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(error(
            Some(id),
            "id",
            "use a lowercase letter, then up to 62 lowercase letters, digits, `-` or `_`",
        ))
    }
}

/// Which fields each kind takes: a field another kind takes is refused,
/// and a kind's required fields must be there.
fn check_fields(node: &Node) -> Result<(), DefinitionError> {
    let id = Some(node.id.as_str());
    let spec = node.method.is_some()
        || node.dataset.is_some()
        || !node.params.is_empty()
        || node.class.is_some()
        || node.timeout_s.is_some()
        || node.tasks.is_some();
    let given = [
        ("method", node.method.is_some()),
        ("dataset", node.dataset.is_some()),
        ("grid", node.grid.is_some()),
        ("metric", node.metric.is_some()),
        ("goal", node.goal.is_some()),
        ("endpoint", node.endpoint.is_some()),
    ];
    let (required, allowed): (&[&str], &[&str]) = match node.kind {
        Kind::Run => (&["method", "dataset"], &["method", "dataset"]),
        Kind::Grid => {
            (&["method", "dataset", "grid", "metric"], &["method", "dataset", "grid", "metric", "goal"])
        }
        Kind::Validate => (&[], &["endpoint"]),
        Kind::Deploy => (&["endpoint"], &["endpoint"]),
    };
    for (field, present) in given {
        if present && !allowed.contains(&field) {
            return Err(error(id, field, format!("a {} node takes no `{field}`", node.kind.as_str())));
        }
        if !present && required.contains(&field) {
            return Err(error(id, field, format!("a {} node needs `{field}`", node.kind.as_str())));
        }
    }
    if spec && matches!(node.kind, Kind::Validate | Kind::Deploy) {
        return Err(error(
            id,
            "method",
            format!(
                "a {} node runs nothing: it takes the model version of the node it needs",
                node.kind.as_str()
            ),
        ));
    }
    if matches!(node.kind, Kind::Validate | Kind::Deploy) && node.needs.is_empty() {
        return Err(error(
            id,
            "needs",
            format!("a {} node needs the node whose model version it takes", node.kind.as_str()),
        ));
    }
    Ok(())
}

/// Every combination of a grid's values, in the grid's order (the last
/// parameter varying fastest).
fn combinations(
    node: &str,
    grid: &BTreeMap<String, Vec<Value>>,
) -> Result<Vec<Map<String, Value>>, DefinitionError> {
    if grid.is_empty() {
        return Err(error(Some(node), "grid", "name at least one parameter and its values"));
    }
    let mut total: usize = 1;
    for (name, values) in grid {
        if values.is_empty() {
            return Err(error(Some(node), &format!("grid.{name}"), "give at least one value"));
        }
        total = total.saturating_mul(values.len());
    }
    if total > MAX_GRID {
        return Err(error(
            Some(node),
            "grid",
            format!("{total} combinations: at most {MAX_GRID} child runs per search.grid node"),
        ));
    }
    let mut combos = vec![Map::new()];
    for (name, values) in grid {
        combos = combos
            .into_iter()
            .flat_map(|c| {
                values.iter().map(move |v| {
                    let mut c = c.clone();
                    c.insert(name.clone(), v.clone());
                    c
                })
            })
            .collect();
    }
    Ok(combos)
}

fn check_spec(node: &Node, (spec, combo): &Spec, methods: &dyn Methods) -> Result<(), DefinitionError> {
    let id = Some(node.id.as_str());
    spec.check().map_err(|e| {
        let field = if e.to_string().starts_with("timeout") { "timeout_s" } else { "tasks" };
        error(id, field, e.to_string())
    })?;
    methods.produces_model(&spec.method).map_err(|e| error(id, "method", e))?;
    let params: Map<String, Value> = spec.params.clone().into_iter().collect();
    methods.check_params(&spec.method, &params).map_err(|e| {
        let field = if combo.is_empty() { "params".to_owned() } else { format!("grid ({})", show(combo)) };
        error(id, &field, e)
    })?;
    if node.kind == Kind::Grid
        && let Some(name) = node.grid.as_ref().and_then(|g| g.keys().find(|k| node.params.contains_key(*k)))
    {
        return Err(error(id, &format!("grid.{name}"), "also set in `params`: give it in one place"));
    }
    Ok(())
}

/// A combination as `name=value, …`.
pub fn show(combo: &Map<String, Value>) -> String {
    combo.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// The error of a value at `path` (serde's path, `nodes[2].timeout_s`):
/// the node named by its id when it has one.
fn located(value: &Value, path: &str, detail: String) -> DefinitionError {
    let Some(rest) = path.strip_prefix("nodes[") else {
        return error(None, if path == "." { "" } else { path }, detail);
    };
    let (index, field) = rest.split_once(']').unwrap_or((rest, ""));
    let field = field.trim_start_matches('.');
    let node = index
        .parse::<usize>()
        .ok()
        .and_then(|i| value["nodes"].get(i))
        .and_then(|n| n["id"].as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("nodes[{index}]"));
    DefinitionError { node: Some(node), field: field.to_owned(), detail }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Known;

    impl Methods for Known {
        fn produces_model(&self, method: &str) -> Result<Option<bool>, String> {
            match method {
                "tabular.linear" => Ok(Some(true)),
                "describe" => Ok(Some(false)),
                m if m.starts_with("p.") => Ok(None),
                m => Err(format!("unknown method `{m}`")),
            }
        }

        fn check_params(&self, _: &str, params: &Map<String, Value>) -> Result<(), String> {
            match params.get("intercept") {
                Some(v) if !v.is_boolean() => Err(format!("intercept: {v} is not a boolean")),
                _ => Ok(()),
            }
        }
    }

    const SWEEP: &str = "
nodes:
  - id: sweep
    kind: search.grid
    method: tabular.linear
    dataset: ds_01arz3ndektsv4rrffq69g5fav
    params: {y: employed}
    grid:
      intercept: [true, false]
      x: [[gnp], [gnp, population]]
    metric: r_squared
  - id: check
    kind: validate
    needs: [sweep]
  - id: ship
    kind: deploy
    needs: [check]
    endpoint: employment
";

    fn parsed(text: &str) -> Result<Definition, DefinitionError> {
        let d = Definition::decode(&Definition::parse(text)?)?;
        d.check(&Known)?;
        Ok(d)
    }

    #[test]
    fn a_sweep_validated_then_deployed_is_a_definition() {
        let d = parsed(SWEEP).expect("valid");
        let specs = d.nodes[0].specs(&any_dataset()).expect("specs");
        assert_eq!(specs.len(), 4);
        assert_eq!(show(&specs[0].1), r#"intercept=true, x=["gnp"]"#);
        assert_eq!(specs[3].0.params["intercept"], json!(false));
        assert_eq!(specs[3].0.params["y"], json!("employed"));
        let order: Vec<&str> = d.order().expect("order").iter().map(|n| n.id.as_str()).collect();
        assert_eq!(order, ["sweep", "check", "ship"]);
        assert_eq!(d.model_source(&d.nodes[2]).map(|n| n.id.as_str()), Some("check"));
        let named =
            parsed("nodes: [{id: a, kind: run, method: describe, dataset: longley.csv}]").expect("a name");
        assert_eq!(named.nodes[0].dataset(), Some(DatasetRef::Name("longley.csv".into())));
        assert!(matches!(d.nodes[0].dataset(), Some(DatasetRef::Id(_))));
        let json = Definition::parse(&serde_json::to_string(&d).expect("json")).expect("json is yaml");
        assert_eq!(Definition::decode(&json).expect("again"), d);
    }

    #[test]
    fn errors_name_the_node_and_the_field() {
        let cases: &[(&str, &str, &str, &str)] = &[
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, timeout_s: soon}]",
                "a",
                "timeout_s",
                "invalid type",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, colour: red}]",
                "a",
                "colour",
                "unknown field `colour`",
            ),
            ("nodes: [{id: a, kind: train}]", "a", "kind", "unknown variant `train`"),
            (
                "nodes: [{id: a, kind: run, dataset: ds_01arz3ndektsv4rrffq69g5fav}]",
                "a",
                "method",
                "needs `method`",
            ),
            (
                "nodes: [{id: a, kind: run, method: nope, dataset: ds_01arz3ndektsv4rrffq69g5fav}]",
                "a",
                "method",
                "unknown method `nope`",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, timeout_s: 0}]",
                "a",
                "timeout_s",
                "out of range",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, params: {intercept: 3}}]",
                "a",
                "params",
                "not a boolean",
            ),
            (
                "nodes: [{id: a, kind: search.grid, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, metric: r, grid: {intercept: [true, 2]}}]",
                "a",
                "grid (intercept=2)",
                "not a boolean",
            ),
            (
                "nodes: [{id: a, kind: search.grid, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, metric: r, grid: {intercept: []}}]",
                "a",
                "grid.intercept",
                "at least one value",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, needs: [b]}]",
                "a",
                "needs[0]",
                "no node `b`",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav, needs: [b]}, {id: b, kind: run, method: describe, dataset: ds_01arz3ndektsv4rrffq69g5fav, needs: [a]}]",
                "a",
                "needs",
                "cycle",
            ),
            (
                "nodes: [{id: a, kind: run, method: describe, dataset: ds_01arz3ndektsv4rrffq69g5fav}, {id: v, kind: validate, needs: [a]}]",
                "v",
                "needs",
                "exactly one node that yields a model version",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav}, {id: s, kind: deploy, needs: [a]}]",
                "s",
                "endpoint",
                "needs `endpoint`",
            ),
            (
                "nodes: [{id: a, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav}, {id: a, kind: run, method: describe, dataset: ds_01arz3ndektsv4rrffq69g5fav}]",
                "a",
                "id",
                "unique",
            ),
            (
                "nodes: [{id: Fit, kind: run, method: tabular.linear, dataset: ds_01arz3ndektsv4rrffq69g5fav}]",
                "Fit",
                "id",
                "lowercase",
            ),
            (
                "nodes: [{id: v, kind: validate, method: tabular.linear, needs: [v]}]",
                "v",
                "needs[0]",
                "itself",
            ),
        ];
        for (text, node, field, detail) in cases {
            let e = parsed(text).expect_err(text);
            assert_eq!(e.node.as_deref(), Some(*node), "{text}: {e}");
            assert_eq!(e.field, *field, "{text}: {e}");
            assert!(e.detail.contains(detail), "{text}: {e}");
            assert!(e.to_string().starts_with(&format!("node `{node}`, ")), "{e}");
        }
    }

    /// A definition is tenant input: an alias bomb (each level nine copies
    /// of the last, 9^9 strings expanded) and nesting 10,000 deep are
    /// refused at once, not expanded or recursed through.
    #[test]
    fn hostile_yaml_is_refused_without_expanding_it() {
        let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x]\n");
        for i in 1..9 {
            let p = i - 1;
            bomb.push_str(&format!(
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
            ));
        }
        bomb.push_str("nodes: [*a8]\n");
        let deep = format!("nodes: {}{}", "[".repeat(10_000), "]".repeat(10_000));
        for text in [bomb, deep] {
            let started = std::time::Instant::now();
            let e = Definition::parse(&text).and_then(|v| Definition::decode(&v)).expect_err("refused");
            assert!(started.elapsed() < std::time::Duration::from_secs(2), "{e}");
            assert_eq!(e.node, None, "{e}");
        }
    }

    #[test]
    fn a_grid_is_bounded_and_a_plugin_method_is_judged_at_its_run() {
        let values: Vec<u32> = (0..11).collect();
        let text = json!({"nodes": [{"id": "g", "kind": "search.grid", "method": "tabular.linear",
            "dataset": "ds_01arz3ndektsv4rrffq69g5fav", "metric": "r", "grid": {"a": values, "b": values}}]})
        .to_string();
        let e = parsed(&text).expect_err("121 children");
        assert!(e.detail.contains("121 combinations"), "{e}");
        parsed("nodes: [{id: p, kind: run, method: p.mine.fit, dataset: ds_01arz3ndektsv4rrffq69g5fav}, {id: v, kind: validate, needs: [p]}]")
            .expect("a plugin's method may yield a model");
        assert!(parsed("nodes: []").expect_err("empty").to_string().contains("at least one node"));
        assert!(parsed("nodes: [").expect_err("not yaml").detail.contains("not YAML or JSON"));
    }
}
