//! The init's last mile. INTERFACE STUB: the process helper replaces the bodies (and may turn
//! this file into `process/mod.rs` with submodules).
//!
//! Owner: process (files `process.rs` or `process/`, `hooks.rs`, `crates/sys/src/{caps,process}.rs`).
use oci_spec::runtime::Process;
use std::os::fd::OwnedFd;
use std::path::Path;

/// Everything `exec` needs besides the spec's `process`.
#[derive(Debug)]
pub struct Exec<'a> {
    /// The spec's `process` (or the one given to `pier exec`).
    pub process: &'a Process,
    /// The compiled filter to install, if the spec has `linux.seccomp`.
    pub seccomp: Option<&'a pier_seccomp::Program>,
    /// `--preserve-fds N`: fds 3..3+N stay open in the container process.
    pub preserve_fds: u32,
    /// `LISTEN_FDS` passed through from the runtime's environment (systemd socket activation):
    /// that many fds after the preserved ones stay open and LISTEN_FDS/LISTEN_PID are set.
    pub listen_fds: u32,
    /// `--no-new-keyring`: keep the caller's session keyring instead of joining a new one.
    pub no_new_keyring: bool,
}

/// What failed while finishing the container process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// Placeholder until the process module lands.
    #[error("process setup is not built yet")]
    NotBuilt,
}

/// Runs in the container's init (or in a `pier exec` process) after the root is final: applies
/// session keyring, oomScoreAdj, rlimits, scheduler, ioPriority, personality, user/groups/umask,
/// capabilities, noNewPrivileges, AppArmor/SELinux exec labels, cwd, env, closes fds that are
/// not preserved, installs seccomp (handing a NOTIFY listener fd to `on_listener_fd`, which
/// forwards it to the runtime) and execs `process.args`. Returns only on failure.
pub fn exec(e: &Exec, on_listener_fd: &mut dyn FnMut(OwnedFd) -> Result<(), String>) -> ProcessError {
    let _ = (e, on_listener_fd);
    ProcessError::NotBuilt
}

/// Console support for `--console-socket` (runc's protocol).
pub mod console {
    use super::ProcessError;
    use std::os::fd::OwnedFd;
    use std::path::Path;

    /// Runtime side, before clone: connects to the AF_UNIX socket given with `--console-socket`.
    pub fn connect(socket: &Path) -> Result<OwnedFd, ProcessError> {
        let _ = socket;
        Err(ProcessError::NotBuilt)
    }

    /// In the container, after `rootfs::setup`: opens a pty from the container's `/dev/ptmx`,
    /// sends the master over `socket` with SCM_RIGHTS, bind-mounts the slave on `/dev/console`,
    /// makes it the controlling terminal and stdin/stdout/stderr.
    pub fn setup_in_container(socket: OwnedFd) -> Result<(), ProcessError> {
        let _ = socket;
        Err(ProcessError::NotBuilt)
    }
}

/// Keeps the rustdoc link target alive until the module lands.
#[doc(hidden)]
pub fn _unused(_: &Path) {}
