//! Process-level configuration every service reads from its environment:
//! the port Cloud Run assigns, the project (for trace correlation), the log
//! filter, how long to drain after SIGTERM, and the limits and timeouts the
//! connection guard holds every request to ([`GuardConfig`]).

use std::time::Duration;

use mapi_settings::{Env, Invalid, Var};
use tracing_subscriber::EnvFilter;

/// `PORT`.
pub const PORT: Var = Var::new("PORT", "8080", "The port to listen on (Cloud Run sets it)");
/// `MAPI_LOG`.
pub const LOG: Var = Var::new("MAPI_LOG", "info", "Log filter (tracing-subscriber syntax)");
/// `MAPI_LOG_FORMAT`.
pub const LOG_FORMAT: Var = Var::derived(
    "MAPI_LOG_FORMAT",
    "`json`; `human` for `mapi dev` on a terminal",
    "How log lines look: `json` (one Cloud Logging object per line) or `human` (short lines; one per request only with MAPI_LOG=debug)",
);
/// `MAPI_DRAIN_TIMEOUT_S`: Cloud Run waits 10 s between SIGTERM and SIGKILL.
pub const DRAIN_TIMEOUT_S: Var =
    Var::new("MAPI_DRAIN_TIMEOUT_S", "10", "How long in-flight requests may finish after SIGTERM");

/// `MAPI_MAX_URI_BYTES`.
pub const MAX_URI_BYTES: Var = Var::new(
    "MAPI_MAX_URI_BYTES",
    "8192",
    "The longest request URI served, in bytes; a longer one is answered 414 (at most 65534)",
);
/// `MAPI_MAX_HEADER_BYTES`.
pub const MAX_HEADER_BYTES: Var = Var::new(
    "MAPI_MAX_HEADER_BYTES",
    "65536",
    "The largest request head (request line and headers) served, in bytes; a larger one is answered 431 (at most 409600)",
);
/// `MAPI_MAX_HEADERS`.
pub const MAX_HEADERS: Var = Var::new(
    "MAPI_MAX_HEADERS",
    "100",
    "The most header fields a request may have; more are answered 431 (at most 100)",
);
/// `MAPI_HEADER_READ_TIMEOUT_S`.
pub const HEADER_READ_TIMEOUT_S: Var = Var::new(
    "MAPI_HEADER_READ_TIMEOUT_S",
    "10",
    "How long a request head may take from its first byte to its end; a slower one is answered 408 and its connection closed",
);
/// `MAPI_IDLE_TIMEOUT_S`.
pub const IDLE_TIMEOUT_S: Var = Var::new(
    "MAPI_IDLE_TIMEOUT_S",
    "620",
    "How long a connection may wait for its next request before it is closed; above the 600 s Google front ends keep an idle connection, so they close it first",
);
/// `MAPI_BODY_READ_TIMEOUT_S`.
pub const BODY_READ_TIMEOUT_S: Var = Var::new(
    "MAPI_BODY_READ_TIMEOUT_S",
    "30",
    "The longest wait for the next byte of a request body; the body's read then fails",
);

/// Every variable the runtime reads and the README lists.
pub const VARIABLES: &[Var] = &[
    PORT,
    LOG,
    LOG_FORMAT,
    DRAIN_TIMEOUT_S,
    MAX_URI_BYTES,
    MAX_HEADER_BYTES,
    MAX_HEADERS,
    HEADER_READ_TIMEOUT_S,
    IDLE_TIMEOUT_S,
    BODY_READ_TIMEOUT_S,
];

/// The longest URI `MAPI_MAX_URI_BYTES` may allow: hyper refuses a longer
/// one by itself (with an empty 414), whatever the guard allows.
const URI_BYTES_CEILING: usize = 65_534;
/// The largest head `MAPI_MAX_HEADER_BYTES` may allow: below hyper's read
/// buffer (8 KiB + 400 KiB), which `axum::serve` does not let us raise and
/// past which hyper refuses a head by itself (with an empty 431).
const HEADER_BYTES_CEILING: usize = 409_600;
/// The most headers `MAPI_MAX_HEADERS` may allow: hyper's own limit, which
/// `axum::serve` does not let us raise.
const HEADERS_CEILING: usize = 100;

