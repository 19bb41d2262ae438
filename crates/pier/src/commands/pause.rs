//! `pier pause`: freezes every process of the container (cgroup freezer).
use pier_runtime::Runtime;

/// Flags of `pause`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Freeze every process of a running container",
    long_about = "Freeze every process of a running container with the cgroup freezer; \
`pier resume` thaws them.\n\nExample:\n  pier pause web"
)]
pub struct Args {
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    rt.pause(&args.id)?;
    Ok(0)
}
