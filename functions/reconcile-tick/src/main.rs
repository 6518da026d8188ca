//! The `reconcile-tick` function's process: configuration, state, and the shared runtime.

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let info = mapi_runtime::ServiceInfo { name: "reconcile-tick", version: env!("CARGO_PKG_VERSION") };
    mapi_platform::serve_function(
        info,
        mapi_platform::Service::ReconcileTick,
        mapi_reconcile_tick::router,
        utoipa::openapi::OpenApi::default,
    )
    .await
}
