//! Identifier newtypes. Each validates on construction, so a value of the type
//! is always well formed; the wire form is the plain string.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::Timestamp;

/// Why a string is not a valid identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} `{value}` is invalid: {rule}")]
pub struct IdError {
    pub kind: &'static str,
    pub value: String,
    pub rule: &'static str,
}

/// Lowercase slug: 1..=40 of `[a-z0-9-]`, starting with a letter, not ending in `-`.
fn check_slug(kind: &'static str, s: &str) -> Result<(), IdError> {
    let ok = !s.is_empty()
        && s.len() <= 40
        && s.as_bytes()[0].is_ascii_lowercase()
        && !s.ends_with('-')
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(IdError {
            kind,
            value: s.chars().take(64).collect(),
            rule: "use 1 to 40 lowercase letters, digits or '-', starting with a letter",
        })
    }
}

/// Generated identifier: `prefix` + 26 Crockford base32 characters (48-bit
/// millisecond time, 80 bits of entropy), so identifiers sort by creation time.
fn check_generated(kind: &'static str, prefix: &'static str, s: &str) -> Result<(), IdError> {
    let body = s.strip_prefix(prefix);
    let ok = body.is_some_and(|b| b.len() == 26 && b.bytes().all(|c| CROCKFORD.contains(&c)));
    if ok {
        Ok(())
    } else {
        Err(IdError {
            kind,
            value: s.chars().take(64).collect(),
            rule: "not an identifier this platform issued",
        })
    }
}

/// A slug as a pattern: a letter, then up to 39 of `[a-z0-9-]`, not ending in `-`.
const SLUG_PATTERN: &str = "^[a-z]([a-z0-9-]{0,38}[a-z0-9])?$";

/// An e-mail address as a pattern: dot-separated atoms of RFC 5322's atext
/// (lower case, without `/`), `@`, then two or more host-name labels.
const EMAIL_PATTERN: &str =
    "^[a-z0-9!#$%&'*+=?^_`{|}~-]+(\\.[a-z0-9!#$%&'*+=?^_`{|}~-]+)*@[a-z0-9][a-z0-9-]*(\\.[a-z0-9-]+)+$";

const CROCKFORD: &[u8; 32] = b"0123456789abcdefghjkmnpqrstvwxyz";

/// Encodes time and entropy as 26 Crockford base32 characters.
fn encode_sortable(now: Timestamp, entropy: [u8; 10]) -> String {
    let ms = u128::try_from(now.as_millis()).unwrap_or(0) & ((1u128 << 48) - 1);
    let mut value = ms << 80;
    for (i, b) in entropy.iter().enumerate() {
        value |= u128::from(*b) << (8 * (9 - i));
    }
    let mut out = [0u8; 26];
    for (i, slot) in out.iter_mut().enumerate() {
        let shift = 5 * (25 - i);
        *slot = CROCKFORD[((value >> shift) & 31) as usize];
    }
    out.iter().map(|&b| b as char).collect()
}

macro_rules! string_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $pattern:expr, $max:literal, $check:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: &str) -> Result<Self, IdError> {
                let check: fn(&str) -> Result<(), IdError> = $check;
                check(s)?;
                Ok($name(s.to_owned()))
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The form `parse` accepts, as an ECMA-262 regular expression
            /// (what the API document states for the value).
            pub fn pattern() -> &'static str {
                $pattern
            }

            /// The longest value `parse` accepts, in bytes (the document's `maxLength`).
            pub const MAX_LEN: usize = $max;
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                $name::parse(s)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                $name::parse(&s).map_err(serde::de::Error::custom)
            }
        }

        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                crate::schema::string_matching($pattern).description(Some($kind)).max_length(Some(Self::MAX_LEN)).into()
            }
        }

        impl utoipa::ToSchema for $name {}
    };
}

