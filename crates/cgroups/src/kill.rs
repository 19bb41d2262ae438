//! Signalling every process of a container (`kill --all`, `delete --force`).
//!
//! Theory: reading the pid list and signalling each pid races with processes that fork in
//! between. SIGKILL goes through cgroup2's `cgroup.kill` where the kernel offers it (5.14+; also
//! in the unified tree of a hybrid host), which kills the whole cgroup atomically, forks
//! included. Otherwise the cgroup is frozen first (no task can fork while frozen), each pid is
//! signalled, and the cgroup is thawed so the signals are delivered; a pid that exited meanwhile
//! (ESRCH) is fine.
//!
//! Privileges: root. Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::fsio::{has, write};
use crate::{Cgroup, Error};
use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Sends `signal` to every process of `cg`.
pub fn signal_all(cg: &Cgroup, signal: Signal) -> Result<(), Error> {
    if signal == Signal::SIGKILL {
        if let Some(d) = cg.v2_dir().filter(|d| has(&d.path, "cgroup.kill")) {
            return write(&d.path, "cgroup.kill", "1");
        }
    }
    let frozen = cg.freeze().is_ok();
    let result = signal_each(cg, signal);
    if frozen {
        cg.thaw()?;
    }
    result
}

fn signal_each(cg: &Cgroup, signal: Signal) -> Result<(), Error> {
    for pid in cg.pids()? {
        match kill(Pid::from_raw(pid), signal) {
            Ok(()) | Err(Errno::ESRCH) => {}
            Err(errno) => {
                return Err(Error::Signal {
                    signal: signal.as_str(),
                    pid,
                    error: errno.into(),
                })
            }
        }
    }
    Ok(())
}
