//! `mapi`: see the library for the commands.

fn main() -> std::process::ExitCode {
    mapi_cli::main()
}
