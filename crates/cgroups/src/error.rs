//! The one error type of pier-cgroups: each variant names the step that failed and carries the
//! controller, file, directory and value involved, so a message alone tells what to look at
//! (e.g. `write memory.limit_in_bytes = 1048576 in /sys/fs/cgroup/memory/pier/x: Device or
//! resource busy`). OS errors are part of the message (field `error`, not a `source`), so a
//! caller printing the whole chain does not print them twice.
use std::io;
use std::path::PathBuf;

/// What failed while creating, configuring or removing a cgroup.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading /proc/self/mountinfo or /proc/<pid>/cgroup failed.
    #[error("read {path}: {error}")]
    ReadProc { path: PathBuf, error: io::Error },

    /// No cgroup or cgroup2 filesystem is mounted.
    #[error("no cgroup filesystem is mounted (checked /proc/self/mountinfo)")]
    NoCgroupMount,

    /// `--cgroup-manager systemd` on a host where systemd is not the init system.
    #[error(
        "the systemd cgroup manager was requested but systemd is not running \
         (no /run/systemd/system): use --cgroup-manager cgroupfs"
    )]
    SystemdNotRunning,

    /// `cgroupsPath` cannot be used.
    #[error("invalid cgroupsPath {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },

    /// The caller's own cgroup in a hierarchy is unknown (needed for a relative `cgroupsPath`).
    #[error("no entry for the {controllers} hierarchy in /proc/self/cgroup")]
    CallerCgroupUnknown { controllers: String },

    /// Creating a cgroup directory failed.
    #[error("create cgroup directory {path}: {error}")]
    Mkdir { path: PathBuf, error: io::Error },

    /// Writing a cgroup file failed.
    #[error("write {file} = {value} in {dir}: {error}")]
    Write {
        file: String,
        value: String,
        dir: PathBuf,
        error: io::Error,
    },

    /// Reading a cgroup file failed.
    #[error("read {file} in {dir}: {error}")]
    Read {
        file: String,
        dir: PathBuf,
        error: io::Error,
    },

    /// A cgroup file held something unexpected.
    #[error("parse {file} in {dir}: unexpected content {content:?}")]
    Parse {
        file: String,
        dir: PathBuf,
        content: String,
    },

    /// A resource value is out of range or inconsistent with another one.
    #[error("invalid {field} {value}: {reason}")]
    InvalidValue {
        field: &'static str,
        value: String,
        reason: &'static str,
    },

    /// The spec asks for a resource whose controller is not mounted or not available.
    #[error("cannot apply {what}: the {controller} controller is not available on this host")]
    ControllerMissing {
        controller: &'static str,
        what: &'static str,
    },

    /// A deny rule on a host with neither a v1 devices hierarchy nor cgroup2.
    #[error(
        "device rule {rule} cannot be enforced: this host has neither the v1 devices \
         controller nor cgroup2 (remove the rule or mount one of them)"
    )]
    DeviceRuleUnenforceable { rule: String },

    /// A bpf(2) step of installing the cgroup2 device program failed.
    #[error("{step} {dir}: {error}")]
    Bpf {
        step: &'static str,
        dir: PathBuf,
        error: io::Error,
    },

    /// An operation that needs a cgroup on a container created with `--cgroup-manager disabled`.
    #[error("cannot {op}: the container has no cgroup (created with --cgroup-manager disabled)")]
    Disabled { op: &'static str },

    /// Freezing or thawing did not reach the wanted state in time.
    #[error("{op} {dir}: still {state:?} after {waited_ms} ms")]
    FreezeTimeout {
        op: &'static str,
        dir: PathBuf,
        state: String,
        waited_ms: u64,
    },

    /// Opening a cgroup directory or file for a later join failed.
    #[error("open {path}: {error}")]
    Open { path: PathBuf, error: io::Error },

    /// The calling thread could not move itself into a v1 hierarchy.
    #[error("join the {controllers} cgroup (write 0 to tasks) of {dir}: {error}")]
    SelfJoin {
        controllers: String,
        dir: PathBuf,
        error: io::Error,
    },

    /// Signalling one of the container's processes failed.
    #[error("send {signal} to pid {pid}: {error}")]
    Signal {
        signal: &'static str,
        pid: i32,
        error: io::Error,
    },

    /// Removing a cgroup directory failed (after retries on EBUSY).
    #[error("remove cgroup directory {path}: {error}")]
    Rmdir { path: PathBuf, error: io::Error },

    /// Several steps of a teardown failed; every failure is listed.
    #[error("remove cgroup: {}", list(.0))]
    Destroy(Vec<Error>),
}

fn list(errors: &[Error]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}
