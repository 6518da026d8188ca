//! Run events: what a running method reports, and how the report travels.
//!
//! The worker prints each event as one JSON line on stdout,
//! `{"mapi_event": {...}}`, signed with HMAC-SHA256 under the attempt's key
//! ([`AttemptKey`]) over the [`canonical_json`] of the event. In the cloud a
//! Cloud Logging sink publishes the line's LogEntry to Pub/Sub and a push
//! subscription POSTs it to the platform; locally the executor wraps each line
//! the same way ([`pubsub`]). The server reads the routing ids
//! ([`peek_ids`]), looks up the key, [`verify`]s, drops duplicates on
//! (run, attempt, seq) and merges the event into the attempt's
//! [`progress::Progress`], whose merge does not depend on delivery order.
//!
//! Architecture invariant: this crate does no I/O.

mod canonical;
mod event;
mod key;
mod line;
pub mod progress;
pub mod pubsub;
mod sequence;
mod signing;

pub use canonical::canonical_json;
pub use event::{Event, EventBody, EventError, SignedEvent, VERSION};
pub use key::{AttemptKey, KeyError};
pub use line::{LINE_KEY, line, parse_line};
pub use sequence::{EventSequencer, MAX_SEQ_N, MAX_TASK, SEQ_BITS, task_seq};
pub use signing::{peek_ids, sign, verify};

#[cfg(test)]
pub(crate) mod fixtures {
    //! Shared test values: a fixed key, run and event.

    use mapi_domain::{AttemptNo, RunId, Timestamp};

    use crate::{AttemptKey, Event, EventBody, task_seq};

    /// The canonical text of [`event`], written by hand.
    pub const GOLDEN: &str = concat!(
        r#"{"at":"2026-11-30T06:15:40.123456Z","attempt":1,"fraction":0.5,"kind":"progress","#,
        r#""message":"step 3/10 — ok","run":"run_01jd8x9k2m3n4p5q6r7s8t9v0w","seq":2199023255559,"#,
        r#""task":2,"v":1}"#
    );

    /// HMAC-SHA256 of [`GOLDEN`] under [`key`], computed with Python's
    /// `hmac.new(bytes(range(32)), GOLDEN.encode(), hashlib.sha256).hexdigest()`.
    pub const GOLDEN_SIG: &str = "23733f21e03d71af1f3893cdf95602c06c1c30550f6f97460350943c83353e78";

    /// The key whose bytes are 0, 1, ..., 31.
    pub fn key() -> AttemptKey {
        let mut bytes = [0u8; 32];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = u8::try_from(i).expect("i < 32");
        }
        AttemptKey::from_bytes(bytes)
    }

    pub fn run() -> RunId {
        RunId::parse("run_01jd8x9k2m3n4p5q6r7s8t9v0w").expect("valid run id")
    }

    /// 2026-11-30T06:15:40.123456Z
    pub fn at() -> Timestamp {
        Timestamp::from_micros(1_796_019_340_123_456)
    }

    /// The golden event: task 2, its 8th event, half done.
    pub fn event() -> Event {
        Event {
            v: 1,
            run: run(),
            attempt: AttemptNo(1),
            task: 2,
            seq: task_seq(2, 7),
            at: at(),
            body: EventBody::Progress { fraction: 0.5, message: "step 3/10 — ok".to_owned() },
        }
    }
}
