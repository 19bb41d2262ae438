//! Process file descriptors: signal and wait for a process without pid-reuse races.
//!
//! Theory of operation: a pidfd refers to one process for its whole life; signalling through it
//! (`pidfd_send_signal`) can never hit a recycled pid, and it polls readable once the process
//! exited, which lets pier wait for a process that is not its child (`delete --force`) without
//! sleeping. Waiting for the exit status of a child uses `waitid(P_PIDFD)` (nix).
//!
//! Privileges: signalling needs the usual permission over the target. Tests:
//! crates/runtime/tests/priv_lifecycle.rs.
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

/// `pidfd_open(pid, 0)`: a close-on-exec pidfd of `pid`.
pub fn open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags by value and touches no memory of ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    crate::check(fd)?;
    // SAFETY: on success the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// `pidfd_send_signal(pidfd, signal, NULL, 0)`.
pub fn send_signal(pidfd: impl AsFd, signal: i32) -> io::Result<()> {
    // SAFETY: the fd is borrowed for the call; a NULL siginfo is allowed (the kernel fills it in
    // as for kill(2)).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    };
    crate::check(ret)?;
    Ok(())
}

/// Blocks until the process of `pidfd` has exited (the pidfd polls readable), without reaping it.
/// Works for processes that are not children of the caller.
pub fn wait_exited(pidfd: impl AsFd) -> io::Result<()> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => return Ok(()),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}
