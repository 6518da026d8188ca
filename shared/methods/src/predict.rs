//! Predictions from a fitted model: what a model server answers. A model is
//! loaded from the `model.json` its fit wrote; each input row must name
//! exactly the model's input columns, each a finite number, or the row is
//! refused with the column named.
//!
//! `tabular.linear`: the prediction is `x₀ᵀb`; its standard error (of the
//! fitted mean, asked for with `std_errors`) is `√(x₀ᵀ Σ x₀)` with `Σ` the
//! coefficients' covariance stored by the fit.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::registry::LINEAR;

/// Why a model cannot be loaded or a request answered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PredictError {
    /// The model file is not a model this server can serve.
    #[error("{0}")]
    Model(String),
    /// A request the caller must fix: which row, which column, why.
    #[error("{0}")]
    Input(String),
}

/// One prediction.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub value: f64,
    /// The standard error of the fitted mean, when asked for.
    pub std_error: Option<f64>,
}

/// A model a server can answer with.
#[derive(Debug, Clone, PartialEq)]
pub struct Model {
    method: String,
    response: String,
    intercept: bool,
    inputs: Vec<String>,
    /// With the intercept first when there is one.
    coefficients: Vec<f64>,
    covariance: Vec<Vec<f64>>,
    example: Option<(Map<String, Value>, f64)>,
}

#[derive(Deserialize)]
struct LinearFile {
    method: String,
    y: String,
    intercept: bool,
    x: Vec<String>,
    coefficients: Vec<Coefficient>,
    covariance: Vec<Vec<f64>>,
    example: Option<Example>,
}

#[derive(Deserialize)]
struct Coefficient {
    estimate: f64,
}

#[derive(Deserialize)]
struct Example {
    inputs: Map<String, Value>,
    prediction: f64,
}

impl Model {
    /// Loads a model from its fit's `model.json`.
    pub fn load(bytes: &[u8]) -> Result<Model, PredictError> {
        let method = serde_json::from_slice::<Value>(bytes)
            .ok()
            .and_then(|v| v.get("method").and_then(Value::as_str).map(str::to_owned))
            .ok_or_else(|| PredictError::Model("model.json names no method".into()))?;
        if method != LINEAR {
            return Err(PredictError::Model(format!(
                "method `{method}` makes no servable model; servable: {LINEAR}"
            )));
        }
        let file: LinearFile = serde_json::from_slice(bytes).map_err(|_| {
            PredictError::Model(
                "model.json lacks the fields a server needs (x, coefficients, covariance): \
                 refit with this platform version"
                    .into(),
            )
        })?;
        let p = file.x.len() + usize::from(file.intercept);
        let square = file.covariance.len() == p && file.covariance.iter().all(|r| r.len() == p);
        if file.coefficients.len() != p || !square {
            return Err(PredictError::Model(format!(
                "model.json is inconsistent: {} inputs need {p} coefficients and a {p}×{p} covariance",
                file.x.len()
            )));
        }
        Ok(Model {
            method: file.method,
            response: file.y,
            intercept: file.intercept,
            inputs: file.x,
            coefficients: file.coefficients.iter().map(|c| c.estimate).collect(),
            covariance: file.covariance,
            example: file.example.map(|e| (e.inputs, e.prediction)),
        })
    }

    pub fn method(&self) -> &str {
        &self.method
    }

    /// The column the model predicts.
    pub fn response(&self) -> &str {
        &self.response
    }

    /// The columns every input row must have.
    pub fn inputs(&self) -> &[String] {
        &self.inputs
    }

    /// One row of the fit's data and the fit's own prediction for it.
    pub fn example(&self) -> Option<(&Map<String, Value>, f64)> {
        self.example.as_ref().map(|(m, p)| (m, *p))
    }

