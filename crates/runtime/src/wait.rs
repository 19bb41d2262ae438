//! Waiting in the foreground (`run`, `exec` without `--detach`) for a child we forked.
//!
//! Theory of operation: the signals a terminal or a supervisor sends to the runtime are blocked
//! and read from a signalfd; the child's pidfd and the signalfd are polled together, each signal
//! is forwarded with `pidfd_send_signal`, and when the pidfd turns readable the child is reaped
//! with `waitid(P_PIDFD)`. No thread, no sleep. The exit code is the child's, or 128+signal.
//!
//! Privileges: none beyond signalling the child. Tests: crates/runtime/tests/priv_lifecycle.rs.
use crate::container::Error;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use std::os::fd::{AsFd, OwnedFd};

const FORWARDED: [Signal; 8] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
];

/// Waits for the child of `pidfd`, forwarding signals; returns its exit code.
pub fn wait_forwarding(pidfd: &OwnedFd) -> Result<i32, Error> {
    let mut set = SigSet::empty();
    for sig in FORWARDED {
        set.add(sig);
    }
    let old = set
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(|e| Error::Wait(e.into()))?;
    let result = poll_loop(pidfd, &set);
    if let Err(e) = old.thread_set_mask() {
        log::warn!("restoring the signal mask: {e}");
    }
    result
}

fn poll_loop(pidfd: &OwnedFd, set: &SigSet) -> Result<i32, Error> {
    let sfd = SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(|e| Error::Wait(e.into()))?;
    loop {
        let mut fds = [
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Error::Wait(e.into())),
            Ok(_) => {}
        }
        let exited = fds[0].revents().is_some_and(|r| !r.is_empty());
        let signalled = fds[1]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLIN));
        if signalled {
            while let Ok(Some(info)) = sfd.read_signal() {
                let _ = pier_sys::pidfd::send_signal(pidfd, info.ssi_signo as i32);
            }
        }
        if exited {
            return reap(pidfd);
        }
    }
}

/// Reaps the child of `pidfd`; its exit code, or 128+signal.
pub fn reap(pidfd: &OwnedFd) -> Result<i32, Error> {
    loop {
        match waitid(Id::PIDFd(pidfd.as_fd()), WaitPidFlag::WEXITED) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(Error::Wait(e.into())),
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) => continue,
        }
    }
}
