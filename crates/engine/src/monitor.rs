//! The monitor: the process that runs a container's lifecycle and outlives `pier run -d`.
//!
//! Theory of operation: `run -d` calls [`detach`], a double fork: the front keeps the read end
//! of a report pipe and reaps the short-lived middle process; the middle calls `setsid` (no
//! terminal signal reaches the monitor) and forks the monitor, which points its stdio at
//! /dev/null, becomes a child subreaper (orphans of the container come back to it, not to
//! init) and then runs the whole start path itself, so it is the parent of the container's init.
//! The middle names the monitor on the pipe (`pid N`); the monitor ends the front's wait with
//! one [`Reporter`] line, `ok ID` or `err TEXT` (after having removed everything on failure),
//! and the front also polls the monitor's pidfd, since the held init keeps a copy of the pipe. Foreground `run` skips all this: the front is the monitor.
//! Either way [`supervise`] is the wait: one `poll` over the init's pidfd, a signalfd (SIGINT,
//! SIGTERM, … are forwarded to the container through the pidfd; SIGWINCH resizes its
//! terminal) and the relays of [`Io`]: a detached container's stdout and stderr pipes (and with
//! `-t` its pty master) to the [`Logger`]; in the foreground with `-t`, the master to the
//! caller's stdout and, with `-i`, the caller's stdin to the master. No thread, no timer. When
//! the pidfd turns readable the init is reaped (exit code, or 128+signal); the caller tears
//! down and then [`drain`]s the container's output (every writer is gone by then).
//! Privileges: those of the engine. Tests: crates/engine/tests/priv_engine.rs.
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

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

/// Where data read from one fd goes.
#[derive(Debug, Clone, Copy)]
pub enum Sink<'a> {
    /// The container log, as this stream.
    Log(Stream),
    /// An fd (the caller's stdout, the pty master).
    Fd(BorrowedFd<'a>),
}

/// One relay: what is read from `from` goes to `to`.
#[derive(Debug)]
pub struct Route<'a> {
    pub from: BorrowedFd<'a>,
    pub to: Sink<'a>,
    /// Output of the container (drained after the exit); false for the caller's stdin.
    pub output: bool,
}

/// What the monitor relays while it waits.
#[derive(Debug, Default)]
pub struct Io<'a> {
    pub logger: Option<&'a mut Logger>,
    pub routes: Vec<Route<'a>>,
    /// (the caller's terminal, the container's pty master): SIGWINCH copies the size.
    pub resize: Option<(BorrowedFd<'a>, BorrowedFd<'a>)>,
}

impl<'a> Io<'a> {
    /// A detached container's pipes, logged.
    pub fn logged(logger: &'a mut Logger, pipes: &'a Pipes) -> Io<'a> {
        let route = |fd: &'a OwnedFd, stream| Route {
            from: fd.as_fd(),
            to: Sink::Log(stream),
            output: true,
        };
        Io {
            logger: Some(logger),
            routes: vec![
                route(&pipes.stdout, Stream::Stdout),
                route(&pipes.stderr, Stream::Stderr),
            ],
            resize: None,
        }
    }
}

/// Waits for the init of `pidfd`, forwarding signals and relaying `io`; its exit code.
pub fn supervise(pidfd: &OwnedFd, io: &mut Io) -> Result<i32, MonitorError> {
    let mut set = SigSet::empty();
    FORWARDED.iter().for_each(|s| set.add(*s));
    set.add(Signal::SIGWINCH);
    let old = set
        .thread_swap_mask(SigmaskHow::SIG_BLOCK)
        .map_err(sys("sigprocmask"))?;
    let result = wait_loop(pidfd, &set, io);
    let _ = old.thread_set_mask();
    result?;
    reap(pidfd)
}

