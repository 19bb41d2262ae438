//! Pause and resume: the v1 freezer (`freezer.state`) or the v2 core freezer (`cgroup.freeze`).
//!
//! Theory: both are asynchronous. v1 reports FREEZING until every task is stopped, and a task
//! busy in the kernel can make a freeze stall, so FROZEN is written again on each poll (as runc
//! does). v2 reports completion as `frozen 1` in cgroup.events. Polling backs off from 100 µs
//! to 10 ms, for at most 5 s; a freeze that times out is undone so no half-frozen container is
//! left behind. The cgroup2 freezer is core cgroup2 (no controller to enable), so it also works
//! in the unified tree of a hybrid host.
//!
//! Privileges: root (or a delegated tree). Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::fsio::{read, write};
use crate::Error;
use std::path::Path;
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(5);

/// Which freezer a directory uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Freezer {
    /// `freezer.state` in the v1 freezer hierarchy.
    V1,
    /// `cgroup.freeze` / `cgroup.events` in cgroup2.
    V2,
}

/// Freezes (`true`) or thaws (`false`) and waits until the kernel reports it done.
pub fn set(kind: Freezer, dir: &Path, frozen: bool) -> Result<(), Error> {
    let op = if frozen { "freeze" } else { "thaw" };
    let (file, value) = match (kind, frozen) {
        (Freezer::V1, true) => ("freezer.state", "FROZEN"),
        (Freezer::V1, false) => ("freezer.state", "THAWED"),
        (Freezer::V2, true) => ("cgroup.freeze", "1"),
        (Freezer::V2, false) => ("cgroup.freeze", "0"),
    };
    write(dir, file, value)?;
    let start = Instant::now();
    let mut pause = Duration::from_micros(100);
    loop {
        if state(kind, dir)? == frozen {
            return Ok(());
        }
        if start.elapsed() > TIMEOUT {
            let seen = read(dir, status_file(kind))?;
            if frozen {
                let _ = write(dir, file, if kind == Freezer::V1 { "THAWED" } else { "0" });
            }
            return Err(Error::FreezeTimeout {
                op,
                dir: dir.to_path_buf(),
                state: seen,
                waited_ms: start.elapsed().as_millis() as u64,
            });
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
        if kind == Freezer::V1 {
            write(dir, file, value)?;
        }
    }
}

/// True when the kernel reports the directory fully frozen.
pub fn state(kind: Freezer, dir: &Path) -> Result<bool, Error> {
    let text = read(dir, status_file(kind))?;
    Ok(match kind {
        Freezer::V1 => text == "FROZEN",
        Freezer::V2 => text.lines().any(|l| l.trim() == "frozen 1"),
    })
}

fn status_file(kind: Freezer) -> &'static str {
    match kind {
        Freezer::V1 => "freezer.state",
        Freezer::V2 => "cgroup.events",
    }
}
