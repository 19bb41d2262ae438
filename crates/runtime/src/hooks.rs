//! OCI hooks: prestart, createRuntime, createContainer, startContainer, poststart, poststop.
//!
//! Theory of operation: each hook is spawned with `path` (absolute, as the spec demands),
//! `args` (args[0] is argv[0]) and `env` (when absent, the caller's environment, as runc does),
//! the OCI state JSON on stdin and stdout/stderr captured. One poll loop drives the hook: it
//! waits on a pidfd of the hook (readable when it exits), writes the state as the pipe accepts
//! it and reads the output as it comes (only the last [`TAIL`] bytes are kept), with the
//! remaining `timeout` as the poll timeout, so nothing sleeps and nothing blocks on a hook that
//! does not read its stdin. On timeout the hook is killed and reaped. Once the hook has exited,
//! output still buffered is read once; a daemon the hook left holding the pipes cannot stall the
//! runtime. The first failing hook stops the list. Error texts are complete on their own
//! (`to_string()` includes the cause), as the init sends them to the runtime as text.
//!
//! Privileges: those of the hook; none of its own.
//! Tests: `tests/priv_hooks.rs` (state on stdin, failure text, timeout kill).
use nix::poll::{PollFd, PollFlags, PollTimeout};
use oci_spec::runtime::Hook;
use std::fmt;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How many trailing bytes of a hook's stdout and stderr are kept for the error message.
const TAIL: usize = 4096;

/// The lifecycle point a hook list belongs to (named as in config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// `hooks.prestart` (deprecated, runs with createRuntime).
    Prestart,
    /// `hooks.createRuntime`: runtime namespace, after the container's namespaces exist.
    CreateRuntime,
    /// `hooks.createContainer`: container namespace, before pivot_root.
    CreateContainer,
    /// `hooks.startContainer`: container namespace, before the user program.
    StartContainer,
    /// `hooks.poststart`: runtime namespace, after the user program started.
    Poststart,
    /// `hooks.poststop`: runtime namespace, after the container was deleted.
    Poststop,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Prestart => "prestart",
            Phase::CreateRuntime => "createRuntime",
            Phase::CreateContainer => "createContainer",
            Phase::StartContainer => "startContainer",
            Phase::Poststart => "poststart",
            Phase::Poststop => "poststop",
        })
    }
}

/// What failed while running a hook.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The hook's path is relative.
    #[error("{phase} hook {}: the path must be absolute", path.display())]
    RelativePath { phase: Phase, path: PathBuf },
    /// The hook's timeout is zero or negative.
    #[error("{phase} hook {}: timeout must be greater than zero, got {timeout}", path.display())]
    BadTimeout {
        phase: Phase,
        path: PathBuf,
        timeout: i64,
    },
    /// The hook could not be started.
    #[error("{phase} hook {}: start: {source}", path.display())]
    Spawn {
        phase: Phase,
        path: PathBuf,
        source: io::Error,
    },
    /// Waiting for the hook or exchanging its stdio failed.
    #[error("{phase} hook {}: {step}: {source}", path.display())]
    Io {
        phase: Phase,
        path: PathBuf,
        step: &'static str,
        source: io::Error,
    },
    /// The hook ran longer than its timeout and was killed.
    #[error("{phase} hook {} timed out after {secs} s", path.display())]
    Timeout {
        phase: Phase,
        path: PathBuf,
        secs: i64,
    },
    /// The hook exited unsuccessfully.
    #[error("{phase} hook {} failed ({status}){}", path.display(), output_text(stdout, stderr))]
    Failed {
        phase: Phase,
        path: PathBuf,
        status: ExitStatus,
        stdout: String,
        stderr: String,
    },
}

fn output_text(stdout: &str, stderr: &str) -> String {
    let mut text = String::new();
    if !stdout.trim().is_empty() {
        text.push_str(&format!(", stdout: {}", stdout.trim()));
    }
    if !stderr.trim().is_empty() {
        text.push_str(&format!(", stderr: {}", stderr.trim()));
    }
    text
}

/// Runs `hooks` in order, each with the OCI state JSON on stdin, honouring `timeout`; the first
/// failure (spawn error, non-zero exit, timeout) stops the list and is returned with the hook's
/// path and phase.
pub fn run(phase: Phase, hooks: &[Hook], state_json: &[u8]) -> Result<(), HookError> {
    hooks
        .iter()
        .try_for_each(|hook| run_one(phase, hook, state_json))
}

fn run_one(phase: Phase, hook: &Hook, state_json: &[u8]) -> Result<(), HookError> {
    let path = hook.path().clone();
    if !path.is_absolute() {
        return Err(HookError::RelativePath { phase, path });
    }
    let timeout = match hook.timeout() {
        Some(t) if t <= 0 => {
            return Err(HookError::BadTimeout {
                phase,
                path,
                timeout: t,
            })
        }
        other => other,
    };
    let io_err = |step: &'static str, p: &PathBuf| {
        let path = p.clone();
        move |source: io::Error| HookError::Io {
            phase,
            path,
            step,
            source,
        }
    };
    let mut child = command(hook).spawn().map_err(|source| HookError::Spawn {
        phase,
        path: path.clone(),
        source,
    })?;
    let pidfd = pier_sys::process::pidfd_open(child.id() as libc::pid_t)
        .map_err(io_err("open a pidfd", &path))?;
    let mut pipes =
        Pipes::new(&mut child, state_json).map_err(io_err("set up the stdio pipes", &path))?;
    let deadline = timeout.map(|t| Instant::now() + Duration::from_secs(t as u64));
    let exited = pipes
        .drive(&pidfd, deadline)
        .map_err(io_err("wait", &path))?;
    if !exited {
        let _ = child.kill();
        child
            .wait()
            .map_err(io_err("reap after the timeout", &path))?;
        return Err(HookError::Timeout {
            phase,
            path,
            secs: timeout.unwrap_or_default(),
        });
    }
    let status = child.wait().map_err(io_err("reap", &path))?;
    if status.success() {
        return Ok(());
    }
    let (stdout, stderr) = pipes.output();
    Err(HookError::Failed {
        phase,
        path,
        status,
        stdout,
        stderr,
    })
}

