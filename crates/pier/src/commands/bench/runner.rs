//! Timing one container start, and the private mount namespace crun runs in.
//!
//! Theory of operation: a sample is the wall time from just before `fork` of the command until the
//! benchmark has reaped it (what hyperfine measures), so it includes exec of the runtime, its setup,
//! the container's `/bin/true`, and its teardown. Reaping is a blocking `wait`, never a sleep-poll,
//! so no polling interval adds to a sample. A runtime that hangs must not hang the benchmark: the
//! child's stderr is a pipe, and `poll` on it with the deadline returns when the runtime and
//! everything it spawned have closed it (they have exited) or when the deadline passes (the
//! command is then killed and the row fails). The pipe also gives the failure reason.
//!
//! crun 1.8.1 refuses hybrid cgroups, so it runs in a private mount namespace where
//! /sys/fs/cgroup/unified is unmounted. Rather than wrapping every crun run in
//! `unshare -m sh -c 'umount ...; crun ...'` (two extra execs inside the timed region, which would
//! be charged to crun), the benchmark makes that namespace once, keeps a handle on it and on its
//! own, and switches itself into it (`setns`) around each crun sample, outside the timed region.
//! The namespace disappears when the handles close. `setns` into a mount namespace requires a
//! single-threaded caller: the benchmark starts no threads.
//!
//! Privileges: root (unshare, mount, setns). Exercised by the black-box test tests/bench_start.rs.
use anyhow::Context;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::{setns, unshare, CloneFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a single container start may take before it is killed and its row marked failed.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A command line: program and arguments.
#[derive(Clone, Debug)]
pub struct Invocation {
    pub program: PathBuf,
    pub args: Vec<OsString>,
}

impl Invocation {
    /// The command line as one string (for reports).
    pub fn display(&self) -> String {
        let mut line = self.program.display().to_string();
        for arg in &self.args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        line
    }
}

/// Runs `invocation` once, with stdin and stdout on /dev/null; returns its wall time, or the reason
/// it failed (exit status and the end of its stderr, or the deadline).
pub fn time_one(invocation: &Invocation) -> Result<Duration, String> {
    let mut command = Command::new(&invocation.program);
    command
        .args(&invocation.args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", invocation.program.display()))?;
    let stderr = child.stderr.take().ok_or("no stderr pipe")?;
    let (text, finished) = drain(stderr, started + DEADLINE);
    if !finished {
        return Err(kill_late(&mut child));
    }
    let status = child.wait().map_err(|e| format!("wait: {e}"))?;
    let elapsed = started.elapsed();
    if status.success() {
        return Ok(elapsed);
    }
    Err(format!("{status}: {}", last_lines(&text, 3)))
}

/// Reads the pipe until end of file (true) or until `deadline` (false); returns what was read.
fn drain<P: Read + AsFd>(mut pipe: P, deadline: Instant) -> (String, bool) {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let timeout = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(pipe.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, timeout) {
            Ok(0) => return (String::from_utf8_lossy(&bytes).into_owned(), false),
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => return (String::from_utf8_lossy(&bytes).into_owned(), true),
        }
        match pipe.read(&mut chunk) {
            Ok(0) | Err(_) => return (String::from_utf8_lossy(&bytes).into_owned(), true),
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
}

fn kill_late(child: &mut Child) -> String {
    if let Ok(Some(status)) = child.try_wait() {
        return format!(
            "{status}, but a process it left behind kept its stderr open for {} s",
            DEADLINE.as_secs()
        );
    }
    let _ = child.kill();
    let _ = child.wait();
    format!("no exit after {} s; killed", DEADLINE.as_secs())
}

/// The last `n` non-empty lines of `text`, joined with " / ".
pub fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let tail = lines[lines.len().saturating_sub(n)..].join(" / ");
    if tail.is_empty() {
        "no message".to_string()
    } else {
        tail
    }
}

/// Handles on the benchmark's own mount namespace and on a private one with the cgroup2 mount of a
/// hybrid host removed (for crun).
#[derive(Debug)]
pub struct CrunNamespace {
    home: File,
    private: File,
}

impl CrunNamespace {
    /// Makes the private namespace (when /sys/fs/cgroup/unified is a mount point; None otherwise:
    /// crun then needs no help) and returns to the benchmark's own.
    pub fn prepare() -> anyhow::Result<Option<CrunNamespace>> {
        if !is_mount_point("/sys/fs/cgroup/unified") {
            return Ok(None);
        }
        let home = File::open("/proc/self/ns/mnt").context("opening /proc/self/ns/mnt")?;
        unshare(CloneFlags::CLONE_NEWNS).context("unshare(CLONE_NEWNS) for crun's namespace")?;
        let made = make_private_without_unified();
        let private =
            File::open("/proc/self/ns/mnt").context("opening the private /proc/self/ns/mnt");
        setns(home.as_fd(), CloneFlags::CLONE_NEWNS)
            .context("setns back to the benchmark's mount namespace")?;
        made?;
        Ok(Some(CrunNamespace {
            home,
            private: private?,
        }))
    }

    /// Runs `body` inside the private namespace.
    pub fn run<T>(&self, body: impl FnOnce() -> T) -> anyhow::Result<T> {
        setns(self.private.as_fd(), CloneFlags::CLONE_NEWNS)
            .context("setns into crun's mount namespace")?;
        let result = body();
        setns(self.home.as_fd(), CloneFlags::CLONE_NEWNS)
            .context("setns back to the benchmark's mount namespace")?;
        Ok(result)
    }
}

fn make_private_without_unified() -> anyhow::Result<()> {
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making / private in crun's namespace")?;
    umount2("/sys/fs/cgroup/unified", MntFlags::MNT_DETACH)
        .context("unmounting /sys/fs/cgroup/unified for crun")?;
    Ok(())
}

/// True when `path` is a mount point in this mount namespace.
fn is_mount_point(path: &str) -> bool {
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    table
        .lines()
        .any(|line| line.split(' ').nth(4) == Some(path))
}

/// The first line `program --version` prints (given 5 s), or None when it cannot run.
pub fn version_of(program: &Path) -> Option<String> {
    let mut command = Command::new(program);
    command
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().ok()?;
    let stdout = child.stdout.take()?;
    let (text, finished) = drain(stdout, Instant::now() + Duration::from_secs(5));
    if !finished {
        kill_late(&mut child);
        return None;
    }
    child.wait().ok()?;
    text.lines().next().map(|line| line.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn success_is_timed() {
        let true_ = Invocation {
            program: "/bin/true".into(),
            args: vec![],
        };
        assert!(time_one(&true_).is_ok());
    }

    #[test]
    fn failure_carries_status_and_stderr() {
        let args = vec![
            "-c".into(),
            "echo first >&2; echo the reason >&2; exit 3".into(),
        ];
        let failing = Invocation {
            program: "/bin/sh".into(),
            args,
        };
        let reason = time_one(&failing).expect_err("must fail");
        assert!(reason.contains("exit status: 3"), "{reason}");
        assert!(reason.contains("first / the reason"), "{reason}");
    }

    #[test]
    fn missing_program_is_named() {
        let missing = Invocation {
            program: "/nonexistent/pier-test-runtime".into(),
            args: vec![],
        };
        assert!(time_one(&missing)
            .expect_err("must fail")
            .contains("/nonexistent/pier-test-runtime"));
    }

    #[test]
    fn last_lines_skips_blank_lines() {
        assert_eq!(last_lines("a\n\nb\nc\n\n", 2), "b / c");
        assert_eq!(last_lines("", 2), "no message");
    }
}
