//! The `meter` function's process: configuration, state, and the shared runtime.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let info = mapi_runtime::ServiceInfo { name: "meter", version: env!("CARGO_PKG_VERSION") };
    mapi_platform::serve_function(
        info,
        mapi_platform::Service::Meter,
        mapi_meter::router,
        <mapi_meter::ApiDoc as utoipa::OpenApi>::openapi,
    )
    .await
}
