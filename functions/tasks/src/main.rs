//! The `tasks` function's process (the `submit-tasks` service): configuration, state, and the shared runtime.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let info = mapi_runtime::ServiceInfo { name: "tasks", version: env!("CARGO_PKG_VERSION") };
    mapi_platform::serve_function(
        info,
        mapi_platform::Service::Tasks,
        mapi_tasks::router,
        utoipa::openapi::OpenApi::default,
    )
    .await
}
