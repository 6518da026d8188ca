//! The method registry: every method the worker can run, its parameters and
//! output files described as data (for validation and generated docs), and
//! the checks that turn a submitted params object into validated [`Params`].

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::Value;

pub mod dl;
mod parents;
mod python;
pub use parents::{FanOut, Fold};
pub use python::{Package, PythonCode, packages as python_packages, unavailable as python_unavailable};

/// `describe`: summary statistics of numeric columns.
pub const DESCRIBE: &str = "describe";
/// `tabular.linear`: ordinary least squares.
pub const LINEAR: &str = "tabular.linear";
/// `diag.sleep`: sleeps, checkpointing and honouring stop requests.
pub const DIAG_SLEEP: &str = "diag.sleep";
/// `diag.fail`: fails with an input error.
pub const DIAG_FAIL: &str = "diag.fail";
/// `diag.alloc`: allocates and holds memory.
pub const DIAG_ALLOC: &str = "diag.alloc";
/// `item.echo`: returns the item (item jobs).
pub const ITEM_ECHO: &str = "item.echo";
/// `text.stats`: counts characters, words and lines of an item's text (item jobs).
pub const TEXT_STATS: &str = "text.stats";
/// `diag.item`: an item method that fails or sleeps as the item says (item jobs).
pub const DIAG_ITEM: &str = "diag.item";

/// What a method runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Input {
    /// A run's dataset (a CSV), in an execution.
    Dataset,
    /// One JSON item of an item job, in the process that handles the item's task.
    Item,
}

/// The JSON shape a parameter takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ParamKind {
    /// One column name (a JSON string) of a numeric column.
    Column,
    /// One column name whose cells may be text (class labels, dates, ids).
    AnyColumn,
    /// A non-empty array of distinct column names.
    Columns,
    /// A finite JSON number.
    Number,
    /// An integral JSON number (`3` or `3.0`).
    Integer,
    /// `true` or `false`.
    Boolean,
    /// A JSON string.
    Text,
}

impl ParamKind {
    /// What a value of this kind looks like, as used in error messages.
    pub fn expected(self) -> &'static str {
        match self {
            ParamKind::Column | ParamKind::AnyColumn => "a column name (a string)",
            ParamKind::Columns => "an array of column names",
            ParamKind::Number => "a number",
            ParamKind::Integer => "an integer",
            ParamKind::Boolean => "true or false",
            ParamKind::Text => "a string",
        }
    }
}

/// One parameter of a method.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ParamSpec {
    pub name: &'static str,
    pub kind: ParamKind,
    pub required: bool,
    /// The value used when the parameter is absent (or null), as a JSON literal.
    pub default: Option<&'static str>,
    /// Inclusive lower bound for `Number` and `Integer`.
    pub min: Option<f64>,
    /// Inclusive upper bound for `Number` and `Integer`.
    pub max: Option<f64>,
    pub doc: &'static str,
}

/// One file a method writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct OutputSpec {
    /// The file name, e.g. `model.json`.
    pub name: &'static str,
    pub media_type: &'static str,
    pub doc: &'static str,
}

/// The model a method fits: a succeeded run of the method is sealed into a
/// model version, which endpoints serve by loading `file`
/// ([`crate::predict`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ModelSpec {
    /// The output holding the fitted model: one of the method's `outputs`.
    pub file: &'static str,
}

/// A method the worker can run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct MethodSpec {
    pub name: &'static str,
    pub summary: &'static str,
    pub params: &'static [ParamSpec],
    pub outputs: &'static [OutputSpec],
    /// The model the method fits. `None`: a succeeded run has its outputs
    /// and no model version (a summary, a diagnostic, an item method).
    pub model: Option<ModelSpec>,
    /// Example params, as a JSON object.
    pub example: &'static str,
    pub input: Input,
    /// For item methods: an example item, as JSON.
    pub example_item: Option<&'static str>,
    /// `Some`: the method is a fan-out parent (its run's tasks are its children).
    pub fan_out: Option<FanOut>,
    /// `Some`: the method is Python on the base image's libraries; `None`: Rust, in the worker.
    pub python: Option<PythonCode>,
}