    /// Predicts every row; the first bad row refuses the whole request.
    pub fn predict(
        &self,
        rows: &[Map<String, Value>],
        std_errors: bool,
    ) -> Result<Vec<Prediction>, PredictError> {
        let mut out = Vec::with_capacity(rows.len());
        let mut x = Vec::with_capacity(self.coefficients.len());
        for (i, row) in rows.iter().enumerate() {
            self.design_row(i, row, &mut x)?;
            let value: f64 = x.iter().zip(&self.coefficients).map(|(a, b)| a * b).sum();
            if !value.is_finite() {
                return Err(self.out_of_range(i, &x, "prediction"));
            }
            let std_error = match std_errors {
                false => None,
                true => {
                    let quad: f64 = self
                        .covariance
                        .iter()
                        .zip(&x)
                        .map(|(row, xi)| xi * row.iter().zip(&x).map(|(c, xj)| c * xj).sum::<f64>())
                        .sum();
                    // Rounding can leave a quadratic form a hair below zero; an
                    // overflow leaves it infinite or NaN, which is no answer.
                    if !quad.is_finite() {
                        return Err(self.out_of_range(i, &x, "standard error"));
                    }
                    Some(quad.max(0.0).sqrt())
                }
            };
            out.push(Prediction { value, std_error });
        }
        Ok(out)
    }

    /// Row `i`'s `what` is outside a 64-bit float's range: names the input
    /// of the row whose term is largest, the one to bring nearer the data.
    fn out_of_range(&self, i: usize, x: &[f64], what: &str) -> PredictError {
        let skip = usize::from(self.intercept);
        let term = |j: usize| (x[j + skip] * self.coefficients[j + skip]).abs();
        let largest = (0..self.inputs.len()).max_by(|&a, &b| {
            let (ta, tb) = (term(a), term(b));
            ta.partial_cmp(&tb).unwrap_or(if ta.is_nan() {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Less
            })
        });
        match largest {
            Some(j) => PredictError::Input(format!(
                "row {i}: column `{}` ({}) takes the {what} outside the range of a 64-bit float: \
                 send values nearer the model's data",
                self.inputs[j],
                x[j + skip]
            )),
            None => {
                PredictError::Input(format!("row {i}: the {what} is outside the range of a 64-bit float"))
            }
        }
    }

    fn design_row(&self, i: usize, row: &Map<String, Value>, x: &mut Vec<f64>) -> Result<(), PredictError> {
        x.clear();
        if self.intercept {
            x.push(1.0);
        }
        for name in &self.inputs {
            let value = row.get(name).ok_or_else(|| {
                PredictError::Input(format!(
                    "row {i}: column `{name}` is missing; the model's inputs are {}",
                    self.listed()
                ))
            })?;
            match value.as_f64() {
                Some(v) if v.is_finite() => x.push(v),
                _ => {
                    return Err(PredictError::Input(format!(
                        "row {i}: column `{name}` must be a number, not {}",
                        kind(value)
                    )));
                }
            }
        }
        if row.len() != self.inputs.len()
            && let Some(extra) = row.keys().find(|k| !self.inputs.contains(k))
        {
            return Err(PredictError::Input(format!(
                "row {i}: column `{extra}` is not an input of this model; its inputs are {}",
                self.listed()
            )));
        }
        Ok(())
    }

