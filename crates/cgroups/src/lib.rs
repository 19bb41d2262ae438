//! pier-cgroups: a container's cgroups on cgroup v1, v2 and hybrid hosts.
//!
//! Theory of operation:
//! - `create` reads the host's hierarchies from /proc/self/mountinfo (hierarchy.rs), resolves
//!   `cgroupsPath` (path.rs: cgroupfs or systemd semantics), makes the container's directory in
//!   *every* mounted hierarchy (setup.rs) — each v1 hierarchy and, on v2 or hybrid hosts, the
//!   cgroup2 tree — and applies `linux.resources` (resources.rs → v1.rs / v2.rs). On a hybrid
//!   host resources go to the v1 controllers, and the container also gets a directory in the
//!   unified tree: clone3(CLONE_INTO_CGROUP) lands there, cgroup-BPF attaches there, `pids()`
//!   and the v2 freezer read it. The resulting `Cgroup` is plain data (paths per hierarchy) that
//!   the runtime stores in its state file, so any later command or crash recovery can apply,
//!   freeze, list and destroy.
//! - Joining, the expensive part. Figures from `examples/join_cost.rs` on this machine (hybrid,
//!   9 v1 hierarchies + unified, medians of 15 rounds, each after 300 ms idle): writing a pid
//!   to cgroup.procs takes the write side of cgroup_threadgroup_rwsem and waits for an RCU
//!   grace period: 8–9 ms for the first write, while the next 9 writes of the same burst cost
//!   0.25 ms together (rcu_sync keeps the lock in its slow-reader state for a while), so 1 and
//!   10 writes cost about the same. A thread writing `0` to its own v1 `tasks` file skips that
//!   lock: 0.08 ms for all 9 hierarchies (also after unshare(CLONE_NEWUSER), since the files were
//!   opened by root). clone3(CLONE_INTO_CGROUP) costs 0.04–0.09 ms. So the fastest correct
//!   start is: `self_join()` (opens the v1 `tasks` files) and `clone_into_fd()` before clone3,
//!   `SelfJoin::join()` first thing in the single-threaded child, then `add_process(pid, true)`
//!   in the parent, which reads /proc/<pid>/cgroup (0.03 ms) and writes nothing when the child
//!   already joined (it is the fallback that writes cgroup.procs otherwise).
//! - Which hierarchies: all mounted ones, like runc. mkdir costs 0.06–0.09 ms per hierarchy
//!   after idle (cpuset 0.2 ms, plus 0.08 ms to copy cpus/mems), `create` 0.73 ms in all.
//!   Joining only the hierarchies the spec's resources touch would save at most ~0.4 ms (mostly
//!   cpuset) but is not safe enough to be the default: containers would share the caller's
//!   cpuacct/blkio accounting (`docker stats` reads the container's own cgroups), stay in the
//!   caller's name=systemd cgroup (on systemd hosts, stopping the caller's unit kills them),
//!   and a later `update` of cpuset or blkio limits would need a freeze-and-move.
//!   Not done: remounting with `favordynmods`, which would make every cgroup.procs write cheap
//!   but is a host-global setting.
//! - `stats` reads usage for `pier events` (stats.rs); `signal_all` signals every process
//!   without racing forks (kill.rs: cgroup.kill, or freeze/signal/thaw).
//! - Freezer: v1 freezer.state when the container has a v1 freezer directory, else cgroup2's
//!   cgroup.freeze (freezer.rs). Teardown removes every directory, retrying on EBUSY while
//!   exiting tasks drain, continuing past failures and reporting all of them.
//! - Device rules: v1 devices.allow/deny where the devices hierarchy exists, else a
//!   BPF_CGROUP_DEVICE program compiled from the rules and attached to the cgroup2 directory
//!   (devices.rs; pure v2 hosts).
//! - systemd: the scope path is computed like systemd would; without a running systemd
//!   `create` fails with a hint to use cgroupfs; with one, the directories are made through
//!   cgroupfs at that path (no transient unit is registered over D-Bus).
//!
//! Privileges: root (or a delegated tree) for everything but path and mountinfo parsing.
//! Tests: unit tests beside each module; crates/cgroups/tests/priv_cgroups.rs (root).
mod convert;
pub mod devices;
mod error;
mod freezer;
mod fsio;
pub mod hierarchy;
mod join;
mod kill;
pub mod path;
mod resources;
mod setup;
mod stats;
mod v1;
mod v2;

