//! `pier run`: create + start, then (unless `--detach`) wait and exit with the program's code.
use super::create::BundleArgs;
use pier_runtime::Runtime;

/// Flags of `run`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Create and start a container, wait for it and exit with its exit code",
    long_about = "Create and start a container from an OCI bundle. Without --detach pier waits for \
the container's program, deletes the container and exits with the program's exit code (128+N \
when signal N killed it). With --detach pier returns once the program runs.\n\n\
Example:\n  pier run --bundle /containers/web web\n  pier run -d -b /containers/web web"
)]
pub struct Args {
    #[command(flatten)]
    pub bundle: BundleArgs,
    /// Return once the program runs instead of waiting for it
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Accepted for runc compatibility and ignored
    #[arg(long, hide = true)]
    pub no_subreaper: bool,
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    Ok(rt.run(&args.id, &args.bundle.options(), args.detach)?)
}
