//! What clients say to people in words: a worker's event line
//! (`{"mapi_event":…}`, signed wire format) as a sentence, and a size in
//! bytes as people read it. The CLI and the console both print these, so a
//! run's log reads the same in a terminal and on its page.

use serde_json::Value;

/// A worker event line (`{"mapi_event":{…}}`) said in words, with its
/// time; `None` for any other line.
pub fn event_in_words(text: &str) -> Option<String> {
    let outer: Value = serde_json::from_str(text.trim()).ok()?;
    let e = outer.get("mapi_event")?;
    let at = e["at"].as_str().map_or(String::new(), |t| format!("{} ", clock_time(t)));
    let what = match e["kind"].as_str()? {
        "started" => "started".to_owned(),
        "progress" => format!(
            "progress {:>3.0}%  {}",
            e["fraction"].as_f64().unwrap_or(0.0) * 100.0,
            e["message"].as_str().unwrap_or("")
        ),
        "metric" => format!("metric   {} = {}", e["name"].as_str().unwrap_or("?"), e["value"]),
        "checkpoint" => format!("checkpoint written (generation {})", e["generation"]),
        "output" => format!(
            "output   {} ({})",
            e["name"].as_str().unwrap_or("?"),
            e["size"].as_u64().map_or("?".to_owned(), size)
        ),
        "complete" => "complete".to_owned(),
        "error" => format!("error    {}", e["message"].as_str().unwrap_or("")),
        other => other.to_owned(),
    };
    Some(format!("{at}{what}").trim_end().to_owned())
}

/// `2026-12-02T04:00:30.28734Z` as `04:00:30.287`.
pub fn clock_time(rfc3339: &str) -> String {
    let time = rfc3339.split_once('T').map_or(rfc3339, |(_, t)| t).trim_end_matches('Z');
    match time.split_once('.') {
        Some((hms, frac)) => format!("{hms}.{:0<3}", &frac[..frac.len().min(3)]),
        None => time.to_owned(),
    }
}

/// A size for people: `512 bytes`, `3.3 KiB`, `1.2 GiB`.
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

/// A number as people read it: at most 6 significant decimals, no
/// trailing zeros (`0.015`, not `0.015000`; `2`, not `2.000000`).
pub fn number(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if matches!(s, "" | "-" | "-0") { "0".to_owned() } else { s.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_are_said_in_words_and_other_lines_are_not() {
        let progress = r#"{"mapi_event":{"v":1,"run":"run_x","attempt":1,"task":0,"seq":1,"at":"2026-12-02T04:00:30.28734Z","kind":"progress","fraction":0.1,"message":"parsed 16 rows","sig":"00"}}"#;
        assert_eq!(event_in_words(progress).as_deref(), Some("04:00:30.287 progress  10%  parsed 16 rows"));
        let metric =
            r#"{"mapi_event":{"at":"2026-12-02T04:00:30Z","kind":"metric","name":"r_squared","value":0.5}}"#;
        assert_eq!(event_in_words(metric).as_deref(), Some("04:00:30 metric   r_squared = 0.5"));
        let output = r#"{"mapi_event":{"at":"2026-12-02T04:00:30.1Z","kind":"output","name":"model.json","size":3424}}"#;
        assert_eq!(event_in_words(output).as_deref(), Some("04:00:30.100 output   model.json (3.3 KiB)"));
        assert_eq!(event_in_words("plain text"), None);
        assert_eq!(event_in_words(r#"{"other":1}"#), None);
    }

    #[test]
    fn numbers_and_sizes_read_as_people_write_them() {
        assert_eq!(
            (number(0.015), number(2.0), number(-0.0000001), number(1.5e-3)),
            ("0.015".into(), "2".into(), "0".into(), "0.0015".into())
        );
        assert_eq!(
            (size(512), size(3424), size(5 << 30)),
            ("512 bytes".into(), "3.3 KiB".into(), "5.0 GiB".into())
        );
    }
}
