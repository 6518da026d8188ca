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
    TRACE_SAMPLED, init_logging, init_logging_as, init_logging_labelled, init_logging_to, subscriber,
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
    /// The build of `info`: its git commit and build time are
    /// `MAPI_GIT_COMMIT` and `MAPI_BUILD_TIME` as set when this crate was
    /// compiled (the images' builds pass them), else as set in the
    /// environment at run time, else `unknown`.
    pub fn new(info: ServiceInfo) -> Self {
        let runtime = |name| std::env::var(name).ok();
        Self::stamped(
            info,
            stamp(option_env!("MAPI_GIT_COMMIT"), runtime("MAPI_GIT_COMMIT")),
            stamp(option_env!("MAPI_BUILD_TIME"), runtime("MAPI_BUILD_TIME")),
        )
    }

    fn stamped(info: ServiceInfo, git_commit: String, build_time: String) -> Self {
        BuildInfo {
            service: info.name.to_owned(),
            version: info.version.to_owned(),
            git_commit,
            build_time,
            api_version: API_VERSION,
        }
    }

    /// What each log line's labels say of the build.
    pub fn labels(&self) -> Vec<(&'static str, String)> {
        vec![
            ("version", self.version.clone()),
            ("git_commit", self.git_commit.clone()),
            ("build_time", self.build_time.clone()),
        ]
    }
}

/// A build stamp: the value compiled in, else the one in the environment at
/// run time, else `unknown` (an empty value counts as unset).
fn stamp(compiled: Option<&str>, runtime: Option<String>) -> String {
    compiled
        .filter(|c| !c.is_empty())
        .map(str::to_owned)
        .or(runtime.filter(|c| !c.is_empty()))
        .unwrap_or_else(|| "unknown".to_owned())
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
    let build = BuildInfo::new(info);
    match config.log_format {
        Some(LogFormat::Human) => {
            init_logging_as(LogFormat::Human, info.name, &config.log_filter, std::io::stdout)
        }
        _ => init_logging_labelled(info.name, config.project_id.as_deref(), &config.log_filter, &build),
    }
    let app = instrument(router.merge(common_routes(build.clone(), metrics.clone())), metrics);
    let addr = SocketAddr::from(([0, 0, 0, 0], config.port));
    let listener =
        tokio::net::TcpListener::bind(addr).await.map_err(|source| RunError::Bind { addr, source })?;
    tracing::info!(
        address = %addr,
        version = %build.version,
        git_commit = %build.git_commit,
        build_time = %build.build_time,
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
    fn a_stamp_compiled_in_wins_then_the_runtime_s_then_unknown() {
        assert_eq!(stamp(Some("abc123"), Some("def456".into())), "abc123");
        assert_eq!(stamp(Some(""), Some("def456".into())), "def456", "an empty build arg is unset");
        assert_eq!(stamp(None, Some(String::new())), "unknown");
        assert_eq!(stamp(None, None), "unknown");
    }

    #[test]
    fn build_info_carries_the_service_and_both_stamps() {
        let build = BuildInfo::stamped(INFO, "abc123".into(), "2026-12-06T04:00:00Z".into());
        assert_eq!(
            build,
            BuildInfo {
                service: "submit".into(),
                version: "1.2.3".into(),
                git_commit: "abc123".into(),
                build_time: "2026-12-06T04:00:00Z".into(),
                api_version: "v1",
            }
        );
        let labels = build.labels();
        assert_eq!(labels[1], ("git_commit", "abc123".to_owned()));
    }
}