string_id!(
    /// A tenant (organisation): a lowercase slug, immutable.
    TenantId, "tenant id (lowercase slug)", SLUG_PATTERN, 40, |s| check_slug("tenant id", s)
);
string_id!(
    /// A project inside a tenant: a lowercase slug.
    ProjectId, "project id (lowercase slug)", SLUG_PATTERN, 40, |s| check_slug("project id", s)
);
string_id!(
    /// A run, issued by the platform (`run_…`).
    RunId, "run id", concat!("^run_", "[0-9a-hjkmnp-tv-z]{26}$"), 30, |s| check_generated("run id", "run_", s)
);
string_id!(
    /// An uploaded dataset, issued by the platform (`ds_…`).
    DatasetId, "dataset id", concat!("^ds_", "[0-9a-hjkmnp-tv-z]{26}$"), 29, |s| check_generated("dataset id", "ds_", s)
);
string_id!(
    /// An item job, issued by the platform (`job_…`).
    JobId, "job id", concat!("^job_", "[0-9a-hjkmnp-tv-z]{26}$"), 30, |s| check_generated("job id", "job_", s)
);
string_id!(
    /// A model version: the signed bundle of a succeeded run's outputs
    /// (`mv_…`, the run id's time and entropy, so a run has at most one).
    ModelVersionId, "model version id", concat!("^mv_", "[0-9a-hjkmnp-tv-z]{26}$"), 29, |s| check_generated("model version id", "mv_", s)
);
string_id!(
    /// A webhook endpoint of a project, issued by the platform (`wh_…`).
    WebhookId, "webhook id", concat!("^wh_", "[0-9a-hjkmnp-tv-z]{26}$"), 29, |s| check_generated("webhook id", "wh_", s)
);
string_id!(
    /// One message to a webhook (`msg_…`), the `webhook-id` its receiver
    /// deduplicates on: the same on every attempt and replay of it.
    DeliveryId, "delivery id", concat!("^msg_", "[0-9a-hjkmnp-tv-z]{26}$"), 30, |s| check_generated("delivery id", "msg_", s)
);
string_id!(
    /// A person or service principal: a lower-case e-mail address.
    UserId, "user (e-mail address)", EMAIL_PATTERN, 254, check_email
);
string_id!(
    /// The secret, unguessable identity of one attempt's execution: 32 lowercase hex characters.
    Nonce, "attempt nonce", "^[0-9a-f]{32}$", 32, check_nonce
);

fn check_email(s: &str) -> Result<(), IdError> {
    // The local part is dot-separated atoms of RFC 5322's atext without `/`
    // (a user id is part of document ids and paths); the domain is two or
    // more host-name labels. Exactly what `EMAIL_PATTERN` says.
    let atom_ok = |a: &str| {
        !a.is_empty()
            && a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"!#$%&'*+=?^_`{|}~-".contains(&b))
    };
    let label_ok = |l: &str| {
        !l.is_empty() && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    let domain_ok = |d: &str| d.split('.').count() >= 2 && d.split('.').all(label_ok) && !d.starts_with('-');
    let ok =
        s.len() <= 254 && s.split_once('@').is_some_and(|(l, d)| l.split('.').all(atom_ok) && domain_ok(d));
    if ok {
        Ok(())
    } else {
        Err(IdError {
            kind: "user",
            value: s.chars().take(64).collect(),
            rule: "use a lower-case e-mail address",
        })
    }
}

fn check_nonce(s: &str) -> Result<(), IdError> {
    if s.len() == 32 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        Ok(())
    } else {
        Err(IdError { kind: "nonce", value: String::new(), rule: "32 lowercase hex characters" })
    }
}

impl RunId {
    /// A new run id from the time and 80 bits of entropy.
    pub fn generate(now: Timestamp, entropy: [u8; 10]) -> Self {
        RunId(format!("run_{}", encode_sortable(now, entropy)))
    }
}

impl ModelVersionId {
    /// The one version a run can have: its id with the `mv_` prefix, so
    /// every redelivery of the run's finalization names the same version.
    pub fn of_run(run: &RunId) -> Self {
        let body = run.as_str().strip_prefix("run_").unwrap_or(run.as_str());
        ModelVersionId(format!("mv_{body}"))
    }
}

impl JobId {
    pub fn generate(now: Timestamp, entropy: [u8; 10]) -> Self {
        JobId(format!("job_{}", encode_sortable(now, entropy)))
    }
}

