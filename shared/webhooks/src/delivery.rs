//! When to retry a delivery, how to read the receiver's answer, and what of
//! it to keep in the delivery log.
//!
//! The retry rule: after a failed attempt, wait 5 s, then twice as long
//! after each further failure, but never more than an hour at a time; stop
//! once the next wait would take the total of all waits past
//! [`DELIVERY_WINDOW_S`] (one day), and mark the delivery failed. The waits,
//! in seconds, are therefore
//!
//! ```text
//! 5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560,   (attempts 1 to 10 failed)
//! 3600 × 22                                       (attempts 11 to 32 failed)
//! ```
//!
//! 32 waits totalling 84 315 s (23 h 25 min 15 s), so at most
//! [`MAX_ATTEMPTS`] = 33 attempts; after the 33rd fails there is no next one.
//!
//! The answer rule: any 2xx is delivered. 410 Gone is failed at once: the
//! receiver said this endpoint is gone for good. Everything else is retried
//! until the window ends: no answer at all (a timeout or a connection
//! error), 408, 409, 425, 429, every 5xx, and also the other 1xx, 3xx and 4xx
//! (a receiver's misconfiguration, a 401 after a secret mix-up, a 404 during
//! a redeploy are usually fixed within the day). Redirects are not
//! followed: a 3xx is a failed attempt like any other, since following it
//! would bypass the address checks.

use std::time::Duration;

use mapi_domain::Timestamp;

/// How long, in seconds, a delivery is retried: the sum of all waits
/// between its attempts never exceeds it.
pub const DELIVERY_WINDOW_S: u64 = 24 * 3600;

/// The most attempts one delivery gets (see the module's schedule).
pub const MAX_ATTEMPTS: u32 = 33;

/// How many bytes of a response body the delivery log keeps.
pub const EXCERPT_BYTES: usize = 512;

const FIRST_WAIT_S: u64 = 5;
const MAX_WAIT_S: u64 = 3600;

/// What an attempt's answer means for the delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The receiver took it (2xx).
    Delivered,
    /// Try again after [`next_attempt_delay`], if the window allows.
    Retry,
    /// Stop now and mark the delivery failed (410 Gone).
    Failed,
}

/// The wait before the next attempt, once attempt number `attempt`
/// (counted from 1) has failed; `None` when the delivery must be marked
/// failed. Attempt 0 (none made yet) gives a zero wait: deliver now.
pub fn next_attempt_delay(attempt: u32) -> Option<Duration> {
    if attempt == 0 {
        return Some(Duration::ZERO);
    }
    let mut total = 0;
    for n in 1..=attempt {
        total += wait_s(n);
        if total > DELIVERY_WINDOW_S {
            return None;
        }
    }
    Some(Duration::from_secs(wait_s(attempt)))
}

/// The wait after attempt `n` (n ≥ 1), before the window: 5 s doubling, at most an hour.
fn wait_s(n: u32) -> u64 {
    let doublings = 1u64.checked_shl(n - 1).unwrap_or(u64::MAX);
    FIRST_WAIT_S.saturating_mul(doublings).min(MAX_WAIT_S)
}

/// Reads an attempt's HTTP status (`None`: no answer) by the module's rule.
pub fn classify(status: Option<u16>) -> Outcome {
    match status {
        Some(200..=299) => Outcome::Delivered,
        Some(410) => Outcome::Failed,
        _ => Outcome::Retry,
    }
}

/// The first [`EXCERPT_BYTES`] bytes of a response body, cut back to a
/// character boundary, as text (invalid UTF-8 becomes U+FFFD).
pub fn excerpt(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..excerpt_len(body)]).into_owned()
}

/// Where to cut: at most [`EXCERPT_BYTES`], moved back over up to three
/// UTF-8 continuation bytes so a character is not split.
fn excerpt_len(body: &[u8]) -> usize {
    if body.len() <= EXCERPT_BYTES {
        return body.len();
    }
    let is_continuation = |i: usize| body[i] & 0b1100_0000 == 0b1000_0000;
    (EXCERPT_BYTES - 3..=EXCERPT_BYTES).rev().find(|&i| !is_continuation(i)).unwrap_or(EXCERPT_BYTES)
}

#[cfg(test)]
mod pace_tests {
    use super::*;

