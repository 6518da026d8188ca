//! What a plugin's model version carries so an endpoint can serve it.
//!
//! A succeeded run of a plugin method with a `model` output and a
//! `predict` entry is sealed with two more files in its bundle, beside the
//! run's outputs: [`PACKAGE`], a copy of the plugin's package (so the
//! version serves the code that fitted it, whatever later happens to the
//! plugin), and [`DESCRIPTOR`], a [`Serving`] naming the method and the
//! model artifact. Both are pinned by the bundle's signed manifest like
//! every artifact, so the model server runs only code the platform sealed.
//!
//! The contract with the code: `predict(model, rows)` is called with the
//! model output (parsed when it is `.json`, else its path) and a list of
//! rows (objects of column to value), and returns one JSON value per row.
//! A `ValueError`, `KeyError` or `TypeError` it raises is the caller's
//! mistake (a 400 with its message); anything else is the model's failure.

use serde::{Deserialize, Serialize};

/// The package's copy, under the bundle's prefix.
pub const PACKAGE: &str = "plugin/package.tar";
/// The descriptor, under the bundle's prefix.
pub const DESCRIPTOR: &str = "plugin/serving.json";

/// How to serve a plugin's model version.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Serving {
    /// The plugin's name and version.
    pub plugin: String,
    pub version: String,
    /// The method's short name in the package's manifest.
    pub method: String,
    /// Lowercase hex SHA-256 of [`PACKAGE`].
    pub package_sha256: String,
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
            plugin: "churn".into(),
            version: "1.0.0".into(),
            method: "logit".into(),
            package_sha256: "ab".repeat(32),
            model: "t/a/p/r/attempts/1/outputs/model.json".into(),
            model_name: "model.json".into(),
        };
        assert_eq!(Serving::from_bytes(&s.to_bytes()), Ok(s.clone()));
        let mut extra: serde_json::Value = serde_json::from_slice(&s.to_bytes()).expect("json");
        extra["entry"] = "os:system".into();
        let e = Serving::from_bytes(&serde_json::to_vec(&extra).expect("json")).expect_err("refused");
        assert!(e.contains("unknown field"), "{e}");
    }
}
