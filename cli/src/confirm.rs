//! Asking before a command replaces or destroys something.
//!
//! The command says what will change, then asks on the terminal; `--yes` goes ahead without
//! asking (for scripts). Without a terminal to ask on and without `--yes`, nothing is changed:
//! a script that forgot `--yes` fails instead of replacing a policy unseen.

use std::io::{BufRead, IsTerminal, Write};

use crate::error::Result;

/// Shows `change` (what will happen, one or more lines) and asks to go ahead, unless `yes`.
///
/// # Errors
///
/// When the person answers anything but `y`/`yes`, or nobody can be asked.
pub fn confirm(change: &str, yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    let stdin = std::io::stdin();
    let asked = ask(change, stdin.is_terminal(), &mut stdin.lock(), &mut std::io::stderr())?;
    if asked { Ok(()) } else { Err("nothing changed".into()) }
}

fn ask(change: &str, terminal: bool, input: &mut dyn BufRead, out: &mut dyn Write) -> Result<bool> {
    writeln!(out, "{}", change.trim_end())?;
    if !terminal {
        return Err("not confirmed: add --yes to go ahead (there is no terminal to ask on)".into());
    }
    write!(out, "Go ahead? [y/N] ")?;
    out.flush()?;
    let mut answer = String::new();
    input.read_line(&mut answer)?;
    Ok(matches!(answer.trim().to_ascii_lowercase().as_str(), "y" | "yes"))
}

/// `before → after` lines for the fields that change, in `fields` order; `None` for a field
/// falls back to what `fallback` names (a tier's default, say).
pub fn diff(
    fields: &[&str],
    before: &serde_json::Value,
    after: &serde_json::Value,
    fallback: &str,
) -> Vec<String> {
    let shown = |v: &serde_json::Value| match v {
        serde_json::Value::Null => fallback.to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    fields
        .iter()
        .filter(|f| before[**f] != after[**f])
        .map(|f| format!("  {f}: {} → {}", shown(&before[*f]), shown(&after[*f])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_yes_goes_ahead_and_nothing_is_asked_without_a_terminal() {
        let run = |terminal: bool, answer: &str| {
            let mut out = Vec::new();
            let r = ask("replace the policy", terminal, &mut answer.as_bytes(), &mut out);
            (r.map_err(|e| e.to_string()), String::from_utf8(out).expect("utf-8"))
        };
        assert_eq!(run(true, "y\n").0, Ok(true));
        assert_eq!(run(true, "YES\n").0, Ok(true));
        assert_eq!(run(true, "\n").0, Ok(false), "the default is no");
        assert_eq!(run(true, "sure\n").0, Ok(false));
        let (refused, shown) = run(false, "y\n");
        assert!(refused.expect_err("no terminal").contains("--yes"));
        assert!(shown.starts_with("replace the policy"), "what would change is shown first: {shown}");
        assert!(confirm("x", true).is_ok(), "--yes asks nothing");
    }

    #[test]
    fn a_diff_names_each_changed_field_and_what_it_falls_back_to() {
        let before = json!({"concurrent_runs": 40, "vcpu_seconds_per_day": 1000, "note": "beta"});
        let after = json!({"concurrent_runs": 20, "vcpu_seconds_per_day": 1000});
        let lines = diff(&["concurrent_runs", "vcpu_seconds_per_day", "note"], &before, &after, "the tier's");
        assert_eq!(lines, ["  concurrent_runs: 40 → 20", "  note: beta → the tier's"]);
    }
}