/// What the runtime reads from the environment. Empty variables count as unset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `$PORT`, default 8080.
    pub port: u16,
    /// `$GOOGLE_CLOUD_PROJECT`, used to qualify trace ids in logs.
    pub project_id: Option<String>,
    /// `$MAPI_LOG`, an `EnvFilter` directive such as `info,mapi_store=debug`; default `info`.
    pub log_filter: String,
    /// `$MAPI_LOG_FORMAT`; `None` when unset (JSON, but `mapi dev` on a terminal is human).
    pub log_format: Option<crate::LogFormat>,
    /// `$MAPI_DRAIN_TIMEOUT_S`, whole seconds; default 10.
    pub drain_timeout: Duration,
    /// What the connection guard holds every request to.
    pub guard: GuardConfig,
}

/// The limits and timeouts of the connection guard (see the `guard`
/// module): what a request head may be, and how long a client may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardConfig {
    /// `$MAPI_MAX_URI_BYTES`: the longest request-target; default 8 KiB.
    pub max_uri_bytes: usize,
    /// `$MAPI_MAX_HEADER_BYTES`: the largest head, request line and headers
    /// and the empty line ending them; default 64 KiB.
    pub max_header_bytes: usize,
    /// `$MAPI_MAX_HEADERS`: the most header fields; default 100.
    pub max_headers: usize,
    /// `$MAPI_HEADER_READ_TIMEOUT_S`: from a head's first byte to its end; default 10 s.
    pub header_read_timeout: Duration,
    /// `$MAPI_IDLE_TIMEOUT_S`: between requests, with no byte arriving; default 620 s.
    pub idle_timeout: Duration,
    /// `$MAPI_BODY_READ_TIMEOUT_S`: the longest wait for a body's next byte; default 30 s.
    pub body_read_timeout: Duration,
}

impl Default for GuardConfig {
    /// The declared defaults.
    fn default() -> Self {
        GuardConfig::from_env(&|_| None).expect("the declared defaults are valid (a test parses them)")
    }
}

impl GuardConfig {
    /// Reads the guard's variables through `env`.
    pub fn from_env(env: Env<'_>) -> Result<GuardConfig, Invalid> {
        Ok(GuardConfig {
            max_uri_bytes: bounded(&MAX_URI_BYTES, env, URI_BYTES_CEILING)?,
            max_header_bytes: bounded(&MAX_HEADER_BYTES, env, HEADER_BYTES_CEILING)?,
            max_headers: bounded(&MAX_HEADERS, env, HEADERS_CEILING)?,
            header_read_timeout: seconds(&HEADER_READ_TIMEOUT_S, env)?,
            idle_timeout: seconds(&IDLE_TIMEOUT_S, env)?,
            body_read_timeout: seconds(&BODY_READ_TIMEOUT_S, env)?,
        })
    }
}

/// A whole number from 1 to `ceiling`.
fn bounded(var: &Var, env: Env<'_>, ceiling: usize) -> Result<usize, Invalid> {
    let value: usize = var.parse(env)?;
    if !(1..=ceiling).contains(&value) {
        return Err(Invalid(format!("{} is {value}: write a whole number from 1 to {ceiling}", var.name)));
    }
    Ok(value)
}

/// A whole number of seconds, at least 1 (a timeout of 0 would refuse everything).
fn seconds(var: &Var, env: Env<'_>) -> Result<Duration, Invalid> {
    let value = var.seconds(env)?;
    if value.is_zero() {
        return Err(Invalid(format!("{} is 0: write a whole number of seconds, at least 1", var.name)));
    }
    Ok(value)
}

/// A variable that is set but unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("PORT must be a number between 1 and 65535, got `{0}`")]
    Port(String),
    #[error("MAPI_DRAIN_TIMEOUT_S must be a whole number of seconds, got `{0}`")]
    DrainTimeout(String),
    #[error(
        "MAPI_LOG must be a valid log filter such as `info` or `info,mapi_store=debug`, got `{value}`: {reason}"
    )]
    LogFilter { value: String, reason: String },
    #[error("MAPI_LOG_FORMAT `{0}`: use json or human")]
    LogFormat(String),
    #[error(transparent)]
    Guard(#[from] Invalid),
}

