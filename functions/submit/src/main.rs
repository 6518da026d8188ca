//! The `submit` function's process: configuration, state, and the shared runtime.

use utoipa::OpenApi;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let info = mapi_runtime::ServiceInfo { name: "submit", version: env!("CARGO_PKG_VERSION") };
    mapi_platform::serve_function(
        info,
        mapi_platform::Service::Submit,
        mapi_submit::router,
        mapi_submit::ApiDoc::openapi,
    )
    .await
}
