//! The `admin` function's process: configuration, state, and the shared runtime.

use utoipa::OpenApi;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let info = mapi_runtime::ServiceInfo { name: "admin", version: env!("CARGO_PKG_VERSION") };
    mapi_platform::serve_function(
        info,
        mapi_platform::Service::Admin,
        mapi_admin::router,
        mapi_admin::ApiDoc::openapi,
    )
    .await
}