fn wait_loop(pidfd: &OwnedFd, set: &SigSet, io: &mut Io) -> Result<(), MonitorError> {
    let sfd = SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
        .map_err(sys("signalfd"))?;
    let mut open = vec![true; io.routes.len()];
    loop {
        let mut fds = vec![
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sfd.as_fd(), PollFlags::POLLIN),
        ];
        for (route, open) in io.routes.iter().zip(&open) {
            let events = if *open {
                PollFlags::POLLIN
            } else {
                PollFlags::empty()
            };
            fds.push(PollFd::new(route.from, events));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => other.map_err(sys("poll"))?,
        };
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if ready[1] {
            while let Ok(Some(info)) = sfd.read_signal() {
                signal(pidfd, io, info.ssi_signo as i32);
            }
        }
        for (i, ready) in ready[2..].iter().enumerate() {
            if *ready && open[i] {
                open[i] = relay(io, i)?;
            }
        }
        if ready[0] {
            return Ok(());
        }
    }
}

/// SIGWINCH resizes the container's terminal; every other signal goes to the container.
fn signal(pidfd: &OwnedFd, io: &Io, signo: i32) {
    match (signo == libc::SIGWINCH, io.resize) {
        (true, Some((tty, master))) => crate::tty::copy_size(tty, master),
        (true, None) => {}
        (false, _) => {
            let _ = pier_sys::pidfd::send_signal(pidfd, signo);
        }
    }
}

/// Relays one read of route `i`; false at end-of-file (or EIO: a pty whose slave is closed).
fn relay(io: &mut Io, i: usize) -> Result<bool, MonitorError> {
    let mut buf = [0u8; 16 << 10];
    let route = &io.routes[i];
    let n = match nix::unistd::read(route.from, &mut buf) {
        Ok(0) | Err(nix::errno::Errno::EIO) => return Ok(false),
        Ok(n) => n,
        Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => return Ok(true),
        Err(e) => return Err(sys("read container output")(e)),
    };
    match (route.to, io.logger.as_mut()) {
        (Sink::Log(stream), Some(logger)) => logger.write(stream, &buf[..n])?,
        (Sink::Log(_), None) => {}
        (Sink::Fd(fd), _) => write_all(fd, &buf[..n]),
    }
    Ok(true)
}

/// Writes everything, or gives up when the reader is gone (the caller closed its terminal).
fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return,
        }
    }
}

/// After teardown: relays what is left of the container's output, then unfinished lines.
pub fn drain(io: &mut Io) -> Result<(), MonitorError> {
    for i in 0..io.routes.len() {
        if io.routes[i].output {
            while relay(io, i)? {
                if is_drained(io.routes[i].from) {
                    break;
                }
            }
        }
    }
    match io.logger.as_mut() {
        Some(logger) => Ok(logger.flush()?),
        None => Ok(()),
    }
}

