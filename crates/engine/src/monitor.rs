//! The monitor: the process that runs a container's lifecycle and outlives `pier run -d`.
//!
//! Theory of operation: `run -d` calls [`detach`], a double fork: the front keeps the read end
//! of a report pipe and reaps the short-lived middle process; the middle calls `setsid` (no
//! terminal signal reaches the monitor) and forks the monitor, which points its stdio at
//! /dev/null, becomes a child subreaper (orphans of the container come back to it, not to
//! init) and then runs the whole start path itself, so it is the parent of the container's init.
//! It ends the front's wait with one [`Reporter`] line: `ok ID` or `err TEXT` (after having
//! removed everything on failure). Foreground `run` skips all this: the front is the monitor.
//! Either way [`supervise`] is the wait: one `poll` over the init's pidfd, a signalfd (SIGINT,
//! SIGTERM, … are forwarded to the container through the pidfd) and, for a detached
//! container, its stdout and stderr pipes, whose data goes to the [`Logger`]. No thread, no
//! timer. When the pidfd turns readable the init is reaped (exit code, or 128+signal); the
//! caller tears down and then [`drain`]s the pipes (every writer is gone by then).
//! Privileges: those of the engine. Tests: crates/engine/tests/priv_engine.rs.
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use crate::logs::{LogError, Logger, Stream};
use pier_sys::clone::Forked;

/// Why the monitor failed.
#[derive(Debug, thiserror::Error)]
pub enum MonitorError {
    #[error("{step}: {source}")]
    Sys {
        step: &'static str,
        source: io::Error,
    },
    #[error(transparent)]
    Log(#[from] LogError),
}

fn sys(step: &'static str) -> impl FnOnce(nix::errno::Errno) -> MonitorError {
    move |e| MonitorError::Sys {
        step,
        source: e.into(),
    }
}

/// Signals the front end receives and passes on to the container.
const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// The read ends of a detached container's stdout and stderr (non-blocking).
#[derive(Debug)]
pub struct Pipes {
    pub stdout: OwnedFd,
    pub stderr: OwnedFd,
}

/// Makes the container's output pipes: (read ends for the monitor, write ends for the init).
pub fn pipes() -> Result<(Pipes, OwnedFd, OwnedFd), MonitorError> {
    let flags = OFlag::O_CLOEXEC;
    let (out_r, out_w) = nix::unistd::pipe2(flags).map_err(sys("pipe2"))?;
    let (err_r, err_w) = nix::unistd::pipe2(flags).map_err(sys("pipe2"))?;
    for fd in [&out_r, &err_r] {
        nix::fcntl::fcntl(fd, nix::fcntl::F_SETFL(OFlag::O_NONBLOCK)).map_err(sys("fcntl"))?;
    }
    let read = Pipes {
        stdout: out_r,
        stderr: err_r,
    };
    Ok((read, out_w, err_w))
}

/// Waits for the init of `pidfd`, forwarding signals and logging `output`; its exit code.
pub fn supervise(
    pidfd: &OwnedFd,
    output: Option<(&mut Logger, &Pipes)>,
) -> Result<i32, MonitorError> {
    let mut set = SigSet::empty();
    FORWARDED.iter().for_each(|s| set.add(*s));
    let old = set
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(sys("sigprocmask"))?;
    let result = wait_loop(pidfd, &set, output);
    let _ = old.thread_set_mask();
    result?;
    reap(pidfd)
}

fn wait_loop(
    pidfd: &OwnedFd,
    set: &SigSet,
    mut output: Option<(&mut Logger, &Pipes)>,
) -> Result<(), MonitorError> {
    let sfd = SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("signalfd"))?;
    let mut open = [true, true];
    loop {
        let mut fds = vec![
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        if let Some((_, pipes)) = &output {
            for (fd, open) in [&pipes.stdout, &pipes.stderr].into_iter().zip(open) {
                let events = if open {
                    PollFlags::POLLIN
                } else {
                    PollFlags::empty()
                };
                fds.push(PollFd::new(fd.as_fd(), events));
            }
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => other.map_err(sys("poll"))?,
        };
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (exited, signalled, out, err) = (ready(0), ready(1), ready(2), ready(3));
        drop(fds);
        if signalled {
            while let Ok(Some(info)) = sfd.read_signal() {
                let _ = pier_sys::pidfd::send_signal(pidfd, info.ssi_signo as i32);
            }
        }
        if let Some((logger, pipes)) = output.as_mut() {
            for (i, ready, fd, stream) in [
                (0, out, &pipes.stdout, Stream::Stdout),
                (1, err, &pipes.stderr, Stream::Stderr),
            ] {
                if ready && open[i] {
                    open[i] = copy(fd, stream, logger)?;
                }
            }
        }
        if exited {
            return Ok(());
        }
    }
}

/// Copies what the pipe holds into the log; false at end-of-file.
fn copy(fd: &OwnedFd, stream: Stream, logger: &mut Logger) -> Result<bool, MonitorError> {
    let mut buf = [0u8; 16 << 10];
    loop {
        match nix::unistd::read(fd, &mut buf) {
            Ok(0) => return Ok(false),
            Ok(n) => logger.write(stream, &buf[..n])?,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(nix::errno::Errno::EAGAIN) => return Ok(true),
            Err(e) => return Err(sys("read container output")(e)),
        }
    }
}

/// After teardown: logs what is left in the pipes and any unfinished line.
pub fn drain(logger: &mut Logger, pipes: &Pipes) -> Result<(), MonitorError> {
    copy(&pipes.stdout, Stream::Stdout, logger)?;
    copy(&pipes.stderr, Stream::Stderr, logger)?;
    Ok(logger.flush()?)
}

/// Reaps our child of `pidfd`: its exit code, or 128+signal.
pub fn reap(pidfd: &OwnedFd) -> Result<i32, MonitorError> {
    loop {
        match waitid(Id::PIDFd(pidfd.as_fd()), WaitPidFlag::WEXITED) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(sys("waitid")(e)),
            Ok(WaitStatus::Exited(_, code)) => return Ok(code),
            Ok(WaitStatus::Signaled(_, sig, _)) => return Ok(128 + sig as i32),
            Ok(_) => continue,
        }
    }
}

