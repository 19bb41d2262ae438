//! `pier delete`: removes a stopped (or created) container; `--force` kills a running one first.
//!
//! As in runc, `--force` on a container that does not exist succeeds: callers (containerd's
//! shim, Podman) use it to clean up whatever may be left, and must not fail when nothing is.
use pier_runtime::{Error, Runtime};

/// Flags of `delete`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Delete a container and everything pier made for it",
    long_about = "Delete a stopped or created container: its state under --root, its cgroups and \
mounts; the poststop hooks run. A running container is refused unless --force, which kills it \
with SIGKILL and waits for it first.\n\n\
Example:\n  pier delete web\n  pier delete --force web"
)]
pub struct Args {
    /// Kill the container first if it is still running
    #[arg(short = 'f', long)]
    pub force: bool,
    /// Container id
    pub id: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    match rt.delete(&args.id, args.force) {
        Err(Error::NotExist(_)) if args.force => Ok(0),
        result => result.map(|()| 0).map_err(Into::into),
    }
}
