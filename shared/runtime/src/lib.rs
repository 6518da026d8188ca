//! The runtime every function binary hands its router to, in the spirit of
//! `lambda_runtime`: a `main` reads its own config, builds its state and calls
//! [`run`], which reads the process environment ([`RuntimeConfig`]), installs
//! Cloud Logging JSON logs ([`init_logging`]), adds `/health`, `/build-info`
//! and `/metrics` ([`common_routes`]), instruments every request
//! ([`instrument`]) and serves on `0.0.0.0:$PORT` until SIGTERM, draining
//! in-flight requests before returning ([`serve`]). Every connection is read
//! through a guard that answers any request the HTTP layer refuses (a head
//! too large, malformed or too slow) with `application/problem+json` and
//! times out idle and stalled connections ([`GuardConfig`]).

pub mod config;
mod guard;
mod http;
mod logging;
pub mod memory;
mod serve;
pub mod trace;

use std::net::SocketAddr;

use axum::Router;
use mapi_metrics::Metrics;

pub use crate::config::{ConfigError, GuardConfig, RuntimeConfig, VARIABLES};
pub use crate::http::{
    API_VERSION, BuildInfo, OPENMETRICS_CONTENT_TYPE, UNMATCHED_ROUTE, common_routes, instrument,
};
pub use crate::logging::{
    CloudLogFormat, HTTP_REQUEST, HUMAN_QUIET, HumanFormat, LogFormat, SPAN_ID, SpanFieldsLayer, TRACE_ID,
    TRACE_SAMPLED, init_logging, init_logging_as, init_logging_to, subscriber,
};
pub use crate::serve::{serve, shutdown_signal};

/// Who is running: set by each binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceInfo {
    /// The service's short name, e.g. `"submit"`.
    pub name: &'static str,
    /// The binary's `env!("CARGO_PKG_VERSION")`.
    pub version: &'static str,
}

impl BuildInfo {
    /// The build of `info`: the git commit is `MAPI_GIT_COMMIT` as set when
    /// this crate was compiled, else as set in the environment at run time,
    /// else `unknown`.
    pub fn new(info: ServiceInfo) -> Self {
        Self::with_runtime_commit(info, std::env::var("MAPI_GIT_COMMIT").ok())
    }

    fn with_runtime_commit(info: ServiceInfo, runtime_commit: Option<String>) -> Self {
        let git_commit = option_env!("MAPI_GIT_COMMIT")
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .or(runtime_commit.filter(|c| !c.is_empty()))
            .unwrap_or_else(|| "unknown".to_owned());
        BuildInfo {
            service: info.name.to_owned(),
            version: info.version.to_owned(),
            git_commit,
            api_version: API_VERSION,
        }
    }
}

/// Why [`run`] stopped other than by a clean shutdown.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    #[error("server failed: {0}")]
    Serve(std::io::Error),
}

/// Runs a service: reads [`RuntimeConfig`] from the environment, installs
/// logging, merges [`common_routes`] into `router` (which must not define
/// them itself), instruments it with `metrics` (the same [`Metrics`] the
/// service's state holds, so `/metrics` shows them all), serves on
/// `0.0.0.0:$PORT` and returns after SIGTERM or SIGINT once drained.
pub async fn run(info: ServiceInfo, metrics: Metrics, router: Router) -> Result<(), RunError> {
    let config = RuntimeConfig::from_env()?;
    match config.log_format {
        Some(LogFormat::Human) => {
            init_logging_as(LogFormat::Human, info.name, &config.log_filter, std::io::stdout)
        }
        _ => init_logging(info.name, config.project_id.as_deref(), &config.log_filter),
    }
    let build = BuildInfo::new(info);
    let app = instrument(router.merge(common_routes(build.clone(), metrics.clone())), metrics);
    let addr = SocketAddr::from(([0, 0, 0, 0], config.port));
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|source| RunError::Bind { addr, source })?;
    tracing::info!(
        address = %addr,
        version = %build.version,
        git_commit = %build.git_commit,
        project = config.project_id.as_deref(),
        "listening"
    );
    serve(listener, app, shutdown_signal(), config.drain_timeout, config.guard)
        .await
        .map_err(RunError::Serve)?;
    tracing::info!("drained");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: ServiceInfo = ServiceInfo { name: "submit", version: "1.2.3" };

    #[test]
    fn build_info_from_service_info() {
        let build = BuildInfo::with_runtime_commit(INFO, Some("abc123".into()));
        let expected_commit = option_env!("MAPI_GIT_COMMIT").filter(|c| !c.is_empty()).unwrap_or("abc123");
        assert_eq!(
            build,
            BuildInfo {
                service: "submit".into(),
                version: "1.2.3".into(),
                git_commit: expected_commit.into(),
                api_version: "v1",
            }
        );
    }

    #[test]
    fn git_commit_is_unknown_when_never_set() {
        let build = BuildInfo::with_runtime_commit(INFO, Some(String::new()));
        let expected = option_env!("MAPI_GIT_COMMIT").filter(|c| !c.is_empty()).unwrap_or("unknown");
        assert_eq!(build.git_commit, expected);
    }
}
