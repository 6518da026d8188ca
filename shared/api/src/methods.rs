//! The method registry as the API shows it (`GET /v1/methods`,
//! `GET /v1/methods/{name}`): what each method runs on, its parameters,
//! the files it writes, whether its runs become model versions, and an
//! example call.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What a method runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MethodInput {
    /// A run's uploaded CSV dataset, in an execution (`POST …/runs`).
    Dataset,
    /// One JSON item of an item job (`POST …/jobs`).
    Item,
}

/// The JSON shape a parameter takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    /// One column name (a string) of a numeric column.
    Column,
    /// One column name whose cells may be text (class labels, dates, ids).
    AnyColumn,
    /// A non-empty array of distinct column names.
    Columns,
    /// A finite number.
    Number,
    /// An integral number.
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A string.
    Text,
}

/// One parameter of a method.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ParamView {
    pub name: String,
    pub kind: ParamKind,
    pub required: bool,
    /// The value used when the parameter is absent (or null).
    pub default: Option<Value>,
    /// Inclusive lower bound of a number or an integer.
    pub min: Option<f64>,
    /// Inclusive upper bound of a number or an integer.
    pub max: Option<f64>,
    pub description: String,
}

/// One file a method writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MethodOutput {
    /// The file name, e.g. `model.json`.
    pub name: String,
    pub media_type: String,
    pub description: String,
}

/// An example call: the params, and for an item method one item.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MethodExample {
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, Value>,
    /// Present for an item method only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<Value>,
}

/// A method, as `GET /v1/methods/{name}` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MethodView {
    pub name: String,
    pub input: MethodInput,
    pub summary: String,
    /// Whether a succeeded run of the method is sealed into a model version
    /// (which an endpoint can serve); otherwise it has its outputs only.
    pub produces_model: bool,
    /// The output holding the fitted model, when the method produces one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_file: Option<String>,
    pub params: Vec<ParamView>,
    pub outputs: Vec<MethodOutput>,
    pub example: MethodExample,
    /// For a plugin's method: the plugin version a run of it runs now (its newest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<MethodPlugin>,
    /// Why this platform's executor cannot run the method (a Python package
    /// its interpreter lacks, and what to install); absent when it can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

/// The plugin version that adds a method.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MethodPlugin {
    pub name: String,
    pub version: String,
    /// Lowercase hex SHA-256 of its package.
    pub sha256: String,
}

/// Every method, as `GET /v1/methods` lists them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MethodList {
    /// The registry's version (`GET /manifest` reports the same).
    pub registry_version: String,
    pub methods: Vec<MethodView>,
}
