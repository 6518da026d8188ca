//! What people call a run by: a name, a note, tags and the experiment it
//! belongs to. Changed with `PATCH /v1/runs/{id}`; none of it changes what
//! the run does.

use serde::{Deserialize, Serialize};

/// The most tags a run carries.
pub const MAX_TAGS: usize = 32;
/// The longest name, in characters.
pub const MAX_NAME_CHARS: usize = 200;
/// The longest note, in characters.
pub const MAX_NOTE_CHARS: usize = 4000;
/// The longest tag, in bytes.
pub const MAX_TAG_BYTES: usize = 64;

/// A run's name, note and tags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunLabels {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Sorted, each once.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The project's experiment (a named set of runs) the run is in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub experiment: Option<String>,
}

/// `PATCH /v1/runs/{id}`: each field given replaces the run's; a field left
/// out is kept; `""` clears a name or a note, `[]` the tags.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LabelChange {
    /// 1 to 200 printable characters; `""` clears it.
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^[^\\x00-\\x1F\\x7F-\\x9F]*$", max_length = 200)]
    pub name: Option<String>,
    /// Up to 4,000 characters (new lines allowed); `""` clears it.
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, pattern = "^[^\\x00-\\x08\\x0B-\\x1F\\x7F-\\x9F]*$", max_length = 4000)]
    pub note: Option<String>,
    /// Up to 32 tags, each 1 to 64 of `a-z`, `0-9`, `-`, `_`, `.`, `:`, `=`
    /// (blanks around one are trimmed).
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    #[schema(nullable = false, max_items = 32, value_type = Option<Vec<TagText>>)]
    pub tags: Option<Vec<String>>,
    /// One of the project's experiments; `""` takes the run out of its experiment.
    #[serde(default, deserialize_with = "given", skip_serializing_if = "Option::is_none")]
    #[schema(
        nullable = false,
        pattern = "^[\\x09-\\x0D \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]*([a-z0-9_.-]{1,64})?[\\x09-\\x0D \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]*$"
    )]
    pub experiment: Option<String>,
}

impl LabelChange {
    /// Whether the change names nothing to change.
    pub fn is_empty(&self) -> bool {
        self.name.is_none() && self.note.is_none() && self.tags.is_none() && self.experiment.is_none()
    }

    /// The labels after the change, or what to fix, in words.
    pub fn apply(&self, to: &RunLabels) -> Result<RunLabels, String> {
        let mut out = to.clone();
        if let Some(name) = &self.name {
            let printable = !name.chars().any(char::is_control);
            if name.chars().count() > MAX_NAME_CHARS || !printable {
                return Err(format!("name must be at most {MAX_NAME_CHARS} printable characters"));
            }
            out.name = Some(name.trim().to_owned()).filter(|n| !n.is_empty());
        }
        if let Some(note) = &self.note {
            let printable = !note.chars().any(|c| c.is_control() && c != '\n' && c != '\t');
            if note.chars().count() > MAX_NOTE_CHARS || !printable {
                return Err(format!(
                    "note must be at most {MAX_NOTE_CHARS} characters, without control characters"
                ));
            }
            out.note = Some(note.clone()).filter(|n| !n.trim().is_empty());
        }
        if let Some(tags) = &self.tags {
            let mut tags: Vec<String> = tags.iter().map(|t| t.trim().to_owned()).collect();
            if let Some(bad) = tags.iter().find(|t| !is_tag(t)) {
                let shown: String = bad.chars().take(MAX_TAG_BYTES).collect();
                return Err(format!(
                    "tag `{shown}` is not a tag: 1 to {MAX_TAG_BYTES} of a-z, 0-9, -, _, ., : and ="
                ));
            }
            if tags.len() > MAX_TAGS {
                return Err(format!("a run carries at most {MAX_TAGS} tags, not {}", tags.len()));
            }
            tags.sort();
            tags.dedup();
            out.tags = tags;
        }
        if let Some(experiment) = &self.experiment {
            let experiment = experiment.trim();
            if !experiment.is_empty() && !is_experiment_name(experiment) {
                return Err(experiment_name_rule(experiment));
            }
            out.experiment = Some(experiment.to_owned()).filter(|e| !e.is_empty());
        }
        Ok(out)
    }
}

/// A field that may be left out, but not sent as `null`: leaving it out
/// keeps the run's value, and `null` would say neither.
fn given<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// How the API document states a tag as sent: [`is_tag`] once trimmed of
/// the blanks Rust's `trim` removes.
#[derive(Debug)]
pub struct TagText;

impl TagText {
    pub const PATTERN: &str = "^[\\x09-\\x0D \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]*[a-z0-9_.:=-]{1,64}[\\x09-\\x0D \\u0085\\u00A0\\u1680\\u2000-\\u200A\\u2028\\u2029\\u202F\\u205F\\u3000]*$";
}

impl utoipa::PartialSchema for TagText {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        mapi_domain::schema::string_matching(TagText::PATTERN).into()
    }
}

impl utoipa::ToSchema for TagText {}