    fn listed(&self) -> String {
        self.inputs.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number out of range",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::fake::{FakeContext, params};

    const DATA: &str = "y,a,b\n3.1,1,0\n4.9,2,1\n7.2,3,1\n8.8,4,0\n11.1,5,2\n12.9,6,1\n";

    fn fitted() -> (Value, Model) {
        let mut ctx = FakeContext::default();
        let outputs =
            crate::run(LINEAR, &params(LINEAR, json!({"y": "y"})), DATA.as_bytes(), &mut ctx).expect("fit");
        let file: Value = serde_json::from_slice(&outputs[0].bytes).expect("json");
        (file, Model::load(&outputs[0].bytes).expect("load"))
    }

    fn row(v: Value) -> Map<String, Value> {
        v.as_object().expect("object").clone()
    }

    #[test]
    fn predictions_are_the_fit_and_standard_errors_come_from_its_covariance() {
        let (file, model) = fitted();
        assert_eq!(model.inputs(), ["a", "b"]);
        let b: Vec<f64> = file["coefficients"]
            .as_array()
            .expect("coefficients")
            .iter()
            .map(|c| c["estimate"].as_f64().expect("estimate"))
            .collect();
        let got = model.predict(&[row(json!({"a": 2.5, "b": 1}))], true).expect("predict");
        let want = b[0] + 2.5 * b[1] + b[2];
        assert!((got[0].value - want).abs() < 1e-12, "{} vs {want}", got[0].value);
        // At x₀ = (1, 0, 0) the standard error of the mean is the intercept's own.
        let at_zero = model.predict(&[row(json!({"a": 0, "b": 0}))], true).expect("predict");
        let se0 = file["coefficients"][0]["std_error"].as_f64().expect("se");
        assert!((at_zero[0].std_error.expect("asked") - se0).abs() < 1e-12);
        assert_eq!(model.predict(&[row(json!({"a": 0, "b": 0}))], false).expect("p")[0].std_error, None);
        let (inputs, prediction) = model.example().expect("example");
        let again = model.predict(std::slice::from_ref(inputs), false).expect("example predicts");
        assert!((again[0].value - prediction).abs() < 1e-9, "the example answers as the fit did");
    }

    #[test]
    fn bad_rows_name_the_row_and_the_column() {
        let (_, model) = fitted();
        let e = model.predict(&[row(json!({"a": 1, "b": 1})), row(json!({"a": 1}))], false);
        assert_eq!(
            e,
            Err(PredictError::Input("row 1: column `b` is missing; the model's inputs are `a`, `b`".into()))
        );
        let e = model.predict(&[row(json!({"a": 1, "b": 1, "c": 0}))], false);
        assert_eq!(
            e,
            Err(PredictError::Input(
                "row 0: column `c` is not an input of this model; its inputs are `a`, `b`".into()
            ))
        );
        let e = model.predict(&[row(json!({"a": "1", "b": 1}))], false);
        assert_eq!(e, Err(PredictError::Input("row 0: column `a` must be a number, not a string".into())));
    }

    #[test]
    fn other_methods_and_old_files_are_refused_with_the_reason() {
        assert!(
            matches!(Model::load(br#"{"method":"describe"}"#), Err(PredictError::Model(m)) if m.contains("servable"))
        );
        assert!(matches!(
            Model::load(br#"{"method":"tabular.linear","y":"y","intercept":true}"#),
            Err(PredictError::Model(m)) if m.contains("refit")
        ));
        assert!(matches!(Model::load(b"not json"), Err(PredictError::Model(_))));
    }

    /// A row whose prediction or standard error overflows is refused, naming
    /// the column that took it there; a prediction is never `null` or an
    /// infinite number, and a standard error never a NaN made 0.
    #[test]
    fn a_prediction_outside_a_floats_range_is_refused_naming_the_column() {
        let (_, model) = fitted();
        // One term past the range, and two finite terms whose sum is past it.
        for sent in [json!({"a": 1e308, "b": 1}), json!({"a": 8.9e307, "b": 1e308})] {
            let e = model.predict(&[row(sent.clone())], false).expect_err("overflow refused");
            let PredictError::Input(detail) = e else { panic!("{sent}: not an input error") };
            assert!(detail.starts_with("row 0: column `a` ("), "{sent}: {detail}");
            assert!(detail.contains("prediction") && detail.contains("64-bit float"), "{detail}");
        }
        // The mean is finite, its quadratic form is not: the standard error is refused too.
        let e = model.predict(&[row(json!({"a": 1e200, "b": 0}))], true).expect_err("refused");
        assert!(
            matches!(&e, PredictError::Input(d) if d.contains("standard error") && d.contains("`a`")),
            "{e:?}"
        );
        assert!(
            model.predict(&[row(json!({"a": 1e200, "b": 0}))], false).is_ok(),
            "without it, a finite answer"
        );
    }
}
