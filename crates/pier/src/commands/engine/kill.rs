//! `pier kill`: sends a signal (default SIGKILL, as Docker) to containers' init processes.
//! Signals are numbers or names with or without SIG, as in runc's `kill` (the same parser).
use pier_engine::engine::Engine;

use crate::commands::kill::parse_signal;

/// Flags of `kill`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Send a signal to containers (default KILL)",
    after_help = "Examples:\n  pier kill web\n  pier kill -s HUP web\n  pier kill --signal=USR1 web db"
)]
pub struct Args {
    /// Signal: a number or a name with or without SIG
    #[arg(short = 's', long, value_name = "SIGNAL", default_value = "KILL")]
    signal: String,
    /// Container names or ids
    #[arg(required = true)]
    containers: Vec<String>,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let signal = parse_signal(&args.signal)?;
    Ok(super::for_each(&args.containers, |container| {
        engine.kill(container, signal)?;
        println!("{container}");
        Ok(())
    }))
}
