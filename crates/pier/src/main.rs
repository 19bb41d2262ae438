//! pier: the binary. One front end per verb under `commands/`, clap structs only here.
//! (Skeleton: the runtime verbs are being written; see crates/runtime.)
mod commands;

fn main() {
    std::process::exit(commands::main());
}
