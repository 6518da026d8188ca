//! Writing to standard output, for every command. A reader that goes away
//! (`mapi api GET /openapi.json | head -1`) ends the command quietly with
//! status 141 (128 + SIGPIPE), as Unix tools end, rather than a panic.

use std::io::{ErrorKind, Write};

use crate::commands::Result;

/// The status a command ends with when its reader closed the pipe.
pub const CLOSED_PIPE: i32 = 141;

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

/// Prints `value` as JSON with `--json`, else the human text.
pub fn print<T: serde::Serialize>(json: bool, value: &T, human: impl FnOnce() -> String) -> Result<()> {
    if json { line(&serde_json::to_string_pretty(value)?) } else { write(&human()) }
}

/// A table: `header` and its `rows` (each ending in a newline), or, when
/// there are no rows, `empty` alone (what to do to have some), never a
/// header over nothing.
pub fn listing(header: String, rows: impl IntoIterator<Item = String>, empty: &str) -> String {
    let rows: String = rows.into_iter().collect();
    if rows.is_empty() { format!("{empty}\n") } else { header + &rows }
}

/// A size for people: `812 bytes`, `3.3 KiB`, `1.5 MiB` (JSON output keeps the exact bytes).
pub fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::{listing, size};

    #[test]
    fn sizes_are_said_in_binary_units() {
        assert_eq!(size(0), "0 bytes");
        assert_eq!(size(1023), "1023 bytes");
        assert_eq!(size(3424), "3.3 KiB");
        assert_eq!(size(5 * 1024 * 1024 + 512 * 1024), "5.5 MiB");
        assert_eq!(size(u64::MAX), "16777216.0 TiB");
    }

    #[test]
    fn an_empty_listing_says_what_to_do_instead_of_a_bare_header() {
        let empty = listing("ID\n".into(), Vec::<String>::new(), "no runs yet: mapi runs submit …");
        assert_eq!(empty, "no runs yet: mapi runs submit …\n");
        assert_eq!(listing("ID\n".into(), vec!["r1\n".to_owned()], "none"), "ID\nr1\n");
    }
}
