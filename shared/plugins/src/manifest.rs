//! `mapi-plugin.toml`: what a plugin is and the methods it adds.
//!
//! ```toml
//! name = "churn"
//! version = "1.0.0"
//! base = "base-ml"
//! description = "Churn models"
//!
//! [[methods]]
//! name = "logit"
//! summary = "A logistic regression of a 0/1 column"
//! entry = "model:fit"          # module:function, called with a mapi.Context
//! outputs = ["model.json"]
//! model = "model.json"         # optional: the output a model version serves
//! predict = "model:predict"    # optional, with `model`: how endpoints score it
//!
//! [[methods.params]]
//! name = "y"
//! kind = "column"              # column (numeric), any_column, columns, number, integer, boolean, text
//! required = true
//! doc = "The 0/1 column to predict"
//! ```
//!
//! Reading is strict: unknown keys are refused, and every problem names the
//! line it is on, so a publisher can fix the file from the message alone.

use std::collections::BTreeSet;

use mapi_methods::registry::ParamKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toml::Spanned;

/// The manifest's file name, at the package's root.
pub const FILE: &str = "mapi-plugin.toml";

/// The most methods one plugin adds.
pub const MAX_METHODS: usize = 32;
/// The most parameters, and outputs, one method has.
pub const MAX_PARAMS: usize = 32;

/// The base images a plugin may name: those whose Python carries the
/// scientific packages (numpy, pandas, scikit-learn, statsmodels).
pub const BASES: [&str; 3] = ["base-ml", "base-forecast", "base-bayes"];

/// A manifest that read and validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub base: String,
    #[serde(default)]
    pub description: String,
    pub methods: Vec<PluginMethod>,
}

/// One method a plugin adds, run as `p.{plugin}.{name}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginMethod {
    pub name: String,
    #[serde(default)]
    pub summary: String,
    /// `module:function`: the function called with the helper's context.
    pub entry: String,
    #[serde(default)]
    pub params: Vec<PluginParam>,
    /// The files the method writes, by name.
    pub outputs: Vec<String>,
    /// The output holding the fitted model, when a succeeded run is a model version.
    #[serde(default)]
    pub model: Option<String>,
    /// `module:function`: called by an endpoint's model server with the
    /// model (the `model` output, parsed when it is JSON) and a list of rows;
    /// a method without one makes versions that endpoints cannot serve.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predict: Option<String>,
}

/// One parameter of a plugin method, with the built-in registry's schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginParam {
    pub name: String,
    pub kind: ParamKind,
    #[serde(default)]
    pub required: bool,
    #[serde(default)]
    pub default: Option<Value>,
    #[serde(default)]
    pub min: Option<f64>,
    #[serde(default)]
    pub max: Option<f64>,
    #[serde(default)]
    pub doc: String,
}

impl Manifest {
    /// The method `name` (its short name, without `p.{plugin}.`).
    pub fn method(&self, name: &str) -> Option<&PluginMethod> {
        self.methods.iter().find(|m| m.name == name)
    }
}

impl PluginMethod {
    /// The module the entry point is in (`model` for `model:fit`).
    pub fn module(&self) -> &str {
        module_of(&self.entry)
    }

    /// The modules the package must hold: the entry's, and `predict`'s when it has one.
    pub fn modules(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.module()).chain(self.predict.as_deref().map(module_of))
    }
}

fn module_of(entry: &str) -> &str {
    entry.split_once(':').map_or(entry, |(m, _)| m)
}

/// A manifest that does not read or validate: the line (1-based) at fault,
/// when there is one, and what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{FILE}{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
pub struct ManifestError {
    pub line: Option<usize>,
    pub message: String,
}

// The shapes read, with the spans validation points at.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawManifest {
    name: Spanned<String>,
    version: Spanned<String>,
    base: Spanned<String>,
    #[serde(default)]
    description: String,
    #[serde(default)]
    methods: Vec<Spanned<RawMethod>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMethod {
    name: Spanned<String>,
    #[serde(default)]
    summary: String,
    entry: Spanned<String>,
    #[serde(default)]
    params: Vec<Spanned<RawParam>>,
    outputs: Spanned<Vec<String>>,
    #[serde(default)]
    model: Option<Spanned<String>>,
    #[serde(default)]
    predict: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    name: Spanned<String>,
    kind: ParamKind,
    #[serde(default)]
    required: bool,
    #[serde(default)]
    default: Option<Spanned<toml::Value>>,
    #[serde(default)]
    min: Option<f64>,
    #[serde(default)]
    max: Option<f64>,
    #[serde(default)]
    doc: String,
}