    #[test]
    fn a_burst_is_spaced_and_a_later_batch_waits_for_the_earlier() {
        let now = Timestamp::from_secs(1_000);
        let ms = |n: u64| Duration::from_millis(n);
        let (slots, until) = pace(now, None, 3, 10);
        assert_eq!(slots, [now, now + ms(100), now + ms(200)]);
        assert_eq!(until, now + ms(300));
        let (slots, until) = pace(now + ms(50), Some(until), 2, 10);
        assert_eq!(slots, [now + ms(300), now + ms(400)], "after the earlier batch's last slot");
        assert_eq!(until, now + ms(500));
        let later = now + Duration::from_secs(60);
        assert_eq!(pace(later, Some(until), 1, 10).0, [later], "an idle receiver starts now");
        assert_eq!(pace(later, Some(until), 0, 10), (vec![], later), "nothing made, nothing taken");
        assert_eq!(pace(now, None, 2, 0).0, [now, now + Duration::from_secs(1)], "at least one a second");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schedule() -> Vec<u64> {
        (1..).map_while(next_attempt_delay).map(|d| d.as_secs()).collect()
    }

    #[test]
    fn the_schedule_is_the_documented_list() {
        let mut expected = vec![5, 10, 20, 40, 80, 160, 320, 640, 1280, 2560];
        expected.extend([3600; 22]);
        assert_eq!(schedule(), expected);
        assert_eq!(schedule().len() + 1, MAX_ATTEMPTS as usize);
    }

    #[test]
    fn the_schedule_stays_inside_the_window() {
        let total: u64 = schedule().iter().sum();
        assert_eq!(total, 84_315);
        assert!(total <= DELIVERY_WINDOW_S);
        assert!(total + MAX_WAIT_S > DELIVERY_WINDOW_S, "one more wait would leave the window");
    }

    #[test]
    fn after_the_last_attempt_there_is_none() {
        assert_eq!(next_attempt_delay(0), Some(Duration::ZERO));
        assert_eq!(next_attempt_delay(1), Some(Duration::from_secs(5)));
        assert_eq!(next_attempt_delay(32), Some(Duration::from_secs(3600)));
        for attempt in [33, 34, 64, 1000, u32::MAX] {
            assert_eq!(next_attempt_delay(attempt), None, "attempt {attempt}");
        }
    }

    #[test]
    fn answers_are_classified_by_the_rule() {
        let cases = [
            (Some(200), Outcome::Delivered),
            (Some(202), Outcome::Delivered),
            (Some(204), Outcome::Delivered),
            (Some(299), Outcome::Delivered),
            (Some(410), Outcome::Failed),
            (None, Outcome::Retry),
            (Some(408), Outcome::Retry),
            (Some(409), Outcome::Retry),
            (Some(425), Outcome::Retry),
            (Some(429), Outcome::Retry),
            (Some(500), Outcome::Retry),
            (Some(503), Outcome::Retry),
            (Some(599), Outcome::Retry),
            (Some(100), Outcome::Retry),
            (Some(301), Outcome::Retry),
            (Some(308), Outcome::Retry),
            (Some(400), Outcome::Retry),
            (Some(401), Outcome::Retry),
            (Some(404), Outcome::Retry),
            (Some(411), Outcome::Retry),
            (Some(0), Outcome::Retry),
            (Some(999), Outcome::Retry),
        ];
        for (status, outcome) in cases {
            assert_eq!(classify(status), outcome, "{status:?}");
        }
    }

    #[test]
    fn short_bodies_are_kept_whole() {
        assert_eq!(excerpt(b""), "");
        assert_eq!(excerpt(b"{\"ok\":true}"), "{\"ok\":true}");
        assert_eq!(excerpt(&[b'a'; 512]), "a".repeat(512));
        assert_eq!(excerpt(b"bad \xff byte"), "bad \u{fffd} byte");
    }

    #[test]
    fn long_bodies_are_cut_on_a_character_boundary() {
        assert_eq!(excerpt(&[b'a'; 2000]), "a".repeat(512));
        for pad in 0..4 {
            // 'é' is two bytes, '€' three, '😀' four: whichever straddles byte 512 is dropped.
            for ch in ["é", "€", "😀"] {
                let body = format!("{}{}", "a".repeat(510 + pad), ch.repeat(3));
                let got = excerpt(body.as_bytes());
                assert!(got.len() <= 512 && !got.contains('\u{fffd}'), "pad {pad} {ch}: {got:?}");
                assert!(body.starts_with(&got) && got.len() > 512 - ch.len(), "pad {pad} {ch}");
            }
        }
    }
}

/// The times of a receiver's next `count` first attempts, at most
/// `per_second` a second: one slot every `1/per_second` s from `now`, or
/// from where the receiver's earlier messages left off (`paced_until`) if
/// that is later; and where this batch leaves off. A burst of events thus
/// reaches a receiver as a steady stream, and since a retry's wait depends
/// only on its attempt's number, the spacing carries into the retries.
pub fn pace(
    now: Timestamp,
    paced_until: Option<Timestamp>,
    count: usize,
    per_second: u32,
) -> (Vec<Timestamp>, Timestamp) {
    let step = Duration::from_micros(1_000_000 / u64::from(per_second.max(1)));
    let start = paced_until.map_or(now, |p| p.max(now));
    let mut at = start;
    let slots = (0..count)
        .map(|_| {
            let slot = at;
            at = at + step;
            slot
        })
        .collect();
    (slots, if count == 0 { paced_until.unwrap_or(now).max(now) } else { at })
}
