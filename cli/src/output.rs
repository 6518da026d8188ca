//! Writing to standard output, for every command.
//!
//! - A reader that goes away (`mapi api GET /openapi.json | head -1`) ends the command quietly
//!   with status 141 (128 + SIGPIPE), as Unix tools end, rather than a panic.
//! - Machine output is JSON or YAML (`--output json|yaml`; `--json` is `--output json`), chosen
//!   once for the process by [`set_format`]; people get tables and sentences.
//! - Colour only on a terminal, and never when `NO_COLOR` is set (<https://no-color.org>) or
//!   `TERM=dumb`.
//! - Tables fit the terminal: columns marked flexible are cut (with `…`) until the table fits.

use std::io::{ErrorKind, IsTerminal, Write};
use std::sync::OnceLock;

use crate::error::Result;

mod table;

pub use table::{Cell, Table};

/// The status a command ends with when its reader closed the pipe.
pub const CLOSED_PIPE: i32 = 141;

/// How results are printed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Tables and sentences, for people.
    #[default]
    Table,
    Json,
    Yaml,
}

static FORMAT: OnceLock<Format> = OnceLock::new();

/// Chooses the machine format for the process (the first call wins).
pub fn set_format(format: Format) {
    let _ = FORMAT.set(format);
}

fn format() -> Format {
    FORMAT.get().copied().unwrap_or_default()
}

/// Writes `text` to standard output as it is.
pub fn write(text: &str) -> Result<()> {
    write_bytes(text.as_bytes())
}

/// Writes `bytes` to standard output as they are.
pub fn write_bytes(bytes: &[u8]) -> Result<()> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == ErrorKind::BrokenPipe => std::process::exit(CLOSED_PIPE),
        other => Ok(other?),
    }
}

/// Writes `text` and a newline.
pub fn line(text: &str) -> Result<()> {
    write(&format!("{text}\n"))
}

/// Prints `value` in the machine format when `machine` (JSON unless YAML was asked for), else
/// the human text.
pub fn print<T: serde::Serialize>(machine: bool, value: &T, human: impl FnOnce() -> String) -> Result<()> {
    if !machine {
        return write(&human());
    }
    match format() {
        // From the value itself, so its fields come in the order the JSON has them (`id` first).
        Format::Yaml => write(&serde_norway::to_string(value)?),
        Format::Json | Format::Table => line(&serde_json::to_string_pretty(value)?),
    }
}

/// One record of a stream printed as it comes (`runs logs -f`): a JSON
/// line, or under `--output yaml` one item of a YAML sequence, so the whole
/// stream is one document in the format asked for.
pub fn record<T: serde::Serialize>(value: &T) -> Result<()> {
    match format() {
        Format::Yaml => write(&yaml_item(&serde_norway::to_string(value)?)),
        Format::Json | Format::Table => line(&serde_json::to_string(value)?),
    }
}

/// A YAML mapping as an item of a sequence: `- ` before its first line,
/// its other lines indented to match.
fn yaml_item(mapping: &str) -> String {
    let mut item = String::new();
    for (i, l) in mapping.trim_end().lines().enumerate() {
        item.push_str(if i == 0 { "- " } else { "  " });
        item.push_str(l);
        item.push('\n');
    }
    item
}

/// A table, or, when it has no rows, `empty` alone (what to do to have some), never a header
/// over nothing.
pub fn listing(table: &Table, empty: &str) -> String {
    if table.is_empty() { format!("{empty}\n") } else { table.render(terminal_width(), colour()) }
}

/// The terminal's width when standard output is one.
pub(crate) fn terminal_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    let from_env = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    from_env.or_else(|| terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)))
}

/// The terminal's width when standard error is one (where `watch` draws).
pub(crate) fn stderr_width() -> Option<usize> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let from_env = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok());
    from_env.or_else(|| terminal_size::terminal_size_of(std::io::stderr()).map(|(w, _)| usize::from(w.0)))
}

/// Whether standard output gets colour.
pub fn colour() -> bool {
    colour_for(std::io::stdout().is_terminal(), std::env::var_os("NO_COLOR"), std::env::var_os("TERM"))
}

fn colour_for(
    terminal: bool,
    no_color: Option<std::ffi::OsString>,
    term: Option<std::ffi::OsString>,
) -> bool {
    terminal && no_color.is_none_or(|v| v.is_empty()) && term.is_none_or(|t| t != "dumb")
}