/// Reads and validates a manifest's text.
pub fn parse(text: &str) -> Result<Manifest, ManifestError> {
    let at = |span: std::ops::Range<usize>| Some(line_of(text, span.start));
    let raw: RawManifest = toml::from_str(text)
        .map_err(|e| ManifestError { line: e.span().and_then(at), message: first_line(e.message()) })?;
    let fail = |span: std::ops::Range<usize>, message: String| ManifestError { line: at(span), message };
    name_rule(raw.name.get_ref(), 32, true).map_err(|why| fail(raw.name.span(), format!("name {why}")))?;
    version_rule(raw.version.get_ref()).map_err(|why| fail(raw.version.span(), why))?;
    if !BASES.contains(&raw.base.get_ref().as_str()) {
        let why =
            format!("base `{}` is not a base image: use one of {}", raw.base.get_ref(), BASES.join(", "));
        return Err(fail(raw.base.span(), why));
    }
    if raw.methods.is_empty() {
        return Err(ManifestError { line: None, message: "add at least one [[methods]] table".to_owned() });
    }
    if raw.methods.len() > MAX_METHODS {
        let span = raw.methods[MAX_METHODS].span();
        return Err(fail(span, format!("a plugin adds at most {MAX_METHODS} methods")));
    }
    let mut names = BTreeSet::new();
    let mut methods = Vec::with_capacity(raw.methods.len());
    for m in raw.methods {
        let (span, m) = (m.span(), m.into_inner());
        let method = method(m, &fail)?;
        if !names.insert(method.name.clone()) {
            return Err(fail(span, format!("method `{}` is listed twice", method.name)));
        }
        methods.push(method);
    }
    Ok(Manifest {
        name: raw.name.into_inner(),
        version: raw.version.into_inner(),
        base: raw.base.into_inner(),
        description: raw.description,
        methods,
    })
}

type Fail<'a> = dyn Fn(std::ops::Range<usize>, String) -> ManifestError + 'a;

fn method(m: RawMethod, fail: &Fail<'_>) -> Result<PluginMethod, ManifestError> {
    let name = m.name.get_ref().clone();
    name_rule(&name, 32, false).map_err(|why| fail(m.name.span(), format!("method name {why}")))?;
    for (key, entry) in std::iter::once(("entry", &m.entry)).chain(m.predict.iter().map(|p| ("predict", p))) {
        if !entry_rule(entry.get_ref()) {
            let why = format!(
                "{key} `{}` of method `{name}` is not `module:function` (Python identifiers; a module may \
                 not be named mapi…, which is the platform's helper)",
                entry.get_ref()
            );
            return Err(fail(entry.span(), why));
        }
    }
    if let (Some(predict), None) = (&m.predict, &m.model) {
        let why = format!(
            "method `{name}` has a predict entry but no model output: add `model = \"…\"` naming the output \
             predict reads"
        );
        return Err(fail(predict.span(), why));
    }
    let outputs = m.outputs.get_ref().clone();
    if outputs.is_empty() || outputs.len() > MAX_PARAMS {
        let why = format!("method `{name}` declares 1 to {MAX_PARAMS} outputs (the files it writes)");
        return Err(fail(m.outputs.span(), why));
    }
    let mut seen = BTreeSet::new();
    for o in &outputs {
        output_rule(o)
            .map_err(|why| fail(m.outputs.span(), format!("output `{o}` of method `{name}` {why}")))?;
        if !seen.insert(o) {
            return Err(fail(m.outputs.span(), format!("output `{o}` of method `{name}` is listed twice")));
        }
    }
    if let Some(model) = &m.model
        && !outputs.contains(model.get_ref())
    {
        let why = format!("model `{}` of method `{name}` is not one of its outputs", model.get_ref());
        return Err(fail(model.span(), why));
    }
    if m.params.len() > MAX_PARAMS {
        return Err(fail(
            m.params[MAX_PARAMS].span(),
            format!("a method has at most {MAX_PARAMS} parameters"),
        ));
    }
    let mut params = Vec::with_capacity(m.params.len());
    let mut seen = BTreeSet::new();
    for p in m.params {
        let (span, p) = (p.span(), p.into_inner());
        let param = param(p, fail)?;
        if !seen.insert(param.name.clone()) {
            return Err(fail(span, format!("parameter `{}` of method `{name}` is listed twice", param.name)));
        }
        params.push(param);
    }
    Ok(PluginMethod {
        name,
        summary: m.summary,
        entry: m.entry.into_inner(),
        params,
        outputs,
        model: m.model.map(Spanned::into_inner),
        predict: m.predict.map(Spanned::into_inner),
    })
}