impl MethodSpec {
    /// The parameter called `name`, if the method has one.
    pub fn param(&self, name: &str) -> Option<&'static ParamSpec> {
        self.params.iter().find(|p| p.name == name)
    }

    /// How many children a run of this fan-out parent has with `params`
    /// (validated), `None` for any other method.
    pub fn children(&self, params: &Params) -> Option<u32> {
        let fan = self.fan_out?;
        params.get_i64(fan.children).and_then(|n| u32::try_from(n).ok())
    }

    /// Whether a succeeded run of the method becomes a model version.
    pub fn produces_model(&self) -> bool {
        self.model.is_some()
    }
}

const JSON: &str = "application/json";

const fn param(name: &'static str, kind: ParamKind, doc: &'static str) -> ParamSpec {
    ParamSpec { name, kind, required: false, default: None, min: None, max: None, doc }
}

static METHODS: [MethodSpec; 21] = [
    MethodSpec {
        name: DESCRIBE,
        summary: "Summary statistics (count, missing, mean, standard deviation, quartiles) of numeric columns.",
        params: &[param(
            "columns",
            ParamKind::Columns,
            "Numeric columns to summarise. Default: every numeric column.",
        )],
        outputs: &[OutputSpec {
            name: "summary.json",
            media_type: JSON,
            doc: "`rows`, one entry per summarised column in `columns` (count, missing, mean, std, min, \
                  q25, median, q75, max; quartiles interpolate linearly, like numpy and R type 7), and \
                  the names of the text columns in `text_columns`.",
        }],
        model: None,
        example: r#"{"columns": ["gnp", "population"]}"#,
        input: Input::Dataset,
        example_item: None,
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: LINEAR,
        summary: "Ordinary least squares regression (Householder QR) with standard errors, t tests, R² and F.",
        params: &[
            ParamSpec { required: true, ..param("y", ParamKind::Column, "The response column.") },
            param(
                "x",
                ParamKind::Columns,
                "Predictor columns. Default: every numeric column other than `y`.",
            ),
            ParamSpec {
                default: Some("true"),
                ..param("intercept", ParamKind::Boolean, "Whether to fit an intercept.")
            },
        ],
        outputs: &[OutputSpec {
            name: "model.json",
            media_type: JSON,
            doc: "Coefficients with standard errors, t values and two-sided p-values; R², adjusted R², \
                  residual standard error and degrees of freedom; the F statistic and its p-value; rows \
                  used and rows dropped for missing values.",
        }],
        model: Some(ModelSpec { file: "model.json" }),
        example: r#"{"y": "employed", "x": ["gnp", "population"], "intercept": true}"#,
        input: Input::Dataset,
        example_item: None,
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: DIAG_SLEEP,
        summary: "Diagnostic: sleeps, reporting progress, optionally checkpointing, and stops when asked.",
        params: &[
            ParamSpec {
                required: true,
                min: Some(0.0),
                max: Some(86_400.0),
                ..param("seconds", ParamKind::Number, "Total time to sleep, across attempts.")
            },
            ParamSpec {
                min: Some(0.001),
                max: Some(86_400.0),
                ..param(
                    "checkpoint_every_s",
                    ParamKind::Number,
                    "When set, checkpoint the elapsed time at this interval and when asked to stop, \
                     and resume from the last checkpoint on a later attempt.",
                )
            },
            ParamSpec {
                default: Some("0.5"),
                min: Some(0.0),
                max: Some(86_400.0),
                ..param(
                    "progress_every_s",
                    ParamKind::Number,
                    "Interval between progress reports (0 = every 50 ms tick).",
                )
            },
        ],
        outputs: &[OutputSpec {
            name: "result.json",
            media_type: JSON,
            doc: "`slept_s` (the total across attempts), `resumed_from_s` (0 on a first attempt) and \
                  `this_attempt_s`.",
        }],
        model: None,
        example: r#"{"seconds": 5, "checkpoint_every_s": 1}"#,
        input: Input::Dataset,
        example_item: None,
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: DIAG_FAIL,
        summary: "Diagnostic: reports progress once, then fails with an input error.",
        params: &[ParamSpec {
            default: Some(r#""diag.fail was asked to fail""#),
            ..param("message", ParamKind::Text, "The error message to fail with.")
        }],
        outputs: &[],
        model: None,
        example: r#"{"message": "expected failure"}"#,
        input: Input::Dataset,
        example_item: None,
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: DIAG_ALLOC,
        summary: "Diagnostic: allocates memory (every page touched), holds it, then releases it.",
        params: &[
            ParamSpec {
                required: true,
                min: Some(1.0),
                max: Some(65_536.0),
                ..param("mib", ParamKind::Integer, "MiB to allocate, in 1 MiB chunks.")
            },
            ParamSpec {
                default: Some("1"),
                min: Some(0.0),
                max: Some(3_600.0),
                ..param("hold_s", ParamKind::Number, "Seconds to hold the memory before finishing.")
            },
        ],
        outputs: &[OutputSpec {
            name: "result.json",
            media_type: JSON,
            doc: "`allocated_mib` and `pages_touched` (4 KiB pages written and read back).",
        }],
        model: None,
        example: r#"{"mib": 64, "hold_s": 2}"#,
        input: Input::Dataset,
        example_item: None,
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: ITEM_ECHO,
        summary: "Returns the item unchanged: the trivial method, for measuring the job pipeline.",
        params: &[],
        outputs: &[OutputSpec { name: "result.json", media_type: JSON, doc: "The item itself." }],
        model: None,
        example: "{}",
        input: Input::Item,
        example_item: Some(r#"{"id": 1, "text": "hello"}"#),
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: TEXT_STATS,
        summary: "Counts the characters, words and lines of a text: the item itself when it is a string, \
                  else its field named by `field`.",
        params: &[ParamSpec {
            default: Some(r#""text""#),
            ..param("field", ParamKind::Text, "The field of an object item that holds the text.")
        }],
        outputs: &[OutputSpec {
            name: "result.json",
            media_type: JSON,
            doc: "`chars` (Unicode scalar values), `words` (runs of non-whitespace) and `lines`.",
        }],
        model: None,
        example: r#"{"field": "text"}"#,
        input: Input::Item,
        example_item: Some(r#"{"text": "two words\nand a line"}"#),
        fan_out: None,
        python: None,
    },
    MethodSpec {
        name: DIAG_ITEM,
        summary: "Diagnostic item method: an object item with `fail_rounds: n` fails (for good) in its first n \
                  rounds (retry-failed starts a new round), `flaky: n` fails transiently on its first n \
                  attempts, `sleep_ms: n` sleeps; otherwise it returns the item.",
        params: &[ParamSpec {
            default: Some(r#""diag.item was asked to fail""#),
            ..param("message", ParamKind::Text, "The error message of a failing item.")
        }],
        outputs: &[OutputSpec { name: "result.json", media_type: JSON, doc: "The item itself." }],
        model: None,
        example: "{}",
        input: Input::Item,
        example_item: Some(r#"{"fail_rounds": 1, "flaky": 1, "sleep_ms": 10}"#),
        fan_out: None,
        python: None,
    },
    python::LOGISTIC,
    python::RANDOM_FOREST,
    python::GRADIENT_BOOSTING,
    python::ETS,
    python::ARIMA,
    python::DID,
    python::ITS,
    python::MMM,
    python::CURVE_FIT,
    dl::MLP,
    dl::CNN,
    parents::BACKTEST,
    parents::SBC,
];

/// Every registered method.
pub fn all() -> &'static [MethodSpec] {
    &METHODS
}

/// The method called `name`.
pub fn find(name: &str) -> Option<&'static MethodSpec> {
    METHODS.iter().find(|m| m.name == name)
}

/// How a run of the method called `name` fans out, when it is a fan-out
/// parent (plugin methods never are).
pub fn fan_out(name: &str) -> Option<FanOut> {
    find(name).and_then(|m| m.fan_out)
}

/// Whether a succeeded run of the method called `name` becomes a model
/// version. A name the registry does not hold (a method since removed)
/// produces none: there is no model file to serve from its outputs.
pub fn produces_model(name: &str) -> bool {
    find(name).is_some_and(MethodSpec::produces_model)
}

/// The registry's version: a hash of everything it describes (names,
/// parameters, outputs, examples), so any change to a method's contract
/// changes it. `/manifest` reports it.
pub fn registry_version() -> String {
    let described = serde_json::to_string(&METHODS[..]).unwrap_or_default();
    // FNV-1a, 64 bits: stable across builds and platforms.
    let hash = described
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    format!("r{hash:016x}")
}

/// Validated params of one method, with defaults filled in.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Params(BTreeMap<String, Value>);

impl Params {
    pub fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name)
    }

    pub fn get_f64(&self, name: &str) -> Option<f64> {
        self.get(name).and_then(Value::as_f64)
    }

    pub fn get_i64(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(Value::as_i64)
    }

    pub fn get_bool(&self, name: &str) -> Option<bool> {
        self.get(name).and_then(Value::as_bool)
    }

    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(Value::as_str)
    }

    /// A `Columns` param as names; `None` when absent.
    pub fn get_columns(&self, name: &str) -> Option<Vec<String>> {
        let items = self.get(name)?.as_array()?;
        items.iter().map(|v| v.as_str().map(str::to_string)).collect()
    }

    /// The validated params as a JSON map, e.g. to store with the run.
    pub fn as_map(&self) -> &BTreeMap<String, Value> {
        &self.0
    }

    pub fn into_map(self) -> BTreeMap<String, Value> {
        self.0
    }
}

/// Params that do not fit a method. Each message says what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ParamError {
    #[error("unknown parameter `{name}` for method `{method}`: known parameters are {known}")]
    Unknown { method: String, name: String, known: String },
    #[error("parameter `{name}` is required by method `{method}`")]
    Missing { method: String, name: String },
    #[error("parameter `{name}` must be {expected}, not {got}")]
    WrongType { name: String, expected: &'static str, got: String },
    #[error("parameter `{name}` is {value} but must be {allowed}")]
    OutOfRange { name: String, value: f64, allowed: String },
    #[error("parameter `{name}` must name at least one column")]
    NoColumns { name: String },
    #[error("parameter `{name}` names column `{column}` twice: list each column once")]
    RepeatedColumn { name: String, column: String },
    #[error(
        "column `{column}` (parameter `{name}`) is not in the dataset: available columns are {available}"
    )]
    UnknownColumn { name: String, column: String, available: String },
    #[error(
        "column `{column}` (parameter `{name}`) is not numeric: every non-missing cell must be a number \
         (missing cells may be empty, NA, NaN or null)"
    )]
    TextColumn { name: String, column: String },
    #[error("parameter `{name}`: {why}")]
    Invalid { name: String, why: String },
}

