//! Process-level configuration every service reads from its environment:
//! the port Cloud Run assigns, the project (for trace correlation), the log
//! filter and how long to drain after SIGTERM.

use std::time::Duration;

use mapi_settings::Var;
use tracing_subscriber::EnvFilter;

/// `PORT`.
pub const PORT: Var = Var::new("PORT", "8080", "The port to listen on (Cloud Run sets it)");
/// `MAPI_LOG`.
pub const LOG: Var = Var::new("MAPI_LOG", "info", "Log filter (tracing-subscriber syntax)");
/// `MAPI_DRAIN_TIMEOUT_S`: Cloud Run waits 10 s between SIGTERM and SIGKILL.
pub const DRAIN_TIMEOUT_S: Var =
    Var::new("MAPI_DRAIN_TIMEOUT_S", "10", "How long in-flight requests may finish after SIGTERM");

/// Every variable the runtime reads and the README lists.
pub const VARIABLES: &[Var] = &[PORT, LOG, DRAIN_TIMEOUT_S];

/// What the runtime reads from the environment. Empty variables count as unset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeConfig {
    /// `$PORT`, default 8080.
    pub port: u16,
    /// `$GOOGLE_CLOUD_PROJECT`, used to qualify trace ids in logs.
    pub project_id: Option<String>,
    /// `$MAPI_LOG`, an `EnvFilter` directive such as `info,mapi_store=debug`; default `info`.
    pub log_filter: String,
    /// `$MAPI_DRAIN_TIMEOUT_S`, whole seconds; default 10.
    pub drain_timeout: Duration,
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
        Ok(RuntimeConfig { port, project_id: get("GOOGLE_CLOUD_PROJECT"), log_filter, drain_timeout })
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
                drain_timeout: Duration::from_secs(10),
            }
        );
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
            ("MAPI_DRAIN_TIMEOUT_S", "3"),
        ])
        .expect("valid");
        assert_eq!(
            c,
            RuntimeConfig {
                port: 9000,
                project_id: Some("mapi-prod".into()),
                log_filter: "warn,mapi_store=debug".into(),
                drain_timeout: Duration::from_secs(3),
            }
        );
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
