//! The methods the worker runs on a dataset, and their registry.
//!
//! [`registry`] describes every method's parameters and outputs as data, so
//! the API server can validate a submitted spec (and generate docs) without
//! running anything. [`run`] executes a method: the worker hands it the
//! dataset's bytes and a [`Context`] for progress, metrics and checkpoints,
//! and gets the output files back as bytes. Nothing here does I/O.

mod describe;
mod diag;
pub mod fold;
pub mod items;
mod linear;
mod numerics;
pub mod predict;
pub mod registry;
pub mod table;

pub use items::{ItemContext, ItemError, run_item};
pub use registry::{
    FanOut, Fold, Input, MethodSpec, ModelSpec, OutputSpec, Package, ParamError, ParamKind, ParamSchema,
    ParamSpec, Params, PythonCode, all, check_columns, check_columns_with, fan_out, find, produces_model,
    python_packages, python_unavailable, registry_version, validate, validate_with,
};
pub use table::{Limits, Shape, Table, TableError};

/// What a running method can ask of the worker that runs it.
pub trait Context {
    /// How far the run has got, `fraction` in `[0, 1]`, with a short note.
    fn progress(&mut self, fraction: f64, message: &str);
    /// A named number worth recording, e.g. `r_squared`.
    fn metric(&mut self, name: &str, value: f64);
    /// Persists `state` so a later attempt can resume from it.
    fn checkpoint(&mut self, state: &serde_json::Value) -> Result<(), String>;
    /// The last checkpoint an earlier attempt of this run flushed.
    fn resume_from(&self) -> Option<serde_json::Value>;
    /// Whether the run should stop soon (the supervisor got SIGTERM).
    fn stop_requested(&self) -> bool;
}

/// One output file of a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// One of the method's [`OutputSpec`] names.
    pub name: &'static str,
    pub bytes: Vec<u8>,
}

/// Why a run produced no outputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    /// Bad params or data found while running; the message says what to fix.
    #[error("{0}")]
    Input(String),
    /// The method saw [`Context::stop_requested`] and returned early.
    /// `checkpointed`: a checkpoint was flushed just before returning.
    #[error("stopped on request (checkpoint saved: {checkpointed})")]
    Stopped { checkpointed: bool },
}

/// Runs `method` on `dataset`. The params are validated again against the
/// method (so params validated for another method are refused); `describe`
/// and `tabular.linear` parse the dataset as CSV and check the columns they
/// name, the `diag.*` methods ignore it.
pub fn run(
    method: &str,
    params: &Params,
    dataset: &[u8],
    ctx: &mut dyn Context,
) -> Result<Vec<Output>, MethodError> {
    let spec = find(method).ok_or_else(|| {
        let known: Vec<_> = all().iter().map(|m| format!("`{}`", m.name)).collect();
        MethodError::Input(format!("unknown method `{method}`: known methods are {}", known.join(", ")))
    })?;
    let params = validate(spec, params.as_map()).map_err(|e| MethodError::Input(e.to_string()))?;
    match spec.name {
        registry::DESCRIBE => describe::run(&params, &load(spec, &params, dataset, ctx)?, ctx),
        registry::LINEAR => linear::run(&params, &load(spec, &params, dataset, ctx)?, ctx),
        registry::DIAG_SLEEP => diag::sleep(&params, ctx),
        registry::DIAG_FAIL => diag::fail(&params, ctx),
        registry::DIAG_ALLOC => diag::alloc(&params, ctx),
        other => Err(MethodError::Input(format!("method `{other}` is not a dataset method"))),
    }
}

/// Parses the dataset and checks the columns the params name.
fn load(
    spec: &MethodSpec,
    params: &Params,
    dataset: &[u8],
    ctx: &mut dyn Context,
) -> Result<Table, MethodError> {
    let table = Table::from_csv(dataset).map_err(|e| MethodError::Input(format!("dataset: {e}")))?;
    check_columns(spec, params, table.column_names(), &|c| table.is_numeric(c))
        .map_err(|e| MethodError::Input(e.to_string()))?;
    ctx.progress(0.1, &format!("parsed {} rows and {} columns", table.rows(), table.column_names().len()));
    Ok(table)
}

/// A param the registry marks required (and validation guarantees), or an error naming it.
fn required<T>(value: Option<T>, name: &str) -> Result<T, MethodError> {
    value.ok_or_else(|| MethodError::Input(format!("parameter `{name}` is required")))
}

/// A JSON output file, pretty-printed. Non-finite numbers become `null`.
fn json_output(name: &'static str, value: &serde_json::Value) -> Output {
    Output { name, bytes: format!("{value:#}\n").into_bytes() }
}