/// A method's parameter as validation sees it: the registry's [`ParamSpec`]
/// and a plugin manifest's parameter alike.
pub trait ParamSchema {
    fn name(&self) -> &str;
    fn kind(&self) -> ParamKind;
    fn required(&self) -> bool;
    /// The value used when the parameter is absent (or null).
    fn default_value(&self) -> Option<Value>;
    /// Inclusive bounds for `Number` and `Integer`.
    fn min(&self) -> Option<f64>;
    fn max(&self) -> Option<f64>;
}

impl ParamSchema for ParamSpec {
    fn name(&self) -> &str {
        self.name
    }
    fn kind(&self) -> ParamKind {
        self.kind
    }
    fn required(&self) -> bool {
        self.required
    }
    fn default_value(&self) -> Option<Value> {
        self.default.map(|literal| {
            serde_json::from_str(literal)
                .expect("registry defaults are JSON literals (checked by the registry tests)")
        })
    }
    fn min(&self) -> Option<f64> {
        self.min
    }
    fn max(&self) -> Option<f64> {
        self.max
    }
}

/// Checks `params` against `spec` and fills in defaults. A JSON `null` counts
/// as absent. Integers given as `3.0` are stored as `3`.
pub fn validate(spec: &MethodSpec, params: &BTreeMap<String, Value>) -> Result<Params, ParamError> {
    validate_with(spec.name, spec.params, params)
}

