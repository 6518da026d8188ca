//! What a model server is told, by environment variable: the contract
//! between the hosting adapters, which set these on every revision, and
//! `mapi-worker serve`, which reads them.
//!
//! The server reads a bundle from a directory laid out by object key (the
//! object `K` is the file `{MAPI_SERVE_OBJECTS}/K`): a Cloud Storage bucket
//! mounted read-only on Cloud Run, a staged copy locally.

/// The port to listen on (Cloud Run sets it).
pub const PORT: &str = "PORT";
/// The address to listen on (default `0.0.0.0`; the local host uses `127.0.0.1`).
pub const LISTEN: &str = "MAPI_SERVE_LISTEN";
/// The directory the bundle's objects are under, by key.
pub const OBJECTS: &str = "MAPI_SERVE_OBJECTS";
/// The bundle's prefix key.
pub const BUNDLE: &str = "MAPI_SERVE_BUNDLE";
/// Hex SHA-256 the manifest must have.
pub const MANIFEST_SHA256: &str = "MAPI_SERVE_MANIFEST_SHA256";
/// JSON list of `mapi_signer::PublicKey`: the manifest's signature must verify under one.
pub const TRUSTED_KEYS: &str = "MAPI_SERVE_TRUSTED_KEYS";
/// The revision's tag, reported by `/health` and in every answer's `x-mapi-revision`.
pub const REVISION: &str = "MAPI_SERVE_REVISION";

/// The `runsc` program a plugin's model runs under; without it a server refuses one.
pub const RUNSC: &str = "MAPI_SERVE_RUNSC";

/// The path of the startup probe and of the health check.
pub const HEALTH_PATH: &str = "/health";
/// The scoring path.
pub const PREDICT_PATH: &str = "/predict";
/// The container port the cloud revision listens on.
pub const CONTAINER_PORT: u16 = 8080;
