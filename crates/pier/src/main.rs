//! pier: the binary. An OCI runtime with runc's command line (`commands/`, one module per verb,
//! clap structs only here) and runc-style logging (`log.rs`). The runtime itself is the
//! `pier-runtime` library.
mod commands;
mod log;

fn main() {
    std::process::exit(commands::main());
}
