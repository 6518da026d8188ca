//! What a model version served by Python carries, so an endpoint's model
//! server can run its `predict`.
//!
//! A succeeded run of a Python method that makes a model (a plugin's
//! method with `predict`, or one of the platform's own Python methods) is
//! sealed with a serving descriptor, [`DESCRIPTOR`], beside its outputs:
//! a [`Serving`] naming the code ([`ServedCode`]) and the model artifact. A
//! plugin's version also carries [`PACKAGE`], a copy of the plugin's
//! package, so it serves the code that fitted it whatever later happens to
//! the plugin. Both are pinned by the bundle's signed manifest like every
//! artifact, so a model server runs only code the platform sealed.
//!
//! The contract with the code: `predict(model, rows)` is called with the
//! model output (parsed when it is `.json`, else its path) and a list of
//! rows (objects of column to value), and returns one JSON value per row.
//! A `ValueError`, `KeyError` or `TypeError` it raises is the caller's
//! mistake (a 400 with its message); anything else is the model's failure.

use serde::{Deserialize, Serialize};

/// The plugin package's copy, under the bundle's prefix.
pub const PACKAGE: &str = "plugin/package.tar";
/// The descriptor, under the bundle's prefix.
pub const DESCRIPTOR: &str = "plugin/serving.json";

/// Whose code serves the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ServedCode {
    /// A plugin's method: its package is [`PACKAGE`]; it runs only in a sandbox.
    Plugin {
        plugin: String,
        version: String,
        /// The method's short name in the package's manifest.
        method: String,
        /// Lowercase hex SHA-256 of [`PACKAGE`].
        package_sha256: String,
    },
    /// One of the platform's own Python methods, by its registry name: the
    /// server runs its `predict` from the code it was built with.
    Builtin { method: String },
}

/// How to serve a model version with Python.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Serving {
    pub code: ServedCode,
    /// The model output's object key (an artifact of the bundle).
    pub model: String,
    /// The model output's name (`model.json`): a `.json` one is parsed for `predict`.
    pub model_name: String,
}

impl Serving {
    /// The descriptor's bytes as sealed (compact JSON, so a retried seal writes the same bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Reads a descriptor.
    ///
    /// # Errors
    ///
    /// In words, when the bytes are not one.
    pub fn from_bytes(bytes: &[u8]) -> Result<Serving, String> {
        serde_json::from_slice(bytes).map_err(|e| format!("{DESCRIPTOR} is not a serving descriptor: {e}"))
    }

    /// The method's full name (`p.churn.logit`, `sklearn.logistic_regression`).
    pub fn method_name(&self) -> String {
        match &self.code {
            ServedCode::Plugin { plugin, method, .. } => format!("p.{plugin}.{method}"),
            ServedCode::Builtin { method } => method.clone(),
        }
    }
}

/// The key of `file` ([`PACKAGE`] or [`DESCRIPTOR`]) in the bundle at `prefix`.
pub fn key(prefix: &str, file: &str) -> String {
    format!("{prefix}/{file}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_descriptor_reads_back_and_refuses_strangers() {
        let s = Serving {
            code: ServedCode::Plugin {
                plugin: "churn".into(),
                version: "1.0.0".into(),
                method: "logit".into(),
                package_sha256: "ab".repeat(32),
            },
            model: "t/a/p/r/attempts/1/outputs/model.json".into(),
            model_name: "model.json".into(),
        };
        assert_eq!(Serving::from_bytes(&s.to_bytes()), Ok(s.clone()));
        assert_eq!(s.method_name(), "p.churn.logit");
        let mut extra: serde_json::Value = serde_json::from_slice(&s.to_bytes()).expect("json");
        extra["entry"] = "os:system".into();
        let e = Serving::from_bytes(&serde_json::to_vec(&extra).expect("json")).expect_err("refused");
        assert!(e.contains("unknown field"), "{e}");
        let builtin =
            Serving { code: ServedCode::Builtin { method: "sklearn.logistic_regression".into() }, ..s };
        assert_eq!(Serving::from_bytes(&builtin.to_bytes()), Ok(builtin.clone()));
        assert_eq!(builtin.method_name(), "sklearn.logistic_regression");
    }
}
