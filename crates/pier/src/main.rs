//! pier: the binary. An OCI runtime with runc's command line (`commands/`, one module per verb,
//! clap structs only here) and runc-style logging (`logging.rs`). The runtime itself is the
//! `pier-runtime` library.
mod commands;
mod logging;

fn main() {
    std::process::exit(commands::main());
}
