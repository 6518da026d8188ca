//! `mapi-worker`: the program an execution runs. See the library.

fn main() {
    std::process::exit(mapi_worker::main_with_args(std::env::args().skip(1).collect()));
}