/// [`validate`] against any parameters' schema (`method` names the method in messages).
pub fn validate_with<P: ParamSchema>(
    method: &str,
    schema: &[P],
    params: &BTreeMap<String, Value>,
) -> Result<Params, ParamError> {
    if let Some(name) = params.keys().find(|k| !schema.iter().any(|p| p.name() == k.as_str())) {
        let known =
            if schema.is_empty() { "none".to_string() } else { quoted_list(schema.iter().map(|p| p.name())) };
        return Err(ParamError::Unknown { method: method.to_owned(), name: name.clone(), known });
    }
    let mut out = BTreeMap::new();
    for p in schema {
        let value = match (params.get(p.name()).filter(|v| !v.is_null()), p.default_value()) {
            (Some(v), _) => v.clone(),
            (None, Some(default)) => default,
            (None, None) if p.required() => {
                return Err(ParamError::Missing { method: method.to_owned(), name: p.name().to_owned() });
            }
            (None, None) => continue,
        };
        out.insert(p.name().to_string(), check_value(p, value)?);
    }
    Ok(Params(out))
}

fn check_value(p: &impl ParamSchema, value: Value) -> Result<Value, ParamError> {
    let name = || p.name().to_owned();
    let wrong = |got: String| ParamError::WrongType { name: name(), expected: p.kind().expected(), got };
    match p.kind() {
        ParamKind::Column | ParamKind::AnyColumn | ParamKind::Text => match value {
            Value::String(_) => Ok(value),
            other => Err(wrong(json_type(&other))),
        },
        ParamKind::Boolean => match value {
            Value::Bool(_) => Ok(value),
            other => Err(wrong(json_type(&other))),
        },
        ParamKind::Columns => {
            let Value::Array(items) = &value else { return Err(wrong(json_type(&value))) };
            if items.is_empty() {
                return Err(ParamError::NoColumns { name: name() });
            }
            let mut seen = BTreeSet::new();
            for item in items {
                let Value::String(column) = item else {
                    return Err(wrong(format!("an array holding {}", json_type(item))));
                };
                if !seen.insert(column) {
                    return Err(ParamError::RepeatedColumn { name: name(), column: column.clone() });
                }
            }
            Ok(value)
        }
        ParamKind::Number => {
            let Some(x) = value.as_f64() else {
                return Err(wrong(json_type(&value)));
            };
            check_range(p, x)?;
            Ok(value)
        }
        ParamKind::Integer => {
            let Some(x) = value.as_f64() else {
                return Err(wrong(json_type(&value)));
            };
            if x.fract() != 0.0 {
                return Err(wrong(format!("{x}")));
            }
            check_range(p, x)?;
            match value.as_i64() {
                Some(i) => Ok(Value::from(i)),
                // Integral floats are exact up to 2^53.
                None if x.abs() <= 9_007_199_254_740_992.0 => Ok(Value::from(x as i64)),
                None => Err(wrong(format!("{x}, which is too large"))),
            }
        }
    }
}

