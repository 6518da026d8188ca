//! Trace context carried by incoming requests: Google's `X-Cloud-Trace-Context`
//! and W3C `traceparent`, parsed into one [`TraceContext`] so request logs can
//! be correlated with Cloud Trace.

/// The trace a request belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TraceContext {
    /// 32 lowercase hex digits, never all zeros.
    pub trace_id: String,
    /// The caller's span as 16 lowercase hex digits (the form Cloud Logging
    /// wants in `logging.googleapis.com/spanId`), if the header carried one.
    pub span_id: Option<String>,
    /// Whether the caller sampled this trace.
    pub sampled: bool,
}

/// Parses `X-Cloud-Trace-Context: TRACE_ID[/SPAN_ID][;o=OPTIONS]`, where
/// `TRACE_ID` is 32 hex digits, `SPAN_ID` an unsigned 64-bit decimal and
/// `o=1` marks the trace sampled. A span id of `0` means "no span".
/// Returns `None` for anything malformed.
pub fn parse_cloud_trace(header: &str) -> Option<TraceContext> {
    let header = header.trim();
    let (ids, options) = match header.split_once(';') {
        Some((ids, options)) => (ids, Some(options)),
        None => (header, None),
    };
    let (trace, span) = match ids.split_once('/') {
        Some((trace, span)) => (trace, Some(span)),
        None => (ids, None),
    };
    if !is_hex(trace, 32) || is_zero(trace) {
        return None;
    }
    let span_id = match span {
        Some(span) => {
            if span.is_empty() || !span.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            match span.parse::<u64>().ok()? {
                0 => None,
                n => Some(format!("{n:016x}")),
            }
        }
        None => None,
    };
    let sampled = match options {
        Some(options) => match options.strip_prefix("o=")? {
            "0" => false,
            "1" => true,
            _ => return None,
        },
        None => false,
    };
    Some(TraceContext { trace_id: trace.to_ascii_lowercase(), span_id, sampled })
}

