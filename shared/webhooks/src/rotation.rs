//! Which secrets sign a delivery while a webhook's secret is being rotated.
//!
//! The rule: a webhook always has a current secret, and after a rotation it
//! keeps the previous one until a `valid_until` time (by default
//! [`ROTATION_GRACE_S`] after the rotation). Deliveries are signed with the
//! current secret, and also with the previous one while `now` is strictly
//! before `valid_until`; from `valid_until` on, only the current one signs.
//! A receiver that has not yet switched to the new secret thus keeps
//! verifying deliveries for the whole grace period.

use std::time::Duration;

use mapi_domain::Timestamp;

use crate::Secret;

/// The default grace period, in seconds: a previous secret keeps signing
/// for one day after a rotation, time for the receiver to deploy the new one.
pub const ROTATION_GRACE_S: i64 = 24 * 3600;

/// When a secret rotated at `rotated_at` stops signing, with the default
/// grace period.
pub fn grace_until(rotated_at: Timestamp) -> Timestamp {
    rotated_at + Duration::from_secs(ROTATION_GRACE_S.unsigned_abs())
}

/// The secrets that sign a delivery at `now`: the current one first, then
/// the previous one if `now < valid_until`.
pub fn signing_secrets<'a>(
    current: &'a Secret,
    previous: Option<(&'a Secret, Timestamp)>,
    now: Timestamp,
) -> Vec<&'a Secret> {
    let mut secrets = vec![current];
    if let Some((old, valid_until)) = previous
        && now < valid_until
    {
        secrets.push(old);
    }
    secrets
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(byte: u8) -> Secret {
        Secret::from_bytes(&[byte; 32]).expect("32 bytes")
    }

    fn names(secrets: &[&Secret]) -> Vec<String> {
        secrets.iter().map(|s| s.as_str().to_owned()).collect()
    }

    #[test]
    fn the_previous_secret_signs_until_valid_until_exclusive() {
        let (current, previous) = (secret(1), secret(2));
        let until = Timestamp::from_secs(1_700_000_000);
        let just_before = Timestamp::from_micros(until.as_micros() - 1);
        let both = signing_secrets(&current, Some((&previous, until)), just_before);
        assert_eq!(names(&both), [current.as_str(), previous.as_str()]);
        let at = signing_secrets(&current, Some((&previous, until)), until);
        assert_eq!(names(&at), [current.as_str()]);
        let after = signing_secrets(&current, Some((&previous, until)), until + Duration::from_secs(1));
        assert_eq!(names(&after), [current.as_str()]);
    }

    #[test]
    fn without_a_previous_secret_only_the_current_signs() {
        let current = secret(1);
        let got = signing_secrets(&current, None, Timestamp::from_secs(5));
        assert_eq!(names(&got), [current.as_str()]);
    }

    #[test]
    fn the_default_grace_is_one_day() {
        let rotated = Timestamp::from_secs(1_700_000_000);
        assert_eq!(grace_until(rotated), Timestamp::from_secs(1_700_000_000 + 86_400));
        let (current, previous) = (secret(1), secret(2));
        let later = Timestamp::from_secs(1_700_000_000 + 86_399);
        assert_eq!(signing_secrets(&current, Some((&previous, grace_until(rotated))), later).len(), 2);
        let day = Timestamp::from_secs(1_700_000_000 + 86_400);
        assert_eq!(signing_secrets(&current, Some((&previous, grace_until(rotated))), day).len(), 1);
    }
}