impl WebhookId {
    pub fn generate(now: Timestamp, entropy: [u8; 10]) -> Self {
        WebhookId(format!("wh_{}", encode_sortable(now, entropy)))
    }
}

impl DeliveryId {
    /// The id of the message about an event at `at`; `digest` is 10 bytes
    /// derived from what the event is, so the same event always gets the
    /// same id (and ids sort by the time of their event).
    pub fn of_event(at: Timestamp, digest: [u8; 10]) -> Self {
        DeliveryId(format!("msg_{}", encode_sortable(at, digest)))
    }
}

impl DatasetId {
    pub fn generate(now: Timestamp, entropy: [u8; 10]) -> Self {
        DatasetId(format!("ds_{}", encode_sortable(now, entropy)))
    }
}

impl Nonce {
    pub fn from_bytes(bytes: [u8; 16]) -> Self {
        let mut s = String::with_capacity(32);
        for b in bytes {
            s.push_str(&format!("{b:02x}"));
        }
        Nonce(s)
    }

    /// The nonce of task `index` of a fan-out execution whose execution nonce
    /// is `self`; each task reads the bootstrap of its own nonce. Task 0 keeps
    /// the execution nonce, so a single-task execution has one nonce throughout.
    pub fn for_task(&self, index: u32) -> Nonce {
        if index == 0 {
            return self.clone();
        }
        // Mix the index into the last 8 hex digits; still 32 hex characters,
        // still unguessable without the execution nonce.
        let head = &self.0[..24];
        let tail = u32::from_str_radix(&self.0[24..], 16).unwrap_or(0);
        Nonce(format!("{head}{:08x}", tail ^ index.wrapping_mul(0x9e37_79b9)))
    }
}

/// An attempt number, 1-based.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(transparent)]
pub struct AttemptNo(pub u32);

impl AttemptNo {
    pub const FIRST: AttemptNo = AttemptNo(1);

    pub fn next(self) -> AttemptNo {
        AttemptNo(self.0 + 1)
    }
}

