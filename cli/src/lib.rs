//! The `mapi` command.
//!
//! - `mapi dev`: the whole platform on one machine (`mapi-embedded`).
//! - `mapi datasets upload|ls`, `mapi runs submit|get|ls|cancel|watch`,
//!   `mapi models versions ls|get|urls|download`, `mapi methods ls|show`,
//!   `mapi whoami`: talk to a platform over HTTP, as the token in
//!   `MAPI_TOKEN` (or the one `mapi dev` wrote to
//!   `$MAPI_HOME/credentials.json`). Human tables by default, `--json` for
//!   programs.
//! - `mapi bench submit|cold-start`: the measurements behind BENCHMARKS.md.
//! - `mapi worker`: the execution entry point (`mapi-worker`), embedded so
//!   `mapi dev` needs no second binary.

mod account;
#[cfg(feature = "platform")]
pub mod bench;
mod browser_login;
pub mod client;
mod commands;
mod compare;
mod confirm;
mod context;
mod download;
mod endpoints;
mod error;
mod experiments;
mod governance;
mod jobs;
mod logs;
mod methods;
mod model_view;
mod models;
mod output;
#[cfg(feature = "platform")]
mod platform;
mod plugins;
mod runs;
mod session;
mod webhooks;
mod workflows;

pub use commands::main;
