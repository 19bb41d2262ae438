//! `pier rm`: removes stopped containers (`-f`: kills running ones first) and all they own.
use pier_engine::engine::Engine;

/// Flags of `rm`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Remove containers and everything they own (network, leases, layers, log)",
    after_help = "Examples:\n  pier rm web\n  pier rm -f web db\n  pier rm $(pier ps -aq)"
)]
pub struct Args {
    /// Kill a running container first
    #[arg(short = 'f', long)]
    force: bool,
    /// Container names or ids
    #[arg(required = true)]
    containers: Vec<String>,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    Ok(super::for_each(&args.containers, |container| {
        engine.rm(container, args.force)?;
        println!("{container}");
        Ok(())
    }))
}
