//! `Timestamp`: microseconds since the Unix epoch, serialized as RFC 3339 UTC.
//!
//! Integer microseconds keep ordering and arithmetic exact and make virtual
//! clocks trivial. The text form always has six fraction digits
//! (`2026-11-30T06:15:40.000000Z`, never `…40Z`): stores compare these
//! strings in range filters, orderings and cursors, and `Z` sorts after every
//! digit, so a shortened form would put `…40Z` after `…40.5Z`.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A point in time with microsecond precision.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The epoch, used as "never" in a few places.
    pub const EPOCH: Timestamp = Timestamp(0);

    pub const fn from_micros(micros: i64) -> Self {
        Timestamp(micros)
    }

    pub const fn from_secs(secs: i64) -> Self {
        Timestamp(secs * 1_000_000)
    }

    pub const fn as_micros(self) -> i64 {
        self.0
    }

    pub const fn as_millis(self) -> i64 {
        self.0.div_euclid(1_000)
    }

    pub const fn as_secs(self) -> i64 {
        self.0.div_euclid(1_000_000)
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_micros(u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0))
    }

    /// RFC 3339 in UTC with exactly six fraction digits, e.g.
    /// `2026-11-30T06:15:40.123456Z`: fixed width, so two of these compare as
    /// strings the way their instants compare (for years 0 to 9999).
    pub fn to_rfc3339(self) -> String {
        let nanos = i128::from(self.0) * 1_000;
        match OffsetDateTime::from_unix_timestamp_nanos(nanos) {
            Ok(t) => format!(
                "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                t.year(),
                u8::from(t.month()),
                t.day(),
                t.hour(),
                t.minute(),
                t.second(),
                t.microsecond()
            ),
            Err(_) => self.0.to_string(),
        }
    }

    /// Parses RFC 3339 (any offset).
    pub fn parse_rfc3339(s: &str) -> Result<Self, time::error::Parse> {
        let t = OffsetDateTime::parse(s, &Rfc3339)?;
        Ok(Timestamp((t.unix_timestamp_nanos() / 1_000) as i64))
    }

    /// The start of this timestamp's UTC day.
    pub fn utc_day_start(self) -> Timestamp {
        Timestamp(self.0 - self.0.rem_euclid(86_400_000_000))
    }
}

impl std::ops::Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// `self + d`, saturating.
    fn add(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)))
    }
}

impl std::ops::Sub<Duration> for Timestamp {
    type Output = Timestamp;

    /// `self - d`, saturating.
    fn sub(self, d: Duration) -> Timestamp {
        Timestamp(self.0.saturating_sub(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s)
            .map_err(|_| serde::de::Error::custom("must be an RFC 3339 time such as 2026-12-01T09:30:00Z"))
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(utoipa::openapi::KnownFormat::DateTime)))
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_round_trip_keeps_micros() {
        let t = Timestamp::from_micros(1_796_019_340_123_456);
        let s = t.to_rfc3339();
        assert_eq!(s, "2026-11-30T06:15:40.123456Z");
        assert_eq!(Timestamp::parse_rfc3339(&s).ok(), Some(t));
    }

    #[test]
    fn day_start_truncates_to_utc_midnight() {
        let t = Timestamp::parse_rfc3339("2026-11-30T06:15:40Z").ok();
        let d = t.map(Timestamp::utc_day_start).map(Timestamp::to_rfc3339);
        assert_eq!(d.as_deref(), Some("2026-11-30T00:00:00.000000Z"));
    }

    #[test]
    fn text_forms_sort_as_their_instants_do() {
        // Whole seconds, tenths and full micros side by side: the cases a
        // trimmed fraction would misorder (`…40Z` after `…40.3Z`).
        let base = 1_796_019_340_000_000;
        let mut times: Vec<Timestamp> =
            [0, 1, 10, 100_000, 300_000, 999_999, 1_000_000, 1_300_000, 60_000_000]
                .iter()
                .map(|d| Timestamp::from_micros(base + d))
                .collect();
        times.push(Timestamp::EPOCH);
        times.push(Timestamp::from_secs(253_402_300_799)); // 9999-12-31T23:59:59
        for a in &times {
            for b in &times {
                assert_eq!(a.to_rfc3339().cmp(&b.to_rfc3339()), a.cmp(b), "{a} vs {b}");
                let json_a = serde_json::to_string(a).expect("serializes");
                assert_eq!(json_a, format!("\"{}\"", a.to_rfc3339()));
            }
            assert_eq!(Timestamp::parse_rfc3339(&a.to_rfc3339()).ok(), Some(*a), "round trip of {a}");
        }
    }

    #[test]
    fn since_never_goes_negative() {
        assert_eq!(Timestamp::from_secs(1).since(Timestamp::from_secs(5)), Duration::ZERO);
        assert_eq!(Timestamp::from_secs(5).since(Timestamp::from_secs(1)), Duration::from_secs(4));
    }
}