fn check_range(p: &impl ParamSchema, x: f64) -> Result<(), ParamError> {
    let (min, max) = (p.min(), p.max());
    let allowed = match (min, max) {
        (Some(min), Some(max)) => format!("between {min} and {max}"),
        (Some(min), None) => format!("at least {min}"),
        (None, Some(max)) => format!("at most {max}"),
        (None, None) => return Ok(()),
    };
    if min.is_some_and(|min| x < min) || max.is_some_and(|max| x > max) {
        return Err(ParamError::OutOfRange { name: p.name().to_owned(), value: x, allowed });
    }
    Ok(())
}

pub(crate) fn json_type(value: &Value) -> String {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
    .to_string()
}

/// `` `a`, `b`, `c` ``, cut after 20 names.
fn quoted_list<'a>(names: impl ExactSizeIterator<Item = &'a str>) -> String {
    const SHOWN: usize = 20;
    let total = names.len();
    let mut list = names.take(SHOWN).map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
    if total > SHOWN {
        list.push_str(&format!(" and {} more", total - SHOWN));
    }
    list
}

/// Checks that every `Column`/`Columns` param names a column of the dataset,
/// and a numeric one (`numeric` says which are).
pub fn check_columns(
    spec: &MethodSpec,
    params: &Params,
    table_columns: &[String],
    numeric: &dyn Fn(&str) -> bool,
) -> Result<(), ParamError> {
    check_columns_with(spec.params, params, table_columns, numeric)
}