/// Test helpers: a [`Context`] double that records everything and can ask to
/// stop, and validated params from JSON.
#[cfg(test)]
mod fake {
    use std::cell::Cell;
    use std::collections::BTreeMap;

    use serde_json::Value;

    use crate::{Params, find, validate};

    pub(crate) fn params(method: &str, value: Value) -> Params {
        let map: BTreeMap<String, Value> = serde_json::from_value(value).expect("a JSON object");
        validate(find(method).expect("registered"), &map).expect("valid params")
    }

    #[derive(Debug, Default)]
    pub(crate) struct FakeContext {
        pub progress: Vec<(f64, String)>,
        pub metrics: Vec<(String, f64)>,
        pub checkpoints: Vec<Value>,
        pub resume: Option<Value>,
        /// Ask to stop once `stop_requested` has been called this many times.
        pub stop_after: Option<usize>,
        pub fail_checkpoints: bool,
        pub stop_checks: Cell<usize>,
    }

    impl crate::Context for FakeContext {
        fn progress(&mut self, fraction: f64, message: &str) {
            assert!((0.0..=1.0).contains(&fraction), "progress {fraction} out of [0, 1]");
            self.progress.push((fraction, message.to_string()));
        }

        fn metric(&mut self, name: &str, value: f64) {
            self.metrics.push((name.to_string(), value));
        }

        fn checkpoint(&mut self, state: &Value) -> Result<(), String> {
            if self.fail_checkpoints {
                return Err("the store is down".to_string());
            }
            self.checkpoints.push(state.clone());
            Ok(())
        }

        fn resume_from(&self) -> Option<Value> {
            self.resume.clone()
        }

        fn stop_requested(&self) -> bool {
            self.stop_checks.set(self.stop_checks.get() + 1);
            self.stop_after.is_some_and(|n| self.stop_checks.get() > n)
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::fake::{FakeContext, params};

    #[test]
    fn every_registered_method_is_implemented() {
        let minimal = [
            (registry::DESCRIBE, json!({})),
            (registry::LINEAR, json!({"y": "y"})),
            (registry::DIAG_SLEEP, json!({"seconds": 0})),
            (registry::DIAG_FAIL, json!({})),
            (registry::DIAG_ALLOC, json!({"mib": 1, "hold_s": 0})),
        ];
        // The Python methods run in the worker's Python child (their tests are worker/python/tests).
        let in_rust = all().iter().filter(|m| m.input == registry::Input::Dataset && m.python.is_none());
        assert_eq!(minimal.len(), in_rust.count());
        for (method, value) in minimal {
            let mut ctx = FakeContext::default();
            let result = run(method, &params(method, value), b"y,x\n1,1\n2,3\n3,2\n4,5\n", &mut ctx);
            let spec = find(method).expect("registered");
            match result {
                Ok(outputs) => {
                    let names: Vec<_> = outputs.iter().map(|o| o.name).collect();
                    let declared: Vec<_> = spec.outputs.iter().map(|o| o.name).collect();
                    assert_eq!(names, declared, "{method}");
                    for o in &outputs {
                        serde_json::from_slice::<Value>(&o.bytes).expect("outputs are JSON");
                    }
                }
                Err(e) => assert_eq!(method, registry::DIAG_FAIL, "{method} failed: {e}"),
            }
            assert!(!ctx.progress.is_empty(), "{method} reports progress");
        }
    }

    #[test]
    fn run_refuses_unknown_methods_foreign_params_and_bad_datasets() {
        let mut ctx = FakeContext::default();
        let p = params(registry::DIAG_FAIL, json!({}));
        let err = run("tabular.logit", &p, b"", &mut ctx).expect_err("unknown method");
        assert!(err.to_string().starts_with("unknown method `tabular.logit`: known methods are `describe`"));
        // Params validated for diag.fail carry `message`, which diag.sleep does not know.
        let err = run(registry::DIAG_SLEEP, &p, b"", &mut ctx).expect_err("foreign params");
        assert!(err.to_string().starts_with("unknown parameter `message` for method `diag.sleep`"));
        let describe = params(registry::DESCRIBE, json!({}));
        let err = run(registry::DESCRIBE, &describe, b"a,b\n1\n", &mut ctx).expect_err("ragged");
        assert_eq!(err, MethodError::Input("dataset: line 2 has 1 fields but the header has 2".into()));
        let linear = params(registry::LINEAR, json!({"y": "z"}));
        let err = run(registry::LINEAR, &linear, b"a,b\n1,2\n", &mut ctx).expect_err("no column z");
        assert_eq!(
            err.to_string(),
            "column `z` (parameter `y`) is not in the dataset: available columns are `a`, `b`"
        );
        assert_eq!(
            MethodError::Stopped { checkpointed: true }.to_string(),
            "stopped on request (checkpoint saved: true)"
        );
    }
}
