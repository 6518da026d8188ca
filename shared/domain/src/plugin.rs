//! The tenant code a run of a plugin method runs.

use serde::{Deserialize, Serialize};

/// The plugin version a run of `p.{plugin}.{method}` runs, fixed when the
/// run is admitted: publishing a newer version never changes what an
/// admitted run executes, and every attempt of the run fetches the same
/// package and checks the same digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PluginCode {
    /// The plugin's name (`churn` of `p.churn.logit`).
    pub name: String,
    pub version: String,
    /// The method's short name in the manifest (`logit` of `p.churn.logit`).
    pub method: String,
    /// Lowercase hex SHA-256 of the package, checked by the worker before
    /// anything of it runs.
    pub sha256: String,
    /// The package's object key in the data bucket.
    pub object: String,
    /// The base image it runs on (`base-ml`, `base-forecast`, `base-bayes`).
    pub base: String,
    /// The outputs the method writes, by name.
    pub outputs: Vec<String>,
    /// The output holding the fitted model, when a succeeded run is a model version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// What a task of a plugin run needs to run the code (in its bootstrap).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PluginBoot {
    /// Signed GET of the package.
    pub package_url: String,
    /// Lowercase hex SHA-256 the package must have.
    pub sha256: String,
    /// The method's short name in the package's manifest (`logit` of
    /// `p.churn.logit`): the worker reads its entry point, parameters and
    /// outputs from the manifest it verified.
    pub method: String,
    /// Bytes of what the plugin prints that the task logs; the rest is
    /// counted and dropped.
    pub log_limit_bytes: u64,
}