/// Whether `entry` is `module:function` of Python identifiers, in a module
/// not named like the platform's helper (`mapi…`).
fn entry_rule(entry: &str) -> bool {
    entry.split_once(':').is_some_and(|(module, function)| {
        !module.is_empty()
            && module.split('.').all(identifier)
            && identifier(function)
            && !module.starts_with("mapi")
    })
}

fn param(p: RawParam, fail: &Fail<'_>) -> Result<PluginParam, ManifestError> {
    let name = p.name.get_ref().clone();
    name_rule(&name, 64, false).map_err(|why| fail(p.name.span(), format!("parameter name {why}")))?;
    let bounded = matches!(p.kind, ParamKind::Number | ParamKind::Integer);
    let bounds_ok = [p.min, p.max].iter().flatten().all(|x| x.is_finite())
        && p.min.zip(p.max).is_none_or(|(lo, hi)| lo <= hi);
    if (p.min.is_some() || p.max.is_some()) && (!bounded || !bounds_ok) {
        let why =
            format!("parameter `{name}`: min and max are finite bounds, min ≤ max, of a number or integer");
        return Err(fail(p.name.span(), why));
    }
    let default = match p.default {
        None => None,
        Some(d) => {
            let span = d.span();
            let value = serde_json::to_value(d.into_inner())
                .map_err(|e| fail(span.clone(), format!("default of parameter `{name}`: {e}")))?;
            let probe = PluginParam {
                name: name.clone(),
                kind: p.kind,
                required: false,
                default: None,
                min: p.min,
                max: p.max,
                doc: String::new(),
            };
            mapi_methods::validate_with(
                "the manifest",
                std::slice::from_ref(&probe),
                &[(name.clone(), value.clone())].into(),
            )
            .map_err(|e| fail(span, format!("default of parameter `{name}`: {e}")))?;
            Some(value)
        }
    };
    if p.required && default.is_some() {
        return Err(fail(
            p.name.span(),
            format!("parameter `{name}` is required and has a default: keep one"),
        ));
    }
    Ok(PluginParam { name, kind: p.kind, required: p.required, default, min: p.min, max: p.max, doc: p.doc })
}

impl mapi_methods::ParamSchema for PluginParam {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> ParamKind {
        self.kind
    }
    fn required(&self) -> bool {
        self.required
    }
    fn default_value(&self) -> Option<Value> {
        self.default.clone()
    }
    fn min(&self) -> Option<f64> {
        self.min
    }
    fn max(&self) -> Option<f64> {
        self.max
    }
}

/// Whether `s` can be a plugin's name.
pub fn is_plugin_name(s: &str) -> bool {
    name_rule(s, 32, true).is_ok()
}

/// Whether `s` can be a plugin's version (`MAJOR.MINOR.PATCH`).
pub fn is_version(s: &str) -> bool {
    version_rule(s).is_ok()
}

/// Lowercase ASCII letters, digits and `_` (and `-` in a plugin's name),
/// starting with a letter, at most `max` long.
fn name_rule(s: &str, max: usize, dash: bool) -> Result<(), String> {
    let ok = s.len() <= max
        && s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || (dash && c == '-'));
    let allowed = if dash { "letters, digits, `_` and `-`" } else { "letters, digits and `_`" };
    if ok {
        Ok(())
    } else {
        Err(format!("`{s}` must be 1 to {max} lowercase {allowed}, starting with a letter"))
    }
}