/// Parses a W3C `traceparent`: `VERSION-TRACE_ID-PARENT_ID-FLAGS` with 2, 32,
/// 16 and 2 lowercase hex digits. Version `00` has exactly these four parts;
/// later versions may append more, which are ignored. Version `ff`, all-zero
/// ids and uppercase hex are invalid. Returns `None` for anything malformed.
pub fn parse_traceparent(header: &str) -> Option<TraceContext> {
    let mut parts = header.trim().split('-');
    let version = parts.next()?;
    let trace = parts.next()?;
    let parent = parts.next()?;
    let flags = parts.next()?;
    if !is_lower_hex(version, 2) || version == "ff" || (version == "00" && parts.next().is_some()) {
        return None;
    }
    if !is_lower_hex(trace, 32) || is_zero(trace) || !is_lower_hex(parent, 16) || is_zero(parent) {
        return None;
    }
    if !is_lower_hex(flags, 2) {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some(TraceContext {
        trace_id: trace.to_owned(),
        span_id: Some(parent.to_owned()),
        sampled: flags & 1 == 1,
    })
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn is_zero(s: &str) -> bool {
    s.bytes().all(|b| b == b'0')
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRACE: &str = "105445aa7843bc8bf206b12000100000";

    #[test]
    fn cloud_trace_with_span_and_sampled() {
        let t = parse_cloud_trace(&format!("{TRACE}/1;o=1")).expect("valid header");
        assert_eq!(
            t,
            TraceContext { trace_id: TRACE.into(), span_id: Some("0000000000000001".into()), sampled: true }
        );
    }

    #[test]
    fn cloud_trace_span_is_converted_from_decimal_to_hex() {
        let t = parse_cloud_trace(&format!("{TRACE}/18446744073709551615;o=0")).expect("valid header");
        assert_eq!(t.span_id.as_deref(), Some("ffffffffffffffff"));
        assert!(!t.sampled);
        let t = parse_cloud_trace(&format!("{TRACE}/255")).expect("valid header");
        assert_eq!(t.span_id.as_deref(), Some("00000000000000ff"));
        assert!(!t.sampled, "no options means not sampled");
    }

    #[test]
    fn cloud_trace_without_span_or_with_zero_span() {
        let t = parse_cloud_trace(TRACE).expect("trace id alone is valid");
        assert_eq!(t.span_id, None);
        let t = parse_cloud_trace(&format!("{TRACE}/0;o=1")).expect("zero span is valid");
        assert_eq!(t.span_id, None);
        assert!(t.sampled);
    }

    #[test]
    fn cloud_trace_normalizes_uppercase_trace_id() {
        let t = parse_cloud_trace(&format!("{}/7;o=1", TRACE.to_uppercase())).expect("valid header");
        assert_eq!(t.trace_id, TRACE);
    }

    #[test]
    fn cloud_trace_rejects_malformed() {
        for bad in [
            "",
            "abc/1;o=1",
            &format!("{TRACE}0/1;o=1"),               // 33 digits
            &TRACE[1..],                              // 31 digits
            &format!("{}g/1", &TRACE[1..]),           // non-hex
            "00000000000000000000000000000000/1;o=1", // all-zero trace
            &format!("{TRACE}/"),                     // empty span
            &format!("{TRACE}/12a;o=1"),              // non-decimal span
            &format!("{TRACE}/-1;o=1"),               // negative span
            &format!("{TRACE}/18446744073709551616"), // span overflows u64
            &format!("{TRACE}/1;o=2"),                // unknown option value
            &format!("{TRACE}/1;x=1"),                // unknown option
        ] {
            assert_eq!(parse_cloud_trace(bad), None, "accepted {bad:?}");
        }
    }

    #[test]
    fn traceparent_valid() {
        let t = parse_traceparent(&format!("00-{TRACE}-00f067aa0ba902b7-01")).expect("valid header");
        assert_eq!(
            t,
            TraceContext { trace_id: TRACE.into(), span_id: Some("00f067aa0ba902b7".into()), sampled: true }
        );
        let t = parse_traceparent(&format!("00-{TRACE}-00f067aa0ba902b7-00")).expect("valid header");
        assert!(!t.sampled);
        let t = parse_traceparent(&format!("00-{TRACE}-00f067aa0ba902b7-03")).expect("other flag bits");
        assert!(t.sampled);
    }

    #[test]
    fn traceparent_future_version_may_have_more_parts() {
        let t = parse_traceparent(&format!("01-{TRACE}-00f067aa0ba902b7-01-extra")).expect("future version");
        assert_eq!(t.trace_id, TRACE);
    }

    #[test]
    fn traceparent_rejects_malformed() {
        let span = "00f067aa0ba902b7";
        for bad in [
            String::new(),
            format!("00-{TRACE}-{span}"),                     // missing flags
            format!("00-{TRACE}-{span}-01-extra"),            // extra part in version 00
            format!("ff-{TRACE}-{span}-01"),                  // forbidden version
            format!("0-{TRACE}-{span}-01"),                   // short version
            format!("00-{}-{span}-01", &TRACE[1..]),          // short trace id
            format!("00-{TRACE}0-{span}-01"),                 // long trace id
            format!("00-{}-{span}-01", TRACE.to_uppercase()), // uppercase
            format!("00-{}x-{span}-01", &TRACE[1..]),         // non-hex
            format!("00-{}-{span}-01", "0".repeat(32)),       // zero trace
            format!("00-{TRACE}-{}-01", "0".repeat(16)),      // zero parent
            format!("00-{TRACE}-00f067aa0ba902b-01"),         // short parent
            format!("00-{TRACE}-{span}-1"),                   // short flags
            format!("00-{TRACE}-{span}-0g"),                  // non-hex flags
            format!("00_{TRACE}_{span}_01"),                  // wrong separator
        ] {
            assert_eq!(parse_traceparent(&bad), None, "accepted {bad:?}");
        }
    }
}
