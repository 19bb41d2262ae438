//! pier-cgroups. INTERFACE STUB: the cgroups helper replaces the bodies and adds the modules.
use oci_spec::runtime::LinuxResources;
use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;

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

/// What failed while creating, configuring or removing a cgroup.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Placeholder until the cgroups module lands.
    #[error("cgroups are not built yet")]
    NotBuilt,
}

/// A container's cgroup(s): serialisable so the runtime keeps it in its state file and any
/// later command (or crash recovery) can find and remove it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Cgroup {
    _private: (),
}

impl Cgroup {
    /// Creates the cgroup(s) for a container (`cgroups_path` from the spec, or one derived from
    /// the id) and applies `resources`. Nothing is joined yet.
    pub fn create(
        container_id: &str,
        cgroups_path: Option<&std::path::Path>,
        kind: ManagerKind,
        resources: Option<&LinuxResources>,
    ) -> Result<Cgroup, Error> {
        let _ = (container_id, cgroups_path, kind, resources);
        Err(Error::NotBuilt)
    }

    /// An fd of the cgroup2 directory for `clone3(CLONE_INTO_CGROUP)`, when there is one
    /// (pure v2, or the unified tree of a hybrid host).
    pub fn clone_into_fd(&self) -> Option<OwnedFd> {
        None
    }

    /// Moves `pid` into every hierarchy it is not in yet (v1 controllers; v2 unless the process
    /// was cloned into it with `already_in_v2`).
    pub fn add_process(&self, pid: i32, already_in_v2: bool) -> Result<(), Error> {
        let _ = (pid, already_in_v2);
        Err(Error::NotBuilt)
    }

    /// Applies (or updates, for `pier update`) resource limits.
    pub fn apply(&self, resources: &LinuxResources) -> Result<(), Error> {
        let _ = resources;
        Err(Error::NotBuilt)
    }

    /// Freezes every process of the cgroup (pause).
    pub fn freeze(&self) -> Result<(), Error> {
        Err(Error::NotBuilt)
    }

    /// Thaws the cgroup (resume).
    pub fn thaw(&self) -> Result<(), Error> {
        Err(Error::NotBuilt)
    }

    /// True when the cgroup is frozen.
    pub fn is_frozen(&self) -> Result<bool, Error> {
        Err(Error::NotBuilt)
    }

    /// Every pid in the cgroup (the container's processes, as the host sees them).
    pub fn pids(&self) -> Result<Vec<i32>, Error> {
        Err(Error::NotBuilt)
    }

    /// Removes the cgroup directories (after the processes are gone). Idempotent.
    pub fn destroy(&self) -> Result<(), Error> {
        Err(Error::NotBuilt)
    }
}
