//! What runs inside an execution.
//!
//! - With no arguments, the **supervisor**: the entry point of every task
//!   (see [`supervisor`]).
//! - `local-exec --dir <dir>`: the local execution host that the
//!   local-process executor starts (Cloud Run's role on one machine).
//! - `serve`: the model server of an endpoint's revision (see [`serve`]).
//! - `forward --uds PATH --port N -- PROGRAM [ARGS...]`: runs a container
//!   image's server, reached through a Unix socket (see [`forward`]).
//!
//! The `mapi` CLI embeds the same entry point as its `worker` subcommand,
//! so `mapi dev` runs without a separately built worker.

pub mod bootstrap;
pub mod bridge;
pub mod forward;
pub mod plugin;
pub mod probe;
pub mod python;
pub mod serve;
pub mod serve_plugin;
pub mod supervisor;

use std::path::PathBuf;

/// Runs the worker with `args` (without the program name); returns the
/// process exit code.
pub fn main_with_args(args: Vec<String>) -> i32 {
    match args.first().map(String::as_str) {
        None => supervisor::main(),
        Some("local-exec") => match args.get(1).map(String::as_str) {
            Some("--dir") if args.len() == 3 => {
                let dir = PathBuf::from(&args[2]);
                match mapi_executor::local::host::run(&dir) {
                    Ok(_) => 0,
                    Err(e) => {
                        supervisor::log("ERROR", &format!("execution host failed in {}: {e}", dir.display()));
                        1
                    }
                }
            }
            _ => usage(),
        },
        Some("serve") if args.len() == 1 => serve::main(),
        Some("forward") => forward::Forward::parse(&args[1..]).map_or_else(usage, forward::Forward::run),
        Some(_) => usage(),
    }
}

/// An error with its sources, in words.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

fn usage() -> i32 {
    eprintln!(
        "usage: mapi-worker                      (run the task described by MAPI_RUN_ID, MAPI_NONCE, MAPI_BOOTSTRAP_URL)\n       mapi-worker local-exec --dir DIR   (host one local execution)\n       mapi-worker serve                  (serve the model version described by MAPI_SERVE_*, on PORT)\n       mapi-worker forward --uds PATH --port N -- PROGRAM [ARGS...]   (run PROGRAM, reached on its TCP port N through the Unix socket PATH)"
    );
    2
}
