//! `pier resume`: thaws a paused container.
use pier_runtime::Runtime;

/// Flags of `resume`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Thaw a paused container",
    long_about = "Thaw every process of a container frozen by `pier pause`.\n\n\
Example:\n  pier resume web"
)]
pub struct Args {
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    rt.resume(&args.id)?;
    Ok(0)
}
