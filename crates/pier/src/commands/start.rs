//! `pier start`: lets a created container's init process exec the user program.
use pier_runtime::Runtime;

/// Flags of `start`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Start the program of a created container",
    long_about = "Start the user program of a container made by `pier create`: its init process, \
held until now, executes process.args of config.json. pier returns at once.\n\n\
Example:\n  pier create -b /containers/web web && pier start web"
)]
pub struct Args {
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    rt.start(&args.id)?;
    Ok(0)
}