impl fmt::Display for AttemptNo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_runs_model_version_id_is_derived_from_it() {
        let run = RunId::generate(Timestamp::from_secs(1_800_000_000), [7; 10]);
        let v = ModelVersionId::of_run(&run);
        assert_eq!(ModelVersionId::parse(v.as_str()), Ok(v.clone()));
        assert_eq!(v.as_str()[3..], run.as_str()[4..]);
        let other = RunId::generate(Timestamp::from_secs(1_800_000_000), [8; 10]);
        assert_ne!(ModelVersionId::of_run(&other), v);
        assert!(ModelVersionId::parse(run.as_str()).is_err(), "a run id is not a version id");
    }

    /// The pattern each id states in the API document accepts exactly what
    /// its `parse` accepts, over well-formed, edge and hostile samples.
    #[test]
    fn each_ids_stated_pattern_is_what_it_parses() {
        fn agree<T>(pattern: &str, max: usize, parse: fn(&str) -> Result<T, IdError>, samples: &[&str]) {
            let re = regex::Regex::new(pattern).expect("the pattern compiles");
            for s in samples {
                let stated = re.is_match(s) && s.len() <= max;
                assert_eq!(stated, parse(s).is_ok(), "pattern {pattern} and parse disagree on {s:?}");
            }
        }
        let run = RunId::generate(Timestamp::from_secs(1_800_000_000), [9; 10]);
        let body = &run.as_str()[4..];
        let forty = "a".repeat(40);
        let forty_one = "a".repeat(41);
        let slugs =
            ["acme", "a", "a1", "a-b", "acme-", "-a", "1a", "Acme", "", "a b", "a\n", &forty, &forty_one];
        agree(TenantId::pattern(), TenantId::MAX_LEN, TenantId::parse, &slugs);
        agree(ProjectId::pattern(), ProjectId::MAX_LEN, ProjectId::parse, &slugs);
        let runs = [
            run.as_str(),
            &format!("run_{}", &body[1..]),
            &format!("run_{body}0"),
            &format!("ds_{body}"),
            &format!("run_{}", body.replace(|c: char| c.is_ascii_digit(), "i")),
            &format!("run_{}", body.to_uppercase()),
        ];
        agree(RunId::pattern(), RunId::MAX_LEN, RunId::parse, &runs);
        let datasets = [&format!("ds_{body}"), &format!("run_{body}"), "ds_", &format!("ds_{body}\n")];
        agree(DatasetId::pattern(), DatasetId::MAX_LEN, DatasetId::parse, &datasets);
        agree(
            JobId::pattern(),
            JobId::MAX_LEN,
            JobId::parse,
            &[&format!("job_{body}"), &format!("job_{body}u")],
        );
        agree(
            ModelVersionId::pattern(),
            ModelVersionId::MAX_LEN,
            ModelVersionId::parse,
            &[&format!("mv_{body}"), "mv_x"],
        );
        agree(
            WebhookId::pattern(),
            WebhookId::MAX_LEN,
            WebhookId::parse,
            &[&format!("wh_{body}"), &format!("wh_{}", &body[..25])],
        );
        agree(
            DeliveryId::pattern(),
            DeliveryId::MAX_LEN,
            DeliveryId::parse,
            &[&format!("msg_{body}"), &format!("msg-{body}")],
        );
        let long = format!("{}@x.io", "a".repeat(249));
        let too_long = format!("{}@x.io", "a".repeat(250));
        let emails = [
            "dev@dev.local",
            "a.b+c@x-y.example.org",
            "a@b",
            "a@b.",
            "a@.b",
            "a@-b.c",
            "a@b..c",
            ".a@b.c",
            "a.@b.c",
            "a..b@c.d",
            "A@b.c",
            "a/b@c.d",
            "a@b_c.d",
            "@b.c",
            "a@@b.c",
            "",
            &long,
            &too_long,
        ];
        agree(UserId::pattern(), UserId::MAX_LEN, UserId::parse, &emails);
        agree(
            Nonce::pattern(),
            Nonce::MAX_LEN,
            Nonce::parse,
            &["0123456789abcdef0123456789abcdef", "0123456789ABCDEF0123456789abcdef", "00"],
        );
    }

    #[test]
    fn slugs_are_validated() {
        assert!(TenantId::parse("acme").is_ok());
        assert!(TenantId::parse("acme-eu-2").is_ok());
        for bad in ["", "Acme", "1acme", "acme-", "ac me", "acme/x", &"a".repeat(41)] {
            assert!(TenantId::parse(bad).is_err(), "{bad:?} must be refused");
        }
    }

    #[test]
    fn generated_ids_sort_by_time_and_round_trip() {
        let a = RunId::generate(Timestamp::from_secs(1_000), [0xff; 10]);
        let b = RunId::generate(Timestamp::from_secs(1_001), [0; 10]);
        assert!(a < b);
        assert_eq!(RunId::parse(a.as_str()).ok(), Some(a.clone()));
        assert!(RunId::parse("run_../../etc").is_err());
        assert!(RunId::parse(&a.as_str().replace("run_", "ds_")).is_err());
    }

    #[test]
    fn task_nonces_differ_per_task_and_keep_task_zero() {
        let n = Nonce::from_bytes([7; 16]);
        assert_eq!(n.for_task(0), n);
        let all: std::collections::BTreeSet<_> = (0..256).map(|i| n.for_task(i)).collect();
        assert_eq!(all.len(), 256);
        assert!(all.iter().all(|t| Nonce::parse(t.as_str()).is_ok()));
    }

    #[test]
    fn emails_must_be_lower_case() {
        assert!(UserId::parse("dev@dev.local").is_ok());
        assert!(UserId::parse("Dev@dev.local").is_err());
        assert!(UserId::parse("nobody").is_err());
        assert!(UserId::parse("a.b+tag@dev.local").is_ok());
        for bad in
            ["../../admin@dev.local", "a/b@dev.local", "a@b@dev.local", "a@dev..local", "a b@dev.local"]
        {
            assert!(UserId::parse(bad).is_err(), "{bad}");
        }
    }
}