/// `MAJOR.MINOR.PATCH`, each a number without leading zeros.
fn version_rule(s: &str) -> Result<(), String> {
    let parts: Vec<&str> = s.split('.').collect();
    let number = |p: &&str| {
        !p.is_empty()
            && p.len() <= 9
            && p.bytes().all(|b| b.is_ascii_digit())
            && (*p == "0" || !p.starts_with('0'))
    };
    if parts.len() == 3 && parts.iter().all(number) {
        Ok(())
    } else {
        Err(format!("version `{s}` is not MAJOR.MINOR.PATCH (e.g. 1.0.0)"))
    }
}

/// An output's file name: a plain name, no directories.
fn output_rule(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 100
        && !s.starts_with('.')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok { Ok(()) } else { Err("must be a file name of letters, digits, `.`, `_` and `-`".to_owned()) }
}

fn identifier(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|b| **b == b'\n').count() + 1
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or(s).trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"name = "churn"
version = "1.2.0"
base = "base-ml"

[[methods]]
name = "logit"
entry = "model:fit"
outputs = ["model.json", "coef.csv"]
model = "model.json"
predict = "serving:predict"

[[methods.params]]
name = "y"
kind = "column"
required = true

[[methods.params]]
name = "c"
kind = "number"
default = 1.0
min = 0.0001
"#;

    #[test]
    fn a_good_manifest_reads() {
        let m = parse(GOOD).expect("reads");
        assert_eq!((m.name.as_str(), m.version.as_str(), m.base.as_str()), ("churn", "1.2.0", "base-ml"));
        let logit = m.method("logit").expect("logit");
        assert_eq!(logit.module(), "model");
        assert_eq!(logit.model.as_deref(), Some("model.json"));
        assert_eq!(logit.modules().collect::<Vec<_>>(), ["model", "serving"]);
        assert_eq!(logit.params[1].default, Some(serde_json::json!(1.0)));
    }

    fn error(text: &str) -> ManifestError {
        parse(text).expect_err("refused")
    }

    #[test]
    fn each_problem_names_its_line() {
        let cases: [(&str, &str, usize, &str); 10] = [
            ("name = \"churn\"", "name = \"Churn\"", 1, "lowercase"),
            ("version = \"1.2.0\"", "version = \"1.2\"", 2, "MAJOR.MINOR.PATCH"),
            ("base = \"base-ml\"", "base = \"ubuntu\"", 3, "not a base image"),
            ("entry = \"model:fit\"", "entry = \"mapi:fit\"", 7, "not `module:function`"),
            ("model = \"model.json\"", "model = \"other.json\"", 9, "not one of its outputs"),
            ("predict = \"serving:predict\"", "predict = \"serving\"", 10, "predict `serving` of method"),
            ("model = \"model.json\"\n", "", 9, "no model output"),
            ("kind = \"column\"", "kind = \"matrix\"", 14, "unknown variant"),
            ("default = 1.0", "default = \"high\"", 20, "must be a number"),
            ("min = 0.0001", "min = 0.0001\ncolour = 3", 22, "unknown field `colour`"),
        ];
        for (from, to, line, says) in cases {
            let e = error(&GOOD.replacen(from, to, 1));
            assert_eq!(e.line, Some(line), "{to}: {e}");
            assert!(e.message.contains(says), "{to}: {e}");
            assert!(e.to_string().starts_with(&format!("mapi-plugin.toml line {line}: ")), "{e}");
        }
    }

    #[test]
    fn methods_and_params_are_listed_once() {
        let twice =
            format!("{GOOD}\n[[methods]]\nname = \"logit\"\nentry = \"m:f\"\noutputs = [\"a.json\"]\n");
        assert!(error(&twice).message.contains("method `logit` is listed twice"));
        let no_methods = "name = \"a\"\nversion = \"1.0.0\"\nbase = \"base-ml\"\n";
        assert!(error(no_methods).message.contains("at least one [[methods]]"));
        let required_default = GOOD.replacen("required = true", "required = true\ndefault = \"y\"", 1);
        assert!(error(&required_default).message.contains("required and has a default"));
    }
}
