//! `pier create`: builds the container up to its init process, held before the user program.
use pier_runtime::{CreateOptions, Runtime};
use std::path::PathBuf;

/// Flags of `create` (shared with `run`).
#[derive(clap::Args, Debug)]
#[command(
    about = "Create a container from a bundle; its program runs on `pier start`",
    long_about = "Create a container from an OCI bundle (a directory with config.json and the root \
filesystem it names). The container's namespaces, mounts and cgroups are set up and its init \
process waits before the user program: nothing of the container runs until `pier start ID`.\n\n\
Example:\n  pier create --bundle /containers/web --pid-file /run/web.pid web\n  pier start web"
)]
pub struct Args {
    #[command(flatten)]
    pub bundle: BundleArgs,
    /// Accepted for runc compatibility (go-runc may pass it) and ignored: create always returns
    #[arg(short = 'd', long, hide = true)]
    pub detach: bool,
    /// Container id (unique under --root; letters, digits, '_', '+', '-', '.')
    pub id: String,
}

/// Bundle and process-setup flags of `create` and `run`.
#[derive(clap::Args, Debug)]
pub struct BundleArgs {
    /// The bundle directory (holding config.json)
    #[arg(short = 'b', long, default_value = ".", value_name = "DIR")]
    pub bundle: PathBuf,
    /// Write the init process's pid to FILE
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// AF_UNIX socket that receives the pty master when process.terminal is true
    #[arg(long, value_name = "SOCKET")]
    pub console_socket: Option<PathBuf>,
    /// Use chroot-like MS_MOVE instead of pivot_root (for a rootfs on a ramdisk)
    #[arg(long)]
    pub no_pivot: bool,
    /// Keep the caller's session keyring instead of creating a new one
    #[arg(long)]
    pub no_new_keyring: bool,
    /// Pass N file descriptors after stdio (3 .. 3+N-1) on to the container
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub preserve_fds: u32,
}

impl BundleArgs {
    /// The runtime's options, every path made absolute.
    pub fn options(&self) -> CreateOptions {
        CreateOptions {
            bundle: super::absolute(&self.bundle),
            pid_file: self.pid_file.as_deref().map(super::absolute),
            console_socket: self.console_socket.as_deref().map(super::absolute),
            no_pivot: self.no_pivot,
            no_new_keyring: self.no_new_keyring,
            preserve_fds: self.preserve_fds,
        }
    }
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    rt.create(&args.id, &args.bundle.options())?;
    Ok(0)
}
