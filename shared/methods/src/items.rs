//! Item methods: each runs on one JSON item of an item job, in the process
//! that handles the item's task, and returns one JSON value. They take the
//! same validated [`Params`] as dataset methods (job-wide), and an
//! [`ItemContext`] saying which attempt and round this is.

use mapi_domain::ItemErrorKind;
use std::time::Duration;

use serde_json::{Value, json};

use crate::registry::{self, Input};
use crate::{Params, find, validate};

/// Which try of an item this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItemContext {
    /// 1 for the first delivery of the item in this round.
    pub attempt: u32,
    /// 0 for the job's first pass; `retry-failed` starts the next round.
    pub round: u32,
}

/// Why an item produced no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    /// The item or the params cannot work: retrying will not help.
    #[error("{0}")]
    Input(String),
    /// This attempt failed, a later one may not (the handler retries within its budget).
    #[error("{0}")]
    Transient(String),
    /// This attempt ran past the item timeout; retried as a transient one.
    #[error("{0}")]
    Timeout(String),
}

impl ItemError {
    /// The error's type, as stored in the item's end (`ends/{idx}.json`).
    pub fn kind(&self) -> ItemErrorKind {
        match self {
            ItemError::Input(_) => ItemErrorKind::Input,
            ItemError::Transient(_) => ItemErrorKind::Transient,
            ItemError::Timeout(_) => ItemErrorKind::Timeout,
        }
    }
}

/// Runs item method `method` on `item`. Blocking: the caller runs it off the
/// async threads, under its per-item timeout.
pub fn run_item(method: &str, params: &Params, item: &Value, ctx: ItemContext) -> Result<Value, ItemError> {
    let spec = find(method)
        .filter(|m| m.input == Input::Item)
        .ok_or_else(|| ItemError::Input(format!("`{method}` is not an item method")))?;
    let params = validate(spec, params.as_map()).map_err(|e| ItemError::Input(e.to_string()))?;
    match spec.name {
        registry::ITEM_ECHO => Ok(item.clone()),
        registry::TEXT_STATS => text_stats(&params, item),
        registry::DIAG_ITEM => diag_item(&params, item, ctx),
        other => Err(ItemError::Input(format!("item method `{other}` is registered but not implemented"))),
    }
}

fn text_stats(params: &Params, item: &Value) -> Result<Value, ItemError> {
    let field = params.get_str("field").unwrap_or("text");
    let text = match item {
        Value::String(s) => s.as_str(),
        Value::Object(o) => o.get(field).and_then(Value::as_str).ok_or_else(|| {
            ItemError::Input(format!(
                "the item has no string field `{}`",
                field.chars().take(64).collect::<String>()
            ))
        })?,
        other => {
            return Err(ItemError::Input(format!(
                "the item must be a string or an object, not {}",
                crate::registry::json_type(other)
            )));
        }
    };
    Ok(json!({
        "chars": text.chars().count(),
        "words": text.split_whitespace().count(),
        "lines": text.lines().count(),
    }))
}

fn diag_item(params: &Params, item: &Value, ctx: ItemContext) -> Result<Value, ItemError> {
    let field = |name: &str| item.get(name).and_then(Value::as_u64).unwrap_or(0);
    if let Some(ms) = item.get("sleep_ms").and_then(Value::as_u64) {
        std::thread::sleep(Duration::from_millis(ms.min(600_000)));
    }
    let message = params.get_str("message").unwrap_or("diag.item was asked to fail");
    if u64::from(ctx.round) < field("fail_rounds") {
        return Err(ItemError::Input(message.to_owned()));
    }
    if u64::from(ctx.attempt) <= field("flaky") {
        return Err(ItemError::Transient(format!("{message} (attempt {})", ctx.attempt)));
    }
    Ok(item.clone())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn params(method: &str, v: Value) -> Params {
        let map: BTreeMap<String, Value> = serde_json::from_value(v).expect("object");
        validate(find(method).expect("registered"), &map).expect("valid")
    }

    const FIRST: ItemContext = ItemContext { attempt: 1, round: 0 };

    #[test]
    fn every_item_method_runs_its_example() {
        for m in crate::all().iter().filter(|m| m.input == Input::Item) {
            let item: Value = serde_json::from_str(m.example_item.expect("example item")).expect("JSON");
            let p = params(m.name, serde_json::from_str(m.example).expect("JSON"));
            let ctx = ItemContext { attempt: 2, round: 1 };
            assert!(run_item(m.name, &p, &item, ctx).is_ok(), "{}", m.name);
        }
    }

    #[test]
    fn text_stats_counts() {
        let p = params(registry::TEXT_STATS, json!({}));
        let got = run_item(registry::TEXT_STATS, &p, &json!({"text": "héllo wörld\nbye"}), FIRST);
        assert_eq!(got, Ok(json!({"chars": 15, "words": 3, "lines": 2})));
        let got = run_item(registry::TEXT_STATS, &p, &json!("a b"), FIRST);
        assert_eq!(got, Ok(json!({"chars": 3, "words": 2, "lines": 1})));
        assert!(matches!(run_item(registry::TEXT_STATS, &p, &json!(3), FIRST), Err(ItemError::Input(_))));
        assert!(matches!(run_item(registry::TEXT_STATS, &p, &json!({}), FIRST), Err(ItemError::Input(_))));
    }

    #[test]
    fn diag_item_fails_by_round_and_attempt() {
        let p = params(registry::DIAG_ITEM, json!({"message": "no"}));
        let item = json!({"fail_rounds": 1, "flaky": 1});
        assert_eq!(run_item(registry::DIAG_ITEM, &p, &item, FIRST), Err(ItemError::Input("no".into())));
        let second_round = ItemContext { attempt: 1, round: 1 };
        assert!(matches!(
            run_item(registry::DIAG_ITEM, &p, &item, second_round),
            Err(ItemError::Transient(_))
        ));
        let later = ItemContext { attempt: 2, round: 1 };
        assert_eq!(run_item(registry::DIAG_ITEM, &p, &item, later), Ok(item.clone()));
    }

    #[test]
    fn dataset_methods_are_not_item_methods() {
        let p = params(registry::DIAG_FAIL, json!({}));
        assert!(matches!(run_item(registry::DIAG_FAIL, &p, &json!({}), FIRST), Err(ItemError::Input(_))));
    }
}
