//! `pier state`: prints the container's OCI state as pretty JSON, as runc does.
use pier_runtime::Runtime;

/// Flags of `state`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Print the OCI state of a container as JSON",
    long_about = "Print the OCI state of a container as JSON: ociVersion, id, status (created, \
running, paused or stopped), pid, bundle, rootfs, created, owner and annotations.\n\n\
Example:\n  pier state web"
)]
pub struct Args {
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    let state = rt.state(&args.id)?;
    println!("{}", serde_json::to_string_pretty(&state)?);
    Ok(0)
}