/// Whether `t` is a tag: 1 to [`MAX_TAG_BYTES`] of `a-z`, `0-9`, `-`, `_`, `.`, `:`, `=`.
pub fn is_tag(t: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.:=".contains(&b);
    !t.is_empty() && t.len() <= MAX_TAG_BYTES && t.bytes().all(allowed)
}

/// The most params of a run it can be found by (`GET …/runs?param=`).
pub const MAX_PARAM_KEYS: usize = 50;

/// What a run with param `name` set to `value` is found by: `name=value`,
/// the value as JSON writes it (`y=employed`, `alpha=0.1`, `intercept=true`);
/// `None` for a value that is not a string, number or boolean, or a pair
/// longer than 200 bytes.
pub fn param_key(name: &str, value: &serde_json::Value) -> Option<String> {
    let value = match value {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Bool(b) => b.to_string(),
        _ => return None,
    };
    let key = format!("{name}={value}");
    (key.len() <= 200).then_some(key)
}

/// Whether `n` names an experiment (or a saved view): 1 to 64 of `a-z`,
/// `0-9`, `-`, `_`, `.`.
pub fn is_experiment_name(n: &str) -> bool {
    let allowed = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
    !n.is_empty() && n.len() <= 64 && n.bytes().all(allowed)
}

/// Why `n` is not an experiment's name, in words.
pub fn experiment_name_rule(n: &str) -> String {
    let shown: String = n.chars().take(64).collect();
    format!("`{shown}` is not a name: 1 to 64 of a-z, 0-9, -, _ and .")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stated_tag_pattern_is_a_tag_once_trimmed() {
        let re = regex::Regex::new(TagText::PATTERN).expect("compiles");
        let long = "a".repeat(64);
        let too_long = "a".repeat(65);
        for t in [
            "a",
            " a ",
            "\u{a0}j",
            "j\u{3000}",
            "\u{feff}a",
            "a b",
            "",
            " ",
            "A",
            "x=1:y",
            "\u{1c}a",
            &long,
            &too_long,
        ] {
            assert_eq!(re.is_match(t), is_tag(t.trim()), "{t:?}");
        }
    }

    fn change(name: Option<&str>, note: Option<&str>, tags: Option<&[&str]>) -> LabelChange {
        LabelChange {
            name: name.map(str::to_owned),
            note: note.map(str::to_owned),
            tags: tags.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
            experiment: None,
        }
    }

    #[test]
    fn a_param_is_found_by_its_name_and_its_value_as_json_writes_it() {
        use serde_json::json;
        assert_eq!(param_key("y", &json!("employed")).as_deref(), Some("y=employed"));
        assert_eq!(param_key("alpha", &json!(0.1)).as_deref(), Some("alpha=0.1"));
        assert_eq!(param_key("k", &json!(3)).as_deref(), Some("k=3"));
        assert_eq!(param_key("intercept", &json!(false)).as_deref(), Some("intercept=false"));
        assert_eq!(param_key("x", &json!(["a"])), None);
        assert_eq!(param_key("x", &json!("a".repeat(300))), None);
    }

    #[test]
    fn a_run_joins_and_leaves_an_experiment_by_name() {
        let into = |e: &str| LabelChange { experiment: Some(e.to_owned()), ..Default::default() };
        let joined = into("deflator-study").apply(&RunLabels::default()).expect("valid");
        assert_eq!(joined.experiment.as_deref(), Some("deflator-study"));
        assert_eq!(into("").apply(&joined).expect("valid").experiment, None, "\"\" takes it out");
        let e = into("Q3 Study").apply(&joined).expect_err("refused");
        assert!(e.contains("`Q3 Study` is not a name"), "{e}");
    }

    #[test]
    fn a_change_replaces_what_it_names_and_keeps_the_rest() {
        let start = change(Some("baseline"), Some("first try"), Some(&["b", "a", "a"]))
            .apply(&RunLabels::default())
            .expect("valid");
        assert_eq!(start.tags, ["a", "b"], "sorted, each once");
        let renamed = change(Some("  second "), None, None).apply(&start).expect("valid");
        assert_eq!(renamed.name.as_deref(), Some("second"));
        assert_eq!((renamed.note, renamed.tags), (start.note.clone(), start.tags.clone()));
        let cleared = change(Some(""), Some(""), Some(&[])).apply(&start).expect("valid");
        assert_eq!(cleared, RunLabels::default());
    }

    #[test]
    fn bad_labels_are_refused_naming_what_to_fix() {
        let base = RunLabels::default();
        let e = change(None, None, Some(&["Has Space"])).apply(&base).expect_err("refused");
        assert!(e.contains("`Has Space`") && e.contains("a-z"), "{e}");
        let many: Vec<String> = (0..33).map(|i| format!("t{i}")).collect();
        let refs: Vec<&str> = many.iter().map(String::as_str).collect();
        assert!(change(None, None, Some(&refs)).apply(&base).expect_err("refused").contains("at most 32"));
        assert!(change(Some(&"x".repeat(201)), None, None).apply(&base).is_err());
        assert!(change(Some("a\u{7}b"), None, None).apply(&base).is_err());
        assert!(change(None, Some("line one\nline two"), None).apply(&base).is_ok());
        assert!(change(None, None, Some(&["env=prod", "exp:q3", "v1.2"])).apply(&base).is_ok());
    }
}