/// Which side of [`detach`] the caller is on.
#[derive(Debug)]
pub enum Side {
    /// The monitor: report to the front through this.
    Monitor(Reporter),
    /// The front: read the monitor's report with [`read_report`].
    Front(File),
}

/// Forks the monitor (double fork, `setsid`, stdio on /dev/null, child subreaper).
/// The caller must be single-threaded.
pub fn detach() -> Result<Side, MonitorError> {
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(sys("pipe2"))?;
    let forked = pier_sys::clone::fork(0, None).map_err(|source| MonitorError::Sys {
        step: "fork",
        source,
    })?;
    match forked {
        Forked::Parent { pidfd, .. } => {
            drop(write);
            reap(&pidfd)?;
            Ok(Side::Front(File::from(read)))
        }
        Forked::Child => {
            drop(read);
            middle(write)
        }
    }
}

/// In the middle process: new session, fork the monitor, exit.
fn middle(write: OwnedFd) -> Result<Side, MonitorError> {
    let mut reporter = Reporter(Some(File::from(write)));
    let forked = nix::unistd::setsid()
        .map_err(sys("setsid"))
        .and_then(|_| pier_sys::clone::fork(0, None).map_err(|e| sys("fork")(errno(e))));
    match forked {
        Ok(Forked::Parent { .. }) => std::process::exit(0),
        Err(e) => {
            reporter.err(&e.to_string());
            std::process::exit(1)
        }
        Ok(Forked::Child) => {}
    }
    if let Err(e) = become_monitor() {
        reporter.err(&e.to_string());
        std::process::exit(1)
    }
    Ok(Side::Monitor(reporter))
}

fn errno(e: io::Error) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

fn become_monitor() -> Result<(), MonitorError> {
    nix::sys::prctl::set_child_subreaper(true).map_err(sys("PR_SET_CHILD_SUBREAPER"))?;
    let null = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|source| MonitorError::Sys {
            step: "open /dev/null",
            source,
        })?;
    nix::unistd::dup2_stdin(&null).map_err(sys("dup2 stdin"))?;
    nix::unistd::dup2_stdout(&null).map_err(sys("dup2 stdout"))?;
    nix::unistd::dup2_stderr(&null).map_err(sys("dup2 stderr"))
}

/// The monitor's end of the report pipe: one line, then closed.
#[derive(Debug)]
pub struct Reporter(Option<File>);

impl Reporter {
    /// Reports a started container.
    pub fn ok(&mut self, id: &str) {
        self.send(&format!("ok {id}\n"));
    }

    /// Reports a failure (everything made was removed).
    pub fn err(&mut self, text: &str) {
        self.send(&format!("err {}\n", text.replace('\n', "; ")));
    }

    fn send(&mut self, line: &str) {
        // The front may be gone (killed): nothing to tell then.
        if let Some(mut file) = self.0.take() {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// The front's side: the id of the started container, or the monitor's error text.
pub fn read_report(mut pipe: File) -> Result<String, String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // Up to the newline only: the container's init may hold a copy of the pipe until its exec.
    while let Ok(1) = pipe.read(&mut byte) {
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
    }
    match String::from_utf8_lossy(&line).split_once(' ') {
        Some(("ok", id)) => Ok(id.to_owned()),
        Some(("err", reason)) => Err(reason.to_owned()),
        _ => Err("the monitor exited before reporting (`pier gc` removes what it left)".into()),
    }
}
