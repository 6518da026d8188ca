//! Every cross-crate suite, as modules of one test binary: each would
//! otherwise be its own crate, compiled and linked against the whole
//! platform on its own. `cargo test -p mapi-tests --test suites <module>::`
//! runs one suite (`docs::`, `jobs::`, …); `tests/src/lib.rs` catalogues
//! them.

mod adc;
mod admin_tour;
mod api;
mod architecture;
mod audit_log;
mod auth_attacks;

mod authz;
mod browser;
mod budgets;
mod cloud_platform;
mod cloudrun;
mod cloudrun_load;
mod cloudrun_logs;
mod cloudrun_runs;
mod cloudtasks;
mod contract;
mod crash;
mod cross_tenant;
mod datasets;
mod delivery;
mod deploy;
mod docs;
mod e2e;
mod endpoints;
mod executor_conformance;
mod experiments;
mod history;
mod hostile;
mod hosting_cloudrun;
mod hosting_local;
mod jobs;
mod ledger;
mod memory;
mod methods;
mod model_versions;
mod objects_gcs;
mod plugin_hostile;
mod plugin_runs;
mod plugins;
mod provider_schema;
mod push_auth;
mod python_methods;
mod quotas;
mod readme;
mod replay;
mod residency;
mod run_labels;
mod run_log;
mod run_retention;
mod run_retry;
mod shared_tiers;
mod sign_in;
mod signer_kms;
mod soak;
mod store_firestore;
mod tenant_life;
mod terraform;
mod ticks;
mod verify;
mod walkthrough;
mod webhooks;
