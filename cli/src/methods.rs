//! `mapi methods ls|show`: the platform's live method registry
//! (`GET /v1/methods`), with each method's example as a command line that
//! runs as printed.

use std::process::ExitCode;

use clap::Subcommand;
use mapi_api::methods::{MethodExample, MethodInput, MethodList, MethodView, ParamKind, ParamView};
use serde_json::Value;

use crate::client::{Client, segment};
use crate::output::Table;
use crate::output::print;
use crate::webhooks::Where;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const LS_EXAMPLES: &str = "Examples:
  mapi methods ls                      # every method: input, whether it fits a model, summary
  mapi --json methods ls               # the registry as the API returns it";

const SHOW_EXAMPLES: &str = "Examples:
  mapi methods show tabular.linear     # parameters, outputs, and a command to run it
  mapi --json methods show text.stats  # the method as the API returns it";

#[derive(Debug, Subcommand)]
#[command(after_help = format!("{LS_EXAMPLES}\n{}", SHOW_EXAMPLES.trim_start_matches("Examples:")))]
pub enum MethodsCmd {
    /// List every method: what it runs on, whether its runs become model versions, what it does
    /// (with a project chosen, its plugins' methods too).
    #[command(after_help = LS_EXAMPLES)]
    Ls {
        #[command(flatten)]
        at: Where,
    },
    /// Show a method: its parameters, its outputs, and an example to run as printed.
    #[command(after_help = SHOW_EXAMPLES)]
    Show {
        /// The method's name, e.g. tabular.linear or a plugin's p.PLUGIN.METHOD (`mapi methods ls`
        /// lists them).
        name: String,
        #[command(flatten)]
        at: Where,
    },
}