pub use convert::{blkio_to_io_weight, shares_to_weight};
pub use error::Error;
pub use hierarchy::{Hierarchies, Hierarchy};
pub use join::SelfJoin;
pub use stats::{CpuStats, CpuUsage, MemoryStats, MemoryUsage, PidsStats, Stats, Throttling};

use freezer::Freezer;
use hierarchy::memberships;
use oci_spec::runtime::LinuxResources;
use path::Location;
use serde::{Deserialize, Serialize};
use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Which cgroup manager the runtime was told to use (`--cgroup-manager`, `--systemd-cgroup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ManagerKind {
    /// Directories under /sys/fs/cgroup written directly.
    #[default]
    Cgroupfs,
    /// `cgroupsPath` is `slice:prefix:name` and systemd owns the unit.
    Systemd,
    /// No cgroup at all (the container stays in the caller's cgroups).
    Disabled,
}

/// The container's directory in one hierarchy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dir {
    /// Controllers of this v1 hierarchy (`["cpu"]`, `["name=systemd"]`); empty for cgroup2.
    pub controllers: Vec<String>,
    /// Where the hierarchy is mounted.
    pub mountpoint: PathBuf,
    /// The container's directory.
    pub path: PathBuf,
    /// The cgroup as /proc/<pid>/cgroup names it.
    pub cgroup: String,
    /// The topmost directory `create` made (the leaf itself when it existed); `destroy`
    /// removes the leaf and then empty parents up to this one.
    pub made_from: PathBuf,
}

impl Dir {
    /// True for the cgroup2 directory.
    pub fn is_v2(&self) -> bool {
        self.controllers.is_empty()
    }

    fn label(&self) -> String {
        if self.is_v2() {
            "unified".into()
        } else {
            self.controllers.join(",")
        }
    }
}

/// A container's cgroup(s): serialisable so the runtime keeps it in its state file and any
/// later command (or crash recovery) can find and remove it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cgroup {
    /// The manager it was created with.
    pub kind: ManagerKind,
    /// One entry per hierarchy (v1 hierarchies first, then cgroup2); empty when disabled.
    pub dirs: Vec<Dir>,
}

impl Cgroup {
    /// Creates the cgroup(s) for a container (`cgroups_path` from the spec, or one derived from
    /// the id) and applies `resources`. Nothing is joined yet. On failure nothing is left.
    pub fn create(
        container_id: &str,
        cgroups_path: Option<&Path>,
        kind: ManagerKind,
        resources: Option<&LinuxResources>,
    ) -> Result<Cgroup, Error> {
        let mut cg = Cgroup {
            kind,
            dirs: Vec::new(),
        };
        if kind == ManagerKind::Disabled {
            return Ok(cg);
        }
        if kind == ManagerKind::Systemd {
            if !Path::new("/run/systemd/system").exists() {
                return Err(Error::SystemdNotRunning);
            }
            log::warn!("systemd manager: cgroup made through cgroupfs, no scope unit registered");
        }
        let raw = cgroups_path
            .map(|p| {
                p.to_str().ok_or_else(|| Error::InvalidPath {
                    path: p.to_string_lossy().into_owned(),
                    reason: "not UTF-8",
                })
            })
            .transpose()?;
        let location = path::locate(kind, raw, container_id)?;
        let hierarchies = Hierarchies::detect()?;
        if let Err(e) = cg.make_dirs(&hierarchies, &location) {
            cg.destroy_after_failure();
            return Err(e);
        }
        if let Some(res) = resources {
            if let Err(e) = resources::apply(&cg, res) {
                cg.destroy_after_failure();
                return Err(e);
            }
        }
        Ok(cg)
    }

    fn make_dirs(&mut self, found: &Hierarchies, location: &Location) -> Result<(), Error> {
        let caller = match location {
            Location::Relative(_) => memberships(0)?,
            Location::Absolute(_) => Vec::new(),
        };
        for h in found.v1.iter().chain(found.v2.iter()) {
            let cgroup = match location {
                Location::Absolute(a) => a.clone(),
                Location::Relative(r) => {
                    let base = hierarchy::path_in(&caller, &h.controllers).ok_or_else(|| {
                        Error::CallerCgroupUnknown {
                            controllers: h.label(),
                        }
                    })?;
                    format!("{}/{r}", base.trim_end_matches('/'))
                }
            };
            let dir = h.dir_of(&cgroup);
            let made_from = setup::make_dir(&h.mountpoint, &dir)?;
            self.dirs.push(Dir {
                controllers: h.controllers.clone(),
                mountpoint: h.mountpoint.clone(),
                path: dir.clone(),
                cgroup,
                made_from,
            });
            if h.has("cpuset") {
                setup::init_cpuset(&h.mountpoint, &dir)?;
            }
            if h.is_v2() && found.v1.is_empty() {
                setup::enable_v2(&h.mountpoint, &dir, setup::all_v2_controllers())?;
            }
        }
        Ok(())
    }

    fn destroy_after_failure(&self) {
        if let Err(e) = self.destroy() {
            log::warn!("cleanup after a failed cgroup setup: {e}");
        }
    }

    /// The v1 directory carrying `controller`.
    pub fn v1_dir(&self, controller: &str) -> Option<&Dir> {
        self.dirs
            .iter()
            .find(|d| d.controllers.iter().any(|c| c == controller))
    }

    /// The cgroup2 directory (pure v2, or the unified tree of a hybrid host).
    pub fn v2_dir(&self) -> Option<&Dir> {
        self.dirs.iter().find(|d| d.is_v2())
    }

    /// An fd of the cgroup2 directory for `clone3(CLONE_INTO_CGROUP)`, when there is one
    /// (pure v2, or the unified tree of a hybrid host).
    pub fn clone_into_fd(&self) -> Option<OwnedFd> {
        let dir = self.v2_dir()?;
        match std::fs::File::open(&dir.path) {
            Ok(f) => Some(f.into()),
            Err(e) => {
                log::warn!("open {} for CLONE_INTO_CGROUP: {e}", dir.path.display());
                None
            }
        }
    }

    /// Opens the `tasks` file of every v1 directory so a freshly cloned, single-threaded
    /// child can move itself with `SelfJoin::join` (see join.rs; much cheaper than
    /// `add_process`). Call before clone3; the child inherits the fds.
    pub fn self_join(&self) -> Result<SelfJoin, Error> {
        let mut files = Vec::new();
        for d in self.dirs.iter().filter(|d| !d.is_v2()) {
            let path = d.path.join("tasks");
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(&path)
                .map_err(|error| Error::Open { path, error })?;
            files.push((d.label(), d.path.clone(), file));
        }
        Ok(SelfJoin { files })
    }

    /// Moves `pid` into every hierarchy it is not in yet (v1 controllers; v2 unless the process
    /// was cloned into it with `already_in_v2`). Reads /proc/<pid>/cgroup first and writes
    /// cgroup.procs only where the process is elsewhere.
    pub fn add_process(&self, pid: i32, already_in_v2: bool) -> Result<(), Error> {
        if self.dirs.is_empty() {
            return Ok(());
        }
        let now = memberships(pid)?;
        for d in &self.dirs {
            if d.is_v2() && already_in_v2 {
                continue;
            }
            if hierarchy::path_in(&now, &d.controllers) != Some(d.cgroup.as_str()) {
                fsio::write(&d.path, "cgroup.procs", &pid.to_string())?;
            }
        }
        Ok(())
    }

    /// Applies (or updates, for `pier update`) resource limits.
    pub fn apply(&self, resources: &LinuxResources) -> Result<(), Error> {
        if self.dirs.is_empty() {
            return Err(Error::Disabled {
                op: "update resources",
            });
        }
        resources::apply(self, resources)
    }

    /// The freezer this container uses (v1 freezer if it has one, else cgroup2).
    fn freezer(&self, op: &'static str) -> Result<(Freezer, &Path), Error> {
        if let Some(d) = self.v1_dir("freezer") {
            return Ok((Freezer::V1, &d.path));
        }
        match self.v2_dir() {
            Some(d) => Ok((Freezer::V2, &d.path)),
            None if self.dirs.is_empty() => Err(Error::Disabled { op }),
            None => Err(Error::ControllerMissing {
                controller: "freezer",
                what: op,
            }),
        }
    }

    /// Freezes every process of the cgroup (pause); returns once all are frozen.
    pub fn freeze(&self) -> Result<(), Error> {
        let (kind, dir) = self.freezer("pause the container")?;
        freezer::set(kind, dir, true)
    }

    /// Thaws the cgroup (resume).
    pub fn thaw(&self) -> Result<(), Error> {
        let (kind, dir) = self.freezer("resume the container")?;
        freezer::set(kind, dir, false)
    }

    /// True when the cgroup is frozen (false for a container without cgroups).
    pub fn is_frozen(&self) -> Result<bool, Error> {
        match self.freezer("check the freezer") {
            Ok((kind, dir)) => freezer::state(kind, dir),
            Err(Error::Disabled { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Every pid in the cgroup (the container's processes, as the host sees them), read from
    /// the cgroup2 directory when there is one, else the pids (or first) v1 hierarchy.
    pub fn pids(&self) -> Result<Vec<i32>, Error> {
        let dir = self
            .v2_dir()
            .or_else(|| self.v1_dir("pids"))
            .or(self.dirs.first())
            .ok_or(Error::Disabled {
                op: "list the container's processes",
            })?;
        fsio::read_pids(&dir.path, "cgroup.procs")
    }

    /// Sends `signal` to every process of the cgroup (`kill --all`, `delete --force`): SIGKILL
    /// through cgroup.kill where there is one, else freeze, signal each pid, thaw (kill.rs).
    pub fn signal_all(&self, signal: nix::sys::signal::Signal) -> Result<(), Error> {
        kill::signal_all(self, signal)
    }

    /// Usage figures for `pier events --stats` (runc's stats shape, see stats.rs).
    pub fn stats(&self) -> Result<Stats, Error> {
        if self.dirs.is_empty() {
            return Err(Error::Disabled {
                op: "read statistics",
            });
        }
        stats::read_all(self)
    }

    /// Removes the cgroup directories (after the processes are gone), and the empty parents
    /// `create` made. Idempotent; continues past failures and reports all of them.
    pub fn destroy(&self) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut errors = Vec::new();
        for d in &self.dirs {
            if let Err(e) = rmdir_retrying(&d.path, deadline) {
                errors.push(e);
                continue;
            }
            let parents = d.path.ancestors().skip(1);
            for parent in parents.take_while(|p| p.starts_with(&d.made_from)) {
                if let Err(error) = std::fs::remove_dir(parent) {
                    if !matches!(
                        error.raw_os_error(),
                        Some(libc::EBUSY | libc::ENOTEMPTY | libc::ENOENT)
                    ) {
                        errors.push(Error::Rmdir {
                            path: parent.to_path_buf(),
                            error,
                        });
                    }
                    break;
                }
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::Destroy(errors)),
        }
    }
}

/// rmdir that treats "already gone" as done and retries EBUSY (tasks still exiting) until
/// `deadline`, backing off from 1 ms to 50 ms.
fn rmdir_retrying(path: &Path, deadline: Instant) -> Result<(), Error> {
    let mut pause = Duration::from_millis(1);
    loop {
        match std::fs::remove_dir(path) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            Err(error) => {
                return Err(Error::Rmdir {
                    path: path.to_path_buf(),
                    error,
                })
            }
        }
    }
}
