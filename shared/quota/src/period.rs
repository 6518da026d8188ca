//! Quota periods in UTC: a calendar day or a calendar month, each starting
//! at 00:00:00 UTC and ending (exclusive) at the first instant of the next.
//!
//! Calendar arithmetic is pure integer math on days since the epoch (the
//! civil-calendar algorithms of H. Hinnant), so it is total over every
//! [`Timestamp`] and needs no clock.

use std::fmt;
use std::str::FromStr;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

const MICROS_PER_SECOND: i64 = 1_000_000;
const MICROS_PER_MINUTE: i64 = 60 * MICROS_PER_SECOND;
const MICROS_PER_DAY: i64 = 86_400 * MICROS_PER_SECOND;

/// The period a budget or cap counts over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Period {
    Day,
    Month,
}

impl Period {
    pub const ALL: [Period; 2] = [Period::Day, Period::Month];

    pub fn as_str(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Month => "month",
        }
    }

    /// The first instant of the UTC day or month that holds `now`.
    pub fn start(self, now: Timestamp) -> Timestamp {
        let day = day_of(now);
        match self {
            Period::Day => at_day(day),
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                at_day(days_from_civil(y, m, 1))
            }
        }
    }

    /// The end (exclusive) of the period that holds `now`: the next UTC
    /// midnight, or the first instant of the next month. At a boundary the
    /// period is the one that starts there, so the end is a full period away.
    pub fn end(self, now: Timestamp) -> Timestamp {
        let day = day_of(now);
        match self {
            Period::Day => at_day(day.saturating_add(1)),
            Period::Month => {
                let (y, m, _) = civil_from_days(day);
                let (y, m) = if m == 12 { (y.saturating_add(1), 1) } else { (y, m + 1) };
                at_day(days_from_civil(y, m, 1))
            }
        }
    }

    /// The period's name for storage keys: `2026-11-30` for a day, `2026-11`
    /// for a month.
    pub fn key(self, now: Timestamp) -> String {
        let (y, m, d) = civil_from_days(day_of(now));
        match self {
            Period::Day => format!("{y:04}-{m:02}-{d:02}"),
            Period::Month => format!("{y:04}-{m:02}"),
        }
    }
}

impl fmt::Display for Period {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown period name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown period `{0}`: use day or month")]
pub struct UnknownPeriod(pub String);

impl FromStr for Period {
    type Err = UnknownPeriod;
    fn from_str(s: &str) -> Result<Self, UnknownPeriod> {
        Period::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| UnknownPeriod(s.chars().take(16).collect()))
    }
}

/// The first instant of the next whole UTC minute (a full minute away when
/// `now` is exactly on one).
pub(crate) fn minute_end(now: Timestamp) -> Timestamp {
    let micros = now.as_micros();
    Timestamp::from_micros((micros - micros.rem_euclid(MICROS_PER_MINUTE)).saturating_add(MICROS_PER_MINUTE))
}

/// Whole seconds from `now` to `boundary`, rounded up, at least 1.
pub(crate) fn seconds_until(now: Timestamp, boundary: Timestamp) -> u64 {
    let micros = u64::try_from(boundary.as_micros().saturating_sub(now.as_micros())).unwrap_or(0);
    micros.div_ceil(MICROS_PER_SECOND.unsigned_abs()).max(1)
}

/// Days since 1970-01-01 of the UTC day that holds `t`.
fn day_of(t: Timestamp) -> i64 {
    t.as_micros().div_euclid(MICROS_PER_DAY)
}