/// Runs `cmd` against `client`; `--json` prints the API's JSON as it came. With a project chosen
/// (`scope` answers one), the project's methods: the built-ins and its plugins'; else the
/// platform's registry.
pub async fn run(
    client: &Client,
    scope: impl Fn(Option<String>, Option<String>) -> Result<(String, String)>,
    cmd: MethodsCmd,
    json: bool,
) -> Result<ExitCode> {
    let base = |at: Where| match scope(at.tenant, at.project) {
        Ok((t, p)) => format!("/v1/tenants/{t}/projects/{p}/methods"),
        Err(_) => "/v1/methods".to_owned(),
    };
    match cmd {
        MethodsCmd::Ls { at } => {
            let list: MethodList = client.get(&base(at)).await?;
            print(json, &list, || table(&list))?;
        }
        MethodsCmd::Show { name, at } => {
            let m: MethodView = client.get(&format!("{}/{}", base(at), segment(&name))).await?;
            print(json, &m, || describe(&m))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn input(i: MethodInput) -> &'static str {
    match i {
        MethodInput::Dataset => "dataset",
        MethodInput::Item => "item",
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

fn table(list: &MethodList) -> String {
    let mut table = Table::new(&["NAME", "INPUT", "MODEL", "SUMMARY"]).flex(&[3]);
    for m in &list.methods {
        table.row(vec![
            m.name.as_str().into(),
            input(m.input).into(),
            yes_no(m.produces_model).into(),
            match &m.unavailable {
                Some(_) => format!("(unavailable here: mapi methods show {}) {}", m.name, m.summary).into(),
                None => m.summary.as_str().into(),
            },
        ]);
    }
    crate::output::listing(&table, "the platform has no methods registered")
}

fn describe(m: &MethodView) -> String {
    let how = match m.input {
        MethodInput::Dataset => "a dataset method: mapi runs submit",
        MethodInput::Item => "an item method: mapi jobs submit",
    };
    let model = match &m.model_file {
        Some(file) if m.produces_model => {
            format!("yes: a succeeded run becomes a model version, which an endpoint serves from {file}")
        }
        _ if m.input == MethodInput::Item => "no: each item has its result only".to_owned(),
        _ => "no: a succeeded run has its outputs only".to_owned(),
    };
    let mut out = format!("{}  ({how})\n{}\nmodel  {model}\n", m.name, m.summary);
    if let Some(why) = &m.unavailable {
        out.push_str(&format!("unavailable  {why}\n"));
    }
    if let Some(p) = &m.plugin {
        out.push_str(&format!(
            "plugin {} {} (sha256 {}): runs only in a sandbox\n",
            p.name, p.version, p.sha256
        ));
    }
    out.push_str(&parameters(&m.params));
    out.push_str("outputs\n");
    if m.outputs.is_empty() {
        out.push_str("  none\n");
    }
    for o in &m.outputs {
        out.push_str(&format!("  {} ({}): {}\n", o.name, o.media_type, o.description));
    }
    out.push_str(match m.input {
        MethodInput::Dataset => {
            "example (DATASET: a dataset's id, as `mapi datasets upload FILE.csv` prints it)\n"
        }
        MethodInput::Item => "example\n",
    });
    for line in example_lines(m) {
        out.push_str(&format!("  {line}\n"));
    }
    out
}

fn kind(k: ParamKind) -> &'static str {
    match k {
        ParamKind::Column => "column",
        ParamKind::AnyColumn => "any_column",
        ParamKind::Columns => "columns",
        ParamKind::Number => "number",
        ParamKind::Integer => "integer",
        ParamKind::Boolean => "boolean",
        ParamKind::Text => "text",
    }
}

/// A parameter's description, with its bounds when it has any.
fn description(p: &ParamView) -> String {
    let bounds = match (p.min, p.max) {
        (Some(min), Some(max)) => format!(" Between {min} and {max}."),
        (Some(min), None) => format!(" At least {min}."),
        (None, Some(max)) => format!(" At most {max}."),
        (None, None) => String::new(),
    };
    format!("{}{bounds}", p.description)
}

fn parameters(params: &[ParamView]) -> String {
    if params.is_empty() {
        return "parameters  none\n".to_owned();
    }
    let mut table = Table::new(&["NAME", "KIND", "REQUIRED", "DEFAULT", "DESCRIPTION"]).flex(&[4]);
    for p in params {
        let default = p.default.as_ref().map_or("-".to_owned(), Value::to_string);
        table.row(vec![
            p.name.as_str().into(),
            kind(p.kind).into(),
            yes_no(p.required).into(),
            default.into(),
            description(p).into(),
        ]);
    }
    let rendered = crate::output::listing(&table, "");
    let indented: String = rendered.lines().map(|l| format!("  {l}\n")).collect();
    format!("parameters\n{indented}")
}

/// `word` as one shell word: as it is when nothing in it is special to a
/// POSIX shell, else in single quotes (a `'` inside written `'\''`).
fn shell_word(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-.,/:@%+=".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// `--param NAME=VALUE` as `mapi runs submit` and `mapi jobs submit` read
/// it back: VALUE as JSON when it parses, else as a string. A string that
/// would parse as JSON (`"true"`, `"3"`) is written as a JSON string.
fn param_flag(name: &str, value: &Value) -> String {
    let text = match value {
        Value::String(s) if serde_json::from_str::<Value>(s).is_err() => s.clone(),
        other => other.to_string(),
    };
    format!("--param {}", shell_word(&format!("{name}={text}")))
}

fn param_flags(example: &MethodExample) -> String {
    example.params.iter().map(|(name, value)| format!(" {}", param_flag(name, value))).collect()
}

/// The example as shell lines that run as printed (against the platform
/// the CLI is configured for; a dataset method's with `DATASET` set).
fn example_lines(m: &MethodView) -> Vec<String> {
    let flags = param_flags(&m.example);
    match (m.input, &m.example.item) {
        (MethodInput::Item, item) => {
            let item = item.as_ref().map_or("{}".to_owned(), Value::to_string);
            vec![
                format!("printf '%s\\n' {} > items.jsonl", shell_word(&item)),
                format!("mapi jobs submit {} --items items.jsonl{flags} --watch", shell_word(&m.name)),
            ]
        }
        (MethodInput::Dataset, _) => vec![format!(
            "mapi runs submit --method {} --dataset \"$DATASET\"{flags} --watch",
            shell_word(&m.name)
        )],
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn params_are_written_as_the_submit_commands_read_them_back() {
        assert_eq!(param_flag("y", &json!("employed")), "--param y=employed");
        assert_eq!(param_flag("x", &json!(["gnp", "population"])), r#"--param 'x=["gnp","population"]'"#);
        assert_eq!(param_flag("intercept", &json!(true)), "--param intercept=true");
        assert_eq!(param_flag("seconds", &json!(5)), "--param seconds=5");
        assert_eq!(param_flag("message", &json!("true")), r#"--param 'message="true"'"#);
        assert_eq!(param_flag("message", &json!("it's")), r"--param 'message=it'\''s'");
        assert_eq!(shell_word(""), "''");
    }
}
