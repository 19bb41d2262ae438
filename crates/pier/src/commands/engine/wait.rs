//! `pier wait`: blocks until containers exit; prints each one's exit code.
use pier_engine::engine::Engine;

/// Flags of `wait`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Wait for containers to exit and print their exit codes",
    after_help = "Example:\n  pier run -d --name job host sh -c 'exit 3'; pier wait job   # prints 3"
)]
pub struct Args {
    /// Container names or ids
    #[arg(required = true)]
    containers: Vec<String>,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    Ok(super::for_each(&args.containers, |container| {
        println!("{}", engine.wait(container)?);
        Ok(())
    }))
}