/// The hook's command line: path, argv[0] from args[0], the rest of args, env, piped stdio.
fn command(hook: &Hook) -> Command {
    let mut cmd = Command::new(hook.path());
    if let Some((argv0, rest)) = hook.args().as_deref().and_then(|a| a.split_first()) {
        cmd.arg0(argv0).args(rest);
    }
    if let Some(env) = hook.env() {
        cmd.env_clear();
        cmd.envs(
            env.iter()
                .map(|e| e.split_once('=').unwrap_or((e.as_str(), ""))),
        );
    }
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// The hook's stdio: the state still to write, and the tails of its output.
struct Pipes<'a> {
    stdin: Option<ChildStdin>,
    input: &'a [u8],
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    out: Vec<u8>,
    err: Vec<u8>,
}

fn set_nonblocking(fd: impl AsFd) -> io::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    fcntl(fd, FcntlArg::F_SETFL(OFlag::O_NONBLOCK))
        .map(drop)
        .map_err(io::Error::from)
}

impl<'a> Pipes<'a> {
    fn new(child: &mut Child, input: &'a [u8]) -> io::Result<Self> {
        let pipes = Pipes {
            stdin: child.stdin.take(),
            input,
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            out: Vec::new(),
            err: Vec::new(),
        };
        pipes.stdin.as_ref().map(set_nonblocking).transpose()?;
        pipes.stdout.as_ref().map(set_nonblocking).transpose()?;
        pipes.stderr.as_ref().map(set_nonblocking).transpose()?;
        Ok(pipes)
    }

    /// Pumps stdio until the hook exits (true) or the deadline passes (false).
    fn drive(&mut self, pidfd: &OwnedFd, deadline: Option<Instant>) -> io::Result<bool> {
        loop {
            self.pump();
            let timeout = match deadline.map(|d| d.saturating_duration_since(Instant::now())) {
                Some(Duration::ZERO) => return Ok(false),
                Some(left) => PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
                None => PollTimeout::NONE,
            };
            let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
            fds.extend(
                self.stdin
                    .as_ref()
                    .map(|p| PollFd::new(p.as_fd(), PollFlags::POLLOUT)),
            );
            fds.extend(
                self.stdout
                    .as_ref()
                    .map(|p| PollFd::new(p.as_fd(), PollFlags::POLLIN)),
            );
            fds.extend(
                self.stderr
                    .as_ref()
                    .map(|p| PollFd::new(p.as_fd(), PollFlags::POLLIN)),
            );
            match nix::poll::poll(&mut fds, timeout) {
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
                Ok(_) => {}
            }
            if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                drop(fds);
                self.pump();
                return Ok(true);
            }
        }
    }

    /// Writes what stdin accepts and reads what stdout/stderr hold, without blocking.
    fn pump(&mut self) {
        if let Some(stdin) = &mut self.stdin {
            let done = loop {
                match stdin.write(self.input) {
                    Ok(n) if n < self.input.len() => self.input = &self.input[n..],
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break false,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    _ => break true,
                }
            };
            if done {
                self.stdin = None;
            }
        }
        read_available(&mut self.stdout, &mut self.out);
        read_available(&mut self.stderr, &mut self.err);
    }

    fn output(&self) -> (String, String) {
        (
            String::from_utf8_lossy(&self.out).into_owned(),
            String::from_utf8_lossy(&self.err).into_owned(),
        )
    }
}

/// Reads until the pipe would block, keeping the last [`TAIL`] bytes; drops it at EOF or error.
fn read_available(pipe: &mut Option<impl Read>, tail: &mut Vec<u8>) {
    let Some(reader) = pipe else { return };
    let mut buf = [0u8; 4096];
    let open = loop {
        match reader.read(&mut buf) {
            Ok(0) => break false,
            Ok(n) => {
                tail.extend_from_slice(&buf[..n]);
                let excess = tail.len().saturating_sub(TAIL);
                tail.drain(..excess);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break true,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break false,
        }
    };
    if !open {
        *pipe = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_use_config_names() {
        assert_eq!(Phase::CreateRuntime.to_string(), "createRuntime");
        assert_eq!(Phase::Poststop.to_string(), "poststop");
    }

    #[test]
    fn tail_keeps_the_end() {
        let mut tail = Vec::new();
        let data = vec![b'x'; TAIL + 10];
        let mut pipe = Some(io::Cursor::new([data, b"END".to_vec()].concat()));
        read_available(&mut pipe, &mut tail);
        assert!(pipe.is_none());
        assert_eq!(tail.len(), TAIL);
        assert!(tail.ends_with(b"END"));
    }

    #[test]
    fn relative_path_and_bad_timeout_are_refused() {
        let hook: Hook = serde_json::from_value(serde_json::json!({"path": "bin/true"})).unwrap();
        let err = run(Phase::Prestart, &[hook], b"{}").unwrap_err();
        assert!(matches!(err, HookError::RelativePath { .. }), "{err}");
        let hook: Hook =
            serde_json::from_value(serde_json::json!({"path": "/bin/true", "timeout": 0})).unwrap();
        let err = run(Phase::Prestart, &[hook], b"{}").unwrap_err();
        assert!(
            matches!(err, HookError::BadTimeout { timeout: 0, .. }),
            "{err}"
        );
    }
}