/// The colours the CLI uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Good,
    Bad,
    Busy,
    Waiting,
    Dim,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Style::Good => "32",
            Style::Bad => "31",
            Style::Busy => "36",
            Style::Waiting => "33",
            Style::Dim => "2",
        }
    }

    /// `text` in this style when `on`.
    pub fn paint(self, text: &str, on: bool) -> String {
        if on { format!("\x1b[{}m{text}\x1b[0m", self.code()) } else { text.to_owned() }
    }

    /// The style of a run's, job's or endpoint's state.
    pub fn of_state(state: &str) -> Option<Style> {
        match state {
            "succeeded" | "ready" | "active" | "completed" => Some(Style::Good),
            "failed" | "partial" | "deleting" | "suspended" => Some(Style::Bad),
            "running" | "dispatching" | "deploying" | "promoting" => Some(Style::Busy),
            "queued" | "cancelling" | "pending" => Some(Style::Waiting),
            "cancelled" | "deleted" => Some(Style::Dim),
            _ => None,
        }
    }
}

/// A size for people: `812 bytes`, `3.3 KiB`, `1.5 MiB` (JSON output keeps the exact bytes).
pub fn size(bytes: u64) -> String {
    mapi_api::words::size(bytes)
}

/// How long ago `then` was, for people (`just now`, `4 min ago`, `3 h ago`, `2 days ago`; the
/// date past a month). JSON output keeps the exact time.
pub fn ago(then: mapi_domain::Timestamp) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX));
    ago_at(then, now)
}

fn ago_at(then: mapi_domain::Timestamp, now_micros: i64) -> String {
    let secs = (now_micros - then.as_micros()) / 1_000_000;
    match secs {
        s if s < 0 => then.to_string(),
        0..10 => "just now".to_owned(),
        s @ 10..60 => format!("{s} s ago"),
        s @ 60..3600 => format!("{} min ago", s / 60),
        s @ 3600..86_400 => format!("{} h ago", s / 3600),
        s @ 86_400..2_592_000 => format!("{} days ago", s / 86_400),
        _ => then.to_string().chars().take(10).collect(),
    }
}

/// An amount of micro-units of `currency`, as people read it.
pub(crate) fn money(micros: i64, currency: &str) -> String {
    mapi_cost::format_micros(micros, currency)
}

/// `s` cut to `n` characters, with `…` when it was longer.
pub(crate) fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(n - 1).collect::<String>())
    }
}

#[cfg(test)]
mod yaml_tests {
    #[test]
    fn a_streamed_record_is_an_item_of_one_yaml_sequence() {
        let item = super::yaml_item("task: 0\nstream: stdout\ntext: 'a: b'\n");
        assert_eq!(item, "- task: 0\n  stream: stdout\n  text: 'a: b'\n");
        let two = format!("{item}{item}");
        let read: Vec<serde_json::Value> = serde_norway::from_str(&two).expect("one YAML sequence");
        assert_eq!(read.len(), 2);
        assert_eq!(read[1]["text"], "a: b");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_listing_says_what_to_do_instead_of_a_bare_header() {
        let table = Table::new(&["ID"]);
        assert_eq!(listing(&table, "no runs yet: mapi runs submit …"), "no runs yet: mapi runs submit …\n");
        let mut table = Table::new(&["ID"]);
        table.row(vec!["r1".into()]);
        assert_eq!(listing(&table, "none"), "ID\nr1\n");
    }

    #[test]
    fn sizes_are_said_in_binary_units() {
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(3424), "3.3 KiB");
        assert_eq!(size(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(size(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn times_are_said_relative_to_now_and_exact_when_old_or_ahead() {
        let t = mapi_domain::Timestamp::from_secs(1_800_000_000);
        let at = |secs: i64| ago_at(t, (1_800_000_000 + secs) * 1_000_000);
        assert_eq!(at(3), "just now");
        assert_eq!(at(42), "42 s ago");
        assert_eq!(at(5 * 60 + 7), "5 min ago");
        assert_eq!(at(3 * 3600), "3 h ago");
        assert_eq!(at(2 * 86_400 + 5), "2 days ago");
        assert_eq!(at(90 * 86_400), "2027-01-15");
        assert_eq!(at(-30), t.to_string(), "a clock behind the server's shows the exact time");
    }

    #[test]
    fn colour_is_for_terminals_without_no_color() {
        let os = |s: &str| Some(std::ffi::OsString::from(s));
        assert!(colour_for(true, None, os("xterm-256color")));
        assert!(!colour_for(false, None, None), "not into files and pipes");
        assert!(!colour_for(true, os("1"), None), "NO_COLOR set");
        assert!(colour_for(true, os(""), None), "an empty NO_COLOR does not count");
        assert!(!colour_for(true, None, os("dumb")));
        assert_eq!(Style::Good.paint("ok", true), "\x1b[32mok\x1b[0m");
        assert_eq!(Style::Good.paint("ok", false), "ok");
    }
}