fn at_day(day: i64) -> Timestamp {
    Timestamp::from_micros(day.saturating_mul(MICROS_PER_DAY))
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian (year, month, day) of a day since 1970-01-01.
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        Timestamp::parse_rfc3339(s).expect("valid RFC 3339")
    }

    fn rfc(t: Timestamp) -> String {
        t.to_rfc3339()
    }

    #[test]
    fn day_just_before_midnight_on_the_last_day_of_a_month() {
        let now = at("2026-11-30T23:59:30Z");
        assert_eq!(rfc(Period::Day.start(now)), "2026-11-30T00:00:00.000000Z");
        assert_eq!(rfc(Period::Day.end(now)), "2026-12-01T00:00:00.000000Z");
        assert_eq!(Period::Day.key(now), "2026-11-30");
        assert_eq!(seconds_until(now, Period::Day.end(now)), 30);
        assert_eq!(rfc(Period::Month.start(now)), "2026-11-01T00:00:00.000000Z");
        assert_eq!(rfc(Period::Month.end(now)), "2026-12-01T00:00:00.000000Z");
        assert_eq!(Period::Month.key(now), "2026-11");
        assert_eq!(seconds_until(now, Period::Month.end(now)), 30);
    }

    #[test]
    fn month_end_in_december_rolls_the_year() {
        let now = at("2026-12-31T23:00:00Z");
        assert_eq!(rfc(Period::Month.start(now)), "2026-12-01T00:00:00.000000Z");
        assert_eq!(rfc(Period::Month.end(now)), "2027-01-01T00:00:00.000000Z");
        assert_eq!(seconds_until(now, Period::Month.end(now)), 3600);
        assert_eq!(Period::Month.key(now), "2026-12");
    }

    #[test]
    fn february_in_a_leap_year_and_not() {
        let leap = at("2028-02-29T12:00:00Z");
        assert_eq!(Period::Day.key(leap), "2028-02-29");
        assert_eq!(rfc(Period::Day.end(leap)), "2028-03-01T00:00:00.000000Z");
        assert_eq!(rfc(Period::Month.end(leap)), "2028-03-01T00:00:00.000000Z");
        assert_eq!(rfc(Period::Day.end(at("2028-02-28T12:00:00.000000Z"))), "2028-02-29T00:00:00.000000Z");

        let plain = at("2027-02-28T12:00:00Z");
        assert_eq!(rfc(Period::Day.end(plain)), "2027-03-01T00:00:00.000000Z");
        assert_eq!(rfc(Period::Month.start(plain)), "2027-02-01T00:00:00.000000Z");
        assert_eq!(rfc(Period::Month.end(plain)), "2027-03-01T00:00:00.000000Z");
    }

    #[test]
    fn exactly_at_a_boundary_the_period_starts_there() {
        let now = at("2026-12-01T00:00:00Z");
        assert_eq!(Period::Day.start(now), now);
        assert_eq!(rfc(Period::Day.end(now)), "2026-12-02T00:00:00.000000Z");
        assert_eq!(seconds_until(now, Period::Day.end(now)), 86_400);
        assert_eq!(Period::Day.key(now), "2026-12-01");
        assert_eq!(Period::Month.start(now), now);
        assert_eq!(rfc(Period::Month.end(now)), "2027-01-01T00:00:00.000000Z");
        assert_eq!(Period::Month.key(now), "2026-12");
        // One microsecond earlier is still the previous day and month.
        let before = Timestamp::from_micros(now.as_micros() - 1);
        assert_eq!(Period::Day.key(before), "2026-11-30");
        assert_eq!(seconds_until(before, Period::Day.end(before)), 1);
    }

    #[test]
    fn seconds_round_up_and_never_reach_zero() {
        let now = at("2026-11-30T23:59:59.000001Z");
        assert_eq!(seconds_until(now, Period::Day.end(now)), 1);
        let now = at("2026-11-30T23:59:58.5Z");
        assert_eq!(seconds_until(now, Period::Day.end(now)), 2);
        assert_eq!(seconds_until(now, now), 1);
        assert_eq!(seconds_until(now, Timestamp::EPOCH), 1);
    }

    #[test]
    fn minute_end_is_the_next_whole_minute() {
        assert_eq!(rfc(minute_end(at("2026-11-30T12:00:35.000000Z"))), "2026-11-30T12:01:00.000000Z");
        assert_eq!(rfc(minute_end(at("2026-11-30T12:00:00.000000Z"))), "2026-11-30T12:01:00.000000Z");
        assert_eq!(rfc(minute_end(at("2026-12-31T23:59:59.9Z"))), "2027-01-01T00:00:00.000000Z");
    }

    /// Every day from 1900 to 2200 against the `time` crate's calendar.
    #[test]
    fn calendar_agrees_with_the_time_crate() {
        let first = days_from_civil(1900, 1, 1);
        let last = days_from_civil(2200, 12, 31);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        for day in first..=last {
            let noon = Timestamp::from_secs(day * 86_400 + 43_200);
            let date = time::OffsetDateTime::from_unix_timestamp(noon.as_secs()).expect("in range").date();
            let (y, m, d) =
                (i64::from(date.year()), i64::from(u8::from(date.month())), i64::from(date.day()));
            assert_eq!(civil_from_days(day), (y, m, d), "day {day}");
            assert_eq!(days_from_civil(y, m, d), day);
            let month_start = Period::Month.start(noon).as_secs();
            let expected = date.replace_day(1).expect("day 1").midnight().assume_utc().unix_timestamp();
            assert_eq!(month_start, expected, "month start of day {day}");
        }
    }

    #[test]
    fn names_parse_and_serialize() {
        for p in Period::ALL {
            assert_eq!(p.as_str().parse::<Period>(), Ok(p));
            assert_eq!(serde_json::to_string(&p).expect("json"), format!("\"{p}\""));
        }
        let err = "week".parse::<Period>().expect_err("unknown");
        assert_eq!(err.to_string(), "unknown period `week`: use day or month");
    }
}