/// True when nothing is left to read right now (a read would block).
fn is_drained(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    !matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
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

/// In the middle process: new session, fork the monitor, tell the front its pid, exit (with
/// `_exit`: the front's buffered stdout must not be flushed twice).
fn middle(write: OwnedFd) -> Result<Side, MonitorError> {
    let mut reporter = Reporter(Some(File::from(write)));
    let forked = nix::unistd::setsid()
        .map_err(sys("setsid"))
        .and_then(|_| pier_sys::clone::fork(0, None).map_err(|e| sys("fork")(errno(e))));
    match forked {
        Ok(Forked::Parent { pid, .. }) => {
            reporter.pid(pid);
            pier_sys::process::exit_now(0)
        }
        Err(e) => {
            reporter.err(&e.to_string());
            pier_sys::process::exit_now(1)
        }
        Ok(Forked::Child) => {}
    }
    if let Err(e) = become_monitor() {
        reporter.err(&e.to_string());
        pier_sys::process::exit_now(1)
    }
    Ok(Side::Monitor(reporter))
}

fn errno(e: io::Error) -> nix::errno::Errno {
    nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

fn become_monitor() -> Result<(), MonitorError> {
    nix::sys::prctl::set_child_subreaper(true).map_err(sys("PR_SET_CHILD_SUBREAPER"))?;
    // The caller's blocked signals would pass to the proxies the monitor starts (a `pier proxy`
    // with SIGTERM blocked cannot be stopped); supervise blocks what it reads from a signalfd.
    let empty = SigSet::empty();
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&empty), None)
        .map_err(sys("sigprocmask"))?;
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
    /// The middle process names the monitor (the report line follows from the monitor).
    fn pid(&mut self, pid: i32) {
        if let Some(file) = self.0.as_mut() {
            let _ = file.write_all(format!("pid {pid}\n").as_bytes());
        }
    }

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

/// The front's side: the id of the started container, or the monitor's error text. The pipe
/// alone cannot tell that the monitor died: the container's held init has a copy of its write
/// end until it execs. So the middle process names the monitor first, and the monitor's pidfd
/// is polled with the pipe.
pub fn read_report(pipe: File) -> Result<String, String> {
    let died = || "the monitor exited before reporting (`pier gc` removes what it left)".to_owned();
    let mut lines = Lines {
        pipe,
        buf: Vec::new(),
    };
    let first = lines.next(None).ok_or_else(died)?;
    let monitor = match first.split_once(' ') {
        Some(("pid", pid)) => pid.parse().ok().and_then(|p| pier_sys::pidfd::open(p).ok()),
        _ => return parse_report(&first).ok_or_else(died)?,
    };
    if monitor.is_none() {
        // Already gone (a quick container, or a crash): only what it wrote counts; a held
        // init's copy of the pipe must not block the read.
        let nonblock = nix::fcntl::F_SETFL(OFlag::O_NONBLOCK);
        nix::fcntl::fcntl(&lines.pipe, nonblock).map_err(|e| e.to_string())?;
    }
    let line = lines.next(monitor.as_ref()).ok_or_else(died)?;
    parse_report(&line).ok_or_else(died)?
}

fn parse_report(line: &str) -> Option<Result<String, String>> {
    match line.split_once(' ') {
        Some(("ok", id)) => Some(Ok(id.to_owned())),
        Some(("err", reason)) => Some(Err(reason.to_owned())),
        _ => None,
    }
}

/// Lines of the report pipe, read byte by byte (nothing past a line is consumed).
struct Lines {
    pipe: File,
    buf: Vec<u8>,
}

impl Lines {
    /// The next line; `None` at end-of-file, or once `monitor` exited with no full line left.
    fn next(&mut self, monitor: Option<&OwnedFd>) -> Option<String> {
        let mut byte = [0u8; 1];
        loop {
            if let Some(pidfd) = monitor {
                if !self.readable(pidfd) {
                    return None;
                }
            }
            match self.pipe.read(&mut byte) {
                Ok(1) if byte[0] == b'\n' => {
                    let line = String::from_utf8_lossy(&self.buf).into_owned();
                    self.buf.clear();
                    return Some(line);
                }
                Ok(1) => self.buf.push(byte[0]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                _ => return None,
            }
        }
    }

    /// Waits until the pipe has data (true) or the monitor exited with none left (false).
    fn readable(&self, pidfd: &OwnedFd) -> bool {
        loop {
            let mut fds = [
                PollFd::new(self.pipe.as_fd(), PollFlags::POLLIN),
                PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => return false,
                Ok(_) => {}
            }
            let ready = |f: &PollFd| f.revents().is_some_and(|r| r.contains(PollFlags::POLLIN));
            if ready(&fds[0]) {
                return true;
            }
            if fds[1].revents().is_some_and(|r| !r.is_empty()) {
                return false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(lines: &[u8]) -> Result<String, String> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        File::from(write).write_all(lines).unwrap();
        read_report(File::from(read))
    }

    #[test]
    fn reports_are_read_line_by_line() {
        assert_eq!(report(b"ok abc\n"), Ok("abc".into()));
        assert_eq!(
            report(b"err no such network: x\n"),
            Err("no such network: x".into())
        );
        // The middle names a monitor that is gone and nothing follows: a crash, said so.
        let gone = report(b"pid 2147483647\n").unwrap_err();
        assert!(gone.contains("pier gc"), "{gone}");
        let own = std::process::id();
        assert_eq!(
            report(format!("pid {own}\nok id1\n").as_bytes()),
            Ok("id1".into())
        );
    }

    #[test]
    fn a_reporter_sends_one_line() {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).unwrap();
        let mut reporter = Reporter(Some(File::from(write)));
        reporter.err("two\nlines");
        reporter.ok("ignored: already reported");
        drop(reporter);
        assert_eq!(read_report(File::from(read)), Err("two; lines".into()));
    }
}