impl RuntimeConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(|key| std::env::var(key).ok())
    }

    /// Reads variables through `lookup`, which returns a variable's value or `None` if unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let env = |key: &str| lookup(key);
        let get = |key: &str| lookup(key).filter(|v| !v.is_empty());
        let raw = PORT.raw(&env).unwrap_or_default();
        let port = match raw.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => return Err(ConfigError::Port(raw)),
        };
        let raw = DRAIN_TIMEOUT_S.raw(&env).unwrap_or_default();
        let drain_timeout =
            Duration::from_secs(raw.parse::<u64>().map_err(|_| ConfigError::DrainTimeout(raw.clone()))?);
        let log_filter = LOG.raw(&env).unwrap_or_default();
        if let Err(e) = EnvFilter::try_new(&log_filter) {
            return Err(ConfigError::LogFilter { value: log_filter, reason: e.to_string() });
        }
        let log_format = match LOG_FORMAT.get(&env).as_deref() {
            None => None,
            Some(f) if f.eq_ignore_ascii_case("json") => Some(crate::LogFormat::Json),
            Some(f) if f.eq_ignore_ascii_case("human") => Some(crate::LogFormat::Human),
            Some(other) => return Err(ConfigError::LogFormat(other.to_owned())),
        };
        let guard = GuardConfig::from_env(&env)?;
        let project_id = get("GOOGLE_CLOUD_PROJECT");
        Ok(RuntimeConfig { port, project_id, log_filter, log_format, drain_timeout, guard })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<RuntimeConfig, ConfigError> {
        let vars: HashMap<String, String> =
            vars.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        RuntimeConfig::from_lookup(|k| vars.get(k).cloned())
    }

    #[test]
    fn defaults_when_nothing_is_set() {
        assert_eq!(
            config(&[]).expect("defaults"),
            RuntimeConfig {
                port: 8080,
                project_id: None,
                log_filter: "info".into(),
                log_format: None,
                drain_timeout: Duration::from_secs(10),
                guard: GuardConfig {
                    max_uri_bytes: 8 * 1024,
                    max_header_bytes: 64 * 1024,
                    max_headers: 100,
                    header_read_timeout: Duration::from_secs(10),
                    idle_timeout: Duration::from_secs(620),
                    body_read_timeout: Duration::from_secs(30),
                },
            }
        );
        assert_eq!(GuardConfig::default(), config(&[]).expect("defaults").guard);
    }

    #[test]
    fn empty_values_count_as_unset() {
        let c = config(&[("PORT", ""), ("GOOGLE_CLOUD_PROJECT", ""), ("MAPI_LOG", "")]).expect("defaults");
        assert_eq!(c.port, 8080);
        assert_eq!(c.project_id, None);
        assert_eq!(c.log_filter, "info");
    }

    #[test]
    fn reads_every_variable() {
        let c = config(&[
            ("PORT", "9000"),
            ("GOOGLE_CLOUD_PROJECT", "mapi-prod"),
            ("MAPI_LOG", "warn,mapi_store=debug"),
            ("MAPI_LOG_FORMAT", "human"),
            ("MAPI_DRAIN_TIMEOUT_S", "3"),
            ("MAPI_MAX_URI_BYTES", "1024"),
            ("MAPI_MAX_HEADER_BYTES", "409600"),
            ("MAPI_MAX_HEADERS", "20"),
            ("MAPI_HEADER_READ_TIMEOUT_S", "5"),
            ("MAPI_IDLE_TIMEOUT_S", "700"),
            ("MAPI_BODY_READ_TIMEOUT_S", "60"),
        ])
        .expect("valid");
        assert_eq!(
            c,
            RuntimeConfig {
                port: 9000,
                project_id: Some("mapi-prod".into()),
                log_filter: "warn,mapi_store=debug".into(),
                log_format: Some(crate::LogFormat::Human),
                drain_timeout: Duration::from_secs(3),
                guard: GuardConfig {
                    max_uri_bytes: 1024,
                    max_header_bytes: 409_600,
                    max_headers: 20,
                    header_read_timeout: Duration::from_secs(5),
                    idle_timeout: Duration::from_secs(700),
                    body_read_timeout: Duration::from_secs(60),
                },
            }
        );
    }

    #[test]
    fn a_log_format_is_json_or_human() {
        assert_eq!(
            config(&[("MAPI_LOG_FORMAT", "JSON")]).expect("json").log_format,
            Some(crate::LogFormat::Json)
        );
        let e = config(&[("MAPI_LOG_FORMAT", "pretty")]).expect_err("unknown");
        assert_eq!(e.to_string(), "MAPI_LOG_FORMAT `pretty`: use json or human");
    }

    #[test]
    fn every_listed_variable_is_read() {
        let read = mapi_settings::names_read(&|_| None, |env| {
            RuntimeConfig::from_lookup(env).expect("defaults");
        });
        for var in VARIABLES {
            assert!(read.contains(var.name), "{} is listed but not read", var.name);
        }
    }

    #[test]
    fn the_readme_states_the_ceilings_the_code_holds() {
        for (var, ceiling) in [
            (MAX_URI_BYTES, URI_BYTES_CEILING),
            (MAX_HEADER_BYTES, HEADER_BYTES_CEILING),
            (MAX_HEADERS, HEADERS_CEILING),
        ] {
            assert!(var.meaning.contains(&format!("(at most {ceiling})")), "{}: {}", var.name, var.meaning);
        }
    }

    /// A guard setting above hyper's own limit would let hyper refuse with
    /// an empty body again; zero would refuse everything.
    #[test]
    fn guard_settings_are_kept_within_hypers_limits() {
        let cases = [
            (
                "MAPI_MAX_URI_BYTES",
                "65535",
                "MAPI_MAX_URI_BYTES is 65535: write a whole number from 1 to 65534",
            ),
            (
                "MAPI_MAX_HEADER_BYTES",
                "409601",
                "MAPI_MAX_HEADER_BYTES is 409601: write a whole number from 1 to 409600",
            ),
            ("MAPI_MAX_HEADERS", "101", "MAPI_MAX_HEADERS is 101: write a whole number from 1 to 100"),
            ("MAPI_MAX_HEADERS", "0", "MAPI_MAX_HEADERS is 0: write a whole number from 1 to 100"),
            (
                "MAPI_HEADER_READ_TIMEOUT_S",
                "0",
                "MAPI_HEADER_READ_TIMEOUT_S is 0: write a whole number of seconds, at least 1",
            ),
            (
                "MAPI_IDLE_TIMEOUT_S",
                "soon",
                "MAPI_IDLE_TIMEOUT_S has an invalid value `soon`: write a whole number",
            ),
        ];
        for (name, value, error) in cases {
            let err = config(&[(name, value)]).expect_err(value);
            assert_eq!(err.to_string(), error);
        }
    }

    #[test]
    fn bad_port_is_a_clear_error() {
        for bad in ["abc", "0", "65536", "-1", "80.5"] {
            let err = config(&[("PORT", bad)]).expect_err(bad);
            assert_eq!(err.to_string(), format!("PORT must be a number between 1 and 65535, got `{bad}`"));
        }
    }

    #[test]
    fn bad_drain_timeout_is_a_clear_error() {
        let err = config(&[("MAPI_DRAIN_TIMEOUT_S", "ten")]).expect_err("not a number");
        assert_eq!(err.to_string(), "MAPI_DRAIN_TIMEOUT_S must be a whole number of seconds, got `ten`");
    }

    #[test]
    fn bad_log_filter_is_a_clear_error() {
        let err = config(&[("MAPI_LOG", "mapi_store=loud")]).expect_err("not a level");
        assert!(
            matches!(&err, ConfigError::LogFilter { value, .. } if value == "mapi_store=loud"),
            "{err:?}"
        );
        assert!(err.to_string().starts_with("MAPI_LOG must be a valid log filter"), "{err}");
    }
}
