//! `pier stop`: SIGTERM, then SIGKILL after the grace period; prints each container as named.
use pier_engine::engine::Engine;
use std::time::Duration;

/// Flags of `stop`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Stop containers: SIGTERM, then SIGKILL after the grace period",
    after_help = "Examples:\n  pier stop web\n  pier stop -t 1 web db"
)]
pub struct Args {
    /// Seconds to wait before SIGKILL
    #[arg(
        short = 't',
        long = "time",
        visible_alias = "timeout",
        value_name = "SECS",
        default_value_t = 10
    )]
    time: u64,
    /// Container names or ids
    #[arg(required = true)]
    containers: Vec<String>,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let timeout = Duration::from_secs(args.time);
    Ok(super::for_each(&args.containers, |container| {
        engine.stop(container, timeout)?;
        println!("{container}");
        Ok(())
    }))
}
