//! The `push-events` function's process: configuration, state, and the shared runtime.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let info = mapi_runtime::ServiceInfo { name: "push-events", version: env!("CARGO_PKG_VERSION") };
    mapi_platform::serve_function(
        info,
        mapi_platform::Service::PushEvents,
        mapi_push_events::router,
        utoipa::openapi::OpenApi::default,
    )
    .await
}
