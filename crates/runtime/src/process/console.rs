//! Console support for `--console-socket` (runc's protocol, as containerd's shim and conmon
//! speak it).
//!
//! Theory of operation: the runtime connects to the caller's AF_UNIX stream socket before the
//! clone ([`connect`]) and passes the connected fd to the container. In the container, after the
//! root is final and while /dev is still writable ([`setup_in_container`]): a pty is opened from
//! the container's own `/dev/ptmx` (so the slave lives in the container's devpts), unlocked, the
//! slave is bind-mounted on `/dev/console` (for the init only: an exec'd process gets its own
//! pty and leaves the container's console alone, as runc's exec does — [`setup_for_exec`]), the
//! size from `process.consoleSize` is set, and the master is sent over the socket as one
//! SCM_RIGHTS message whose payload is the master's name (`/dev/ptmx`, what runc's
//! `utils.SendFile` sends and the receivers' `RecvFd` uses to name the file). The process then
//! becomes a session leader, makes the slave its controlling terminal and its stdin, stdout and
//! stderr.
//!
//! Privileges: mounting on /dev/console needs CAP_SYS_ADMIN in the container's mount namespace.
//! Tests: `tests/priv_process.rs` receives the master and talks to the shell through it;
//! `tests/priv_lifecycle.rs` checks that `exec --tty` leaves /dev/console alone.
use super::ProcessError;
use nix::fcntl::OFlag;
use nix::mount::MsFlags;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use oci_spec::runtime::Box as ConsoleSize;
use std::fs::OpenOptions;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The name runc sends with the master fd (the file it was opened from).
const MASTER_NAME: &[u8] = b"/dev/ptmx";
const CONSOLE: &str = "/dev/console";

/// Runtime side, before clone: connects to the AF_UNIX socket given with `--console-socket`.
pub fn connect(socket: &Path) -> Result<OwnedFd, ProcessError> {
    UnixStream::connect(socket)
        .map(OwnedFd::from)
        .map_err(|source| ProcessError::ConsoleConnect {
            path: socket.to_path_buf(),
            source,
        })
}

/// In the container, after `rootfs::setup`: opens a pty from the container's `/dev/ptmx`,
/// sends the master over `socket` with SCM_RIGHTS, bind-mounts the slave on `/dev/console`,
/// makes it the controlling terminal and stdin/stdout/stderr.
pub fn setup_in_container(socket: OwnedFd) -> Result<(), ProcessError> {
    setup_in_container_sized(socket, None)
}

/// [`setup_in_container`] that also sets the terminal's size (`process.consoleSize`) before
/// the master is handed over, as runc does.
pub fn setup_in_container_sized(
    socket: OwnedFd,
    size: Option<&ConsoleSize>,
) -> Result<(), ProcessError> {
    setup(socket, size, Console::Mount)
}

/// For a process exec'd into a running container: [`setup_in_container_sized`] without the
/// mount on `/dev/console`, which stays the init's.
pub fn setup_for_exec(socket: OwnedFd, size: Option<&ConsoleSize>) -> Result<(), ProcessError> {
    setup(socket, size, Console::Keep)
}

/// Whether the pty slave becomes the container's `/dev/console`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Console {
    /// Bind-mount it there (the container's init).
    Mount,
    /// Leave `/dev/console` as it is (an exec'd process).
    Keep,
}

fn setup(
    socket: OwnedFd,
    size: Option<&ConsoleSize>,
    console: Console,
) -> Result<(), ProcessError> {
    let step = |step: &'static str| {
        move |e: nix::errno::Errno| ProcessError::Console {
            step,
            source: e.into(),
        }
    };
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .map_err(step("open /dev/ptmx"))?;
    nix::pty::unlockpt(&master).map_err(step("unlock the pty"))?;
    if let Some(size) = size {
        let (rows, cols) = (clamp(size.height()), clamp(size.width()));
        pier_sys::process::set_window_size(master.as_fd(), rows, cols).map_err(|source| {
            ProcessError::Console {
                step: "set the terminal size",
                source,
            }
        })?;
    }
    let slave =
        PathBuf::from(nix::pty::ptsname_r(&master).map_err(step("get the pty slave name"))?);
    if console == Console::Mount {
        mount_console(&slave)?;
    }
    let iov = [IoSlice::new(MASTER_NAME)];
    let fds = [master.as_raw_fd()];
    sendmsg::<()>(
        socket.as_raw_fd(),
        &iov,
        &[ControlMessage::ScmRights(&fds)],
        MsgFlags::empty(),
        None,
    )
    .map_err(step("send the pty master over the console socket"))?;
    drop(master);
    drop(socket);
    become_session_leader()?;
    attach_stdio(&slave)
}

fn clamp(v: u64) -> u16 {
    u16::try_from(v).unwrap_or(u16::MAX)
}

/// Bind-mounts the pty slave on `/dev/console`, creating the mount point if missing.
fn mount_console(slave: &Path) -> Result<(), ProcessError> {
    let path_err = |step: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source: std::io::Error| ProcessError::ConsolePath { step, path, source }
    };
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o666)
        .open(CONSOLE)
        .map_err(path_err("create", Path::new(CONSOLE)))?;
    nix::mount::mount(
        Some(slave),
        CONSOLE,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| path_err("bind-mount the pty slave on /dev/console from", slave)(e.into()))
}

/// setsid, tolerating a process that already leads its session.
fn become_session_leader() -> Result<(), ProcessError> {
    match nix::unistd::setsid() {
        Err(nix::errno::Errno::EPERM)
            if nix::unistd::getsid(None).ok() == Some(nix::unistd::getpid()) =>
        {
            Ok(())
        }
        other => other.map(drop).map_err(|e| ProcessError::Console {
            step: "setsid",
            source: e.into(),
        }),
    }
}

/// Opens the slave, makes it the controlling terminal and dups it onto fds 0, 1 and 2.
fn attach_stdio(slave: &Path) -> Result<(), ProcessError> {
    let tty = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(slave)
        .map_err(|source| ProcessError::ConsolePath {
            step: "open the pty slave",
            path: slave.to_path_buf(),
            source,
        })?;
    pier_sys::process::set_controlling_terminal(tty.as_fd()).map_err(|source| {
        ProcessError::Console {
            step: "make the pty the controlling terminal",
            source,
        }
    })?;
    let dup = |step: &'static str, r: nix::Result<()>| {
        r.map_err(|e| ProcessError::Console {
            step,
            source: e.into(),
        })
    };
    dup("dup the pty onto stdin", nix::unistd::dup2_stdin(&tty))?;
    dup("dup the pty onto stdout", nix::unistd::dup2_stdout(&tty))?;
    dup("dup the pty onto stderr", nix::unistd::dup2_stderr(&tty))
}