/// [`check_columns`] against any parameters' schema.
pub fn check_columns_with<P: ParamSchema>(
    schema: &[P],
    params: &Params,
    table_columns: &[String],
    numeric: &dyn Fn(&str) -> bool,
) -> Result<(), ParamError> {
    for p in schema {
        let named = match p.kind() {
            ParamKind::Column | ParamKind::AnyColumn => params.get_str(p.name()).map(|c| vec![c.to_string()]),
            ParamKind::Columns => params.get_columns(p.name()),
            _ => None,
        };
        let any = p.kind() == ParamKind::AnyColumn;
        for column in named.unwrap_or_default() {
            if !table_columns.contains(&column) {
                let available = if table_columns.is_empty() {
                    "none".to_string()
                } else {
                    quoted_list(table_columns.iter().map(String::as_str))
                };
                return Err(ParamError::UnknownColumn { name: p.name().to_owned(), column, available });
            }
            if !any && !numeric(&column) {
                return Err(ParamError::TextColumn { name: p.name().to_owned(), column });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn map(value: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(value).expect("a JSON object")
    }

    fn spec(name: &str) -> &'static MethodSpec {
        find(name).expect("registered method")
    }

    fn check(name: &str, params: Value) -> Result<Params, ParamError> {
        validate(spec(name), &map(params))
    }

    #[test]
    fn registry_is_well_formed() {
        let names: Vec<_> = all().iter().filter(|m| m.python.is_none()).map(|m| m.name).collect();
        assert_eq!(
            names,
            [DESCRIBE, LINEAR, DIAG_SLEEP, DIAG_FAIL, DIAG_ALLOC, ITEM_ECHO, TEXT_STATS, DIAG_ITEM],
            "the methods in Rust"
        );
        let items: Vec<_> = all().iter().filter(|m| m.input == Input::Item).map(|m| m.name).collect();
        assert_eq!(items, [ITEM_ECHO, TEXT_STATS, DIAG_ITEM]);
        assert!(all().iter().all(|m| m.example_item.is_some() == (m.input == Input::Item)));
        let models: Vec<_> =
            all().iter().filter(|m| m.produces_model() && m.python.is_none()).map(|m| m.name).collect();
        assert_eq!(models, [LINEAR], "the Rust methods whose runs become model versions");
        assert!(produces_model(LINEAR) && !produces_model(DESCRIBE) && !produces_model("tabular.nope"));
        assert!(registry_version().starts_with('r') && registry_version().len() == 17);
        for m in all() {
            assert!(!m.summary.is_empty(), "{}", m.name);
            let params: BTreeSet<_> = m.params.iter().map(|p| p.name).collect();
            assert_eq!(params.len(), m.params.len(), "{}: duplicate param", m.name);
            let outputs: BTreeSet<_> = m.outputs.iter().map(|o| o.name).collect();
            assert_eq!(outputs.len(), m.outputs.len(), "{}: duplicate output", m.name);
            for o in m.outputs {
                assert!(o.name.contains('.') && !o.name.contains('/'), "{}: {}", m.name, o.name);
                assert!(!o.media_type.is_empty() && !o.doc.is_empty(), "{}: {}", m.name, o.name);
            }
            if let Some(model) = m.model {
                assert_eq!(m.input, Input::Dataset, "{}: only a run seals a model", m.name);
                assert!(outputs.contains(model.file), "{}: the model file is an output", m.name);
            }
            for p in m.params {
                let ctx = format!("{}.{}", m.name, p.name);
                // Letters and `_` (capitals where the library's own name has them: `C`, `P`, `D`, `Q`);
                // `dl.backend`, the one parameter placement rewrites, keeps its namespaced name.
                let plain = p.name.bytes().all(|b| b.is_ascii_alphabetic() || b == b'_');
                assert!(plain || p.name == dl::BACKEND_PARAM, "{ctx}");
                assert!(!p.doc.is_empty(), "{ctx}");
                assert!(!(p.required && p.default.is_some()), "{ctx}: required with a default");
                if let (Some(min), Some(max)) = (p.min, p.max) {
                    assert!(min <= max, "{ctx}");
                }
                if p.min.is_some() || p.max.is_some() {
                    assert!(matches!(p.kind, ParamKind::Number | ParamKind::Integer), "{ctx}");
                }
                if let Some(literal) = p.default {
                    let value: Value = serde_json::from_str(literal).expect("default is a JSON literal");
                    assert_eq!(check_value(p, value.clone()), Ok(value), "{ctx}: default fits its kind");
                }
            }
            let example = map(serde_json::from_str(m.example).expect("example is JSON"));
            let validated = validate(m, &example).expect("example validates");
            for p in m.params.iter().filter(|p| p.default.is_some()) {
                assert!(validated.get(p.name).is_some(), "{}.{}: default filled", m.name, p.name);
            }
        }
        assert!(find("tabular.nope").is_none());
        let docs = serde_json::to_value(all()).expect("specs serialize");
        assert_eq!(docs[1]["params"][0]["kind"], "column");
    }

    #[test]
    fn defaults_are_filled_and_values_kept() {
        let p = check(LINEAR, json!({"y": "a", "x": ["b", "c"]})).expect("valid");
        assert_eq!(p.get_str("y"), Some("a"));
        assert_eq!(p.get_columns("x"), Some(vec!["b".to_string(), "c".to_string()]));
        assert_eq!(p.get_bool("intercept"), Some(true));
        let p = check(DIAG_ALLOC, json!({"mib": 2.0, "hold_s": null})).expect("valid");
        assert_eq!(p.get_i64("mib"), Some(2));
        assert_eq!(p.get("mib"), Some(&json!(2)));
        assert_eq!(p.get_f64("hold_s"), Some(1.0));
        let p = check(DIAG_FAIL, json!({})).expect("valid");
        assert_eq!(p.get_str("message"), Some("diag.fail was asked to fail"));
        let p = check(DESCRIBE, json!({})).expect("valid");
        assert_eq!(p.get_columns("columns"), None);
        assert_eq!(p.as_map().len(), 0);
        // Validation is idempotent: the worker re-validates stored params.
        let once = check(DIAG_SLEEP, json!({"seconds": 1})).expect("valid");
        assert_eq!(validate(spec(DIAG_SLEEP), once.as_map()), Ok(once.clone()));
        assert_eq!(
            serde_json::to_value(&once).expect("serializes"),
            json!({"seconds": 1, "progress_every_s": 0.5})
        );
    }

    #[test]
    fn unknown_and_missing_params() {
        let err = check(LINEAR, json!({"y": "a", "intercpt": false})).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown parameter `intercpt` for method `tabular.linear`: known parameters are `y`, `x`, `intercept`"
        );
        let err = check(LINEAR, json!({"x": ["a"]})).expect_err("missing");
        assert_eq!(err, ParamError::Missing { method: LINEAR.into(), name: "y".into() });
        assert_eq!(err.to_string(), "parameter `y` is required by method `tabular.linear`");
        let err = check(DIAG_SLEEP, json!({"seconds": null})).expect_err("null is absent");
        assert!(matches!(&err, ParamError::Missing { name, .. } if name == "seconds"));
    }

    #[test]
    fn wrong_types() {
        let cases = [
            (LINEAR, json!({"y": 3}), "parameter `y` must be a column name (a string), not a number"),
            (
                LINEAR,
                json!({"y": "a", "x": "b"}),
                "parameter `x` must be an array of column names, not a string",
            ),
            (
                LINEAR,
                json!({"y": "a", "x": ["b", 1]}),
                "parameter `x` must be an array of column names, not an array holding a number",
            ),
            (
                LINEAR,
                json!({"y": "a", "intercept": "yes"}),
                "parameter `intercept` must be true or false, not a string",
            ),
            (DIAG_SLEEP, json!({"seconds": "5"}), "parameter `seconds` must be a number, not a string"),
            (DIAG_ALLOC, json!({"mib": 1.5}), "parameter `mib` must be an integer, not 1.5"),
            (DIAG_ALLOC, json!({"mib": true}), "parameter `mib` must be an integer, not a boolean"),
            (DIAG_FAIL, json!({"message": ["x"]}), "parameter `message` must be a string, not an array"),
            (LINEAR, json!({"y": "a", "x": []}), "parameter `x` must name at least one column"),
            (
                DESCRIBE,
                json!({"columns": ["a", "b", "a"]}),
                "parameter `columns` names column `a` twice: list each column once",
            ),
        ];
        for (method, params, message) in cases {
            let err = check(method, params.clone()).expect_err("refused");
            assert_eq!(err.to_string(), message, "{method} {params}");
        }
    }

    #[test]
    fn ranges_are_inclusive() {
        assert!(check(DIAG_SLEEP, json!({"seconds": 0})).is_ok());
        assert!(check(DIAG_SLEEP, json!({"seconds": 86400})).is_ok());
        let err = check(DIAG_SLEEP, json!({"seconds": 86400.5})).expect_err("too long");
        assert_eq!(err.to_string(), "parameter `seconds` is 86400.5 but must be between 0 and 86400");
        let err = check(DIAG_SLEEP, json!({"seconds": -1})).expect_err("negative");
        assert!(matches!(&err, ParamError::OutOfRange { name, .. } if name == "seconds"));
        let err =
            check(DIAG_SLEEP, json!({"seconds": 1, "checkpoint_every_s": 0})).expect_err("zero interval");
        assert!(matches!(&err, ParamError::OutOfRange { name, .. } if name == "checkpoint_every_s"));
        let err = check(DIAG_ALLOC, json!({"mib": 0})).expect_err("zero");
        assert_eq!(err.to_string(), "parameter `mib` is 0 but must be between 1 and 65536");
        assert!(check(DIAG_ALLOC, json!({"mib": 65537})).is_err());
        assert!(check(DIAG_ALLOC, json!({"mib": 65536, "hold_s": 0})).is_ok());
        assert!(check(DIAG_ALLOC, json!({"mib": 1u64 << 63})).is_err());
    }

    #[test]
    fn columns_must_exist_and_be_numeric() {
        let columns = ["a".to_string(), "b".to_string(), "name".to_string()];
        let numeric = |c: &str| c != "name";
        let linear = spec(LINEAR);
        let ok = check(LINEAR, json!({"y": "a", "x": ["b"]})).expect("valid");
        assert_eq!(check_columns(linear, &ok, &columns, &numeric), Ok(()));
        let missing = check(LINEAR, json!({"y": "a", "x": ["b", "c"]})).expect("valid");
        let err = check_columns(linear, &missing, &columns, &numeric).expect_err("no column c");
        assert_eq!(
            err.to_string(),
            "column `c` (parameter `x`) is not in the dataset: available columns are `a`, `b`, `name`"
        );
        let text = check(LINEAR, json!({"y": "name"})).expect("valid");
        let err = check_columns(linear, &text, &columns, &numeric).expect_err("text column");
        assert_eq!(err, ParamError::TextColumn { name: "y".into(), column: "name".into() });
        assert!(err.to_string().starts_with("column `name` (parameter `y`) is not numeric"));
        let many: Vec<String> = (0..25).map(|i| format!("c{i}")).collect();
        let err = check_columns(linear, &ok, &many, &numeric).expect_err("no column a");
        assert!(err.to_string().ends_with("`c19` and 5 more"), "{err}");
    }
}
