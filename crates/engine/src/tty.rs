//! `-t`: the container's terminal, received over a console socket.
//!
//! Theory of operation: before `create` (or `exec`), the engine listens on a socket in the
//! temporary directory (removed when dropped) and names it as pier-runtime's console socket; the runtime connects
//! before it forks, and the container's init (or exec'd process) sends the master side of the
//! pty it made (SCM_RIGHTS) before reporting created (or exec'ing), so [`Console::master`]
//! only accepts and receives what is already queued. The
//! monitor then relays the master like a pipe (`monitor::supervise`): to the log (`-d -t`) or
//! to the caller's terminal, which [`RawMode`] puts in raw mode for the container's line
//! discipline to do the work, and restores on drop (also when the container fails). Window
//! size changes (SIGWINCH) are copied from the caller's terminal to the master.
//! Privileges: none beyond the container directory. Tests: crates/engine/tests/priv_engine.rs.
use nix::sys::termios::{self, SetArg, Termios};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// Why the terminal could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("{step} {path}: {source}")]
pub struct TtyError {
    step: &'static str,
    path: PathBuf,
    source: io::Error,
}

/// Where the console socket named `name` lives.
pub fn socket_path(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("pier-console-{name}"))
}

/// The listening console socket of one container.
#[derive(Debug)]
pub struct Console {
    listener: UnixListener,
    path: PathBuf,
}

impl Console {
    /// Listens on `<temp dir>/pier-console-<name>` (a socket path must fit in 108 bytes, which
    /// a container directory under a long state directory may not).
    pub fn listen(name: &str) -> Result<Console, TtyError> {
        let path = socket_path(name);
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).map_err(|source| TtyError {
            step: "listen on console socket",
            path: path.clone(),
            source,
        })?;
        Ok(Console { listener, path })
    }

    /// The socket path for pier-runtime's `console_socket`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pty master the init sent (already queued once `create` returned).
    pub fn master(&self) -> Result<OwnedFd, TtyError> {
        let err = |step| {
            let path = self.path.clone();
            move |source| TtyError { step, path, source }
        };
        let (conn, _) = self.listener.accept().map_err(err("accept console"))?;
        let mut buf = [0u8; 4096];
        let (_, fd) = pier_sys::process::recv_fd(conn.as_fd(), &mut buf)
            .map_err(err("receive the pty master"))?;
        fd.ok_or_else(|| err("receive the pty master")(io::ErrorKind::InvalidData.into()))
    }
}

impl Drop for Console {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The caller's terminal in raw mode until dropped.
#[derive(Debug)]
pub struct RawMode {
    tty: OwnedFd,
    saved: Termios,
}

impl RawMode {
    /// Raw mode on our stdin, when it is a terminal.
    pub fn enter() -> Option<RawMode> {
        let tty = io::stdin().as_fd().try_clone_to_owned().ok()?;
        let saved = termios::tcgetattr(&tty).ok()?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(&tty, SetArg::TCSANOW, &raw).ok()?;
        Some(RawMode { tty, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(&self.tty, SetArg::TCSANOW, &self.saved);
    }
}

/// Copies the window size of `from` (our terminal) to `to` (the pty master).
pub fn copy_size(from: BorrowedFd<'_>, to: BorrowedFd<'_>) {
    if let Ok((rows, cols)) = pier_sys::process::window_size(from) {
        let _ = pier_sys::process::set_window_size(to, rows, cols);
    }
}
