//! `pier port`: a container's published ports, `80/tcp -> 0.0.0.0:8080` per line.
use pier_engine::engine::Engine;

/// Flags of `port`.
#[derive(clap::Args, Debug)]
#[command(
    about = "List a container's published ports",
    after_help = "Example:\n  pier run -d --name web -p 80 host busybox httpd -f -p 80; pier port web"
)]
pub struct Args {
    /// Container name or id
    container: String,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    for line in engine.port(&args.container)? {
        println!("{line}");
    }
    Ok(0)
}
