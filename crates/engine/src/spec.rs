//! A [`RunConfig`] becomes an OCI runtime spec carrying Docker's defaults.
//!
//! Theory of operation: start from Docker's generated config (default capabilities, masked and
//! readonly paths, default devices and mounts, the default seccomp profile from pier-seccomp),
//! then apply the run flags in Docker's order: user, env (PATH and HOSTNAME first, TERM with -t),
//! workdir, caps add/drop, no-new-privileges, ulimits, resources, volumes and tmpfs, the root's
//! own mounts and the /etc files, the namespaces (network per [`NetNs`]), and `--init`
//! (pier's own binary bound at /dev/init as pid 1, see `init.rs`).
//! Tests: unit tests below (the values Docker writes, checked field by field).
use oci_spec::runtime::Spec;
use std::path::PathBuf;

use crate::config::RunConfig;
use crate::rootfs::Prepared;

/// The container's network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetNs {
    /// A new, empty one (`none`, and networks the engine attaches after `create`).
    New,
    /// Join this one (`container:NAME` gives the other container's `/proc/PID/ns/net`).
    Join(PathBuf),
    /// The host's (`--network host`).
    Host,
}

/// Everything the spec needs beyond the config.
#[derive(Debug, Clone)]
pub struct Context {
    pub root: Prepared,
    pub hostname: String,
    pub netns: NetNs,
    /// Generated `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf` (None with `--network host`
    /// for hosts and resolv.conf, which then come from the host root or image).
    pub hosts: Option<PathBuf>,
    pub hostname_file: Option<PathBuf>,
    pub resolv_conf: Option<PathBuf>,
    /// `linux.cgroupsPath`.
    pub cgroups_path: String,
    /// The binary bound at /dev/init with `--init` (pier's own executable).
    pub init_binary: Option<PathBuf>,
}

/// Why a spec could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    #[error("{0}")]
    Invalid(String),
    #[error("seccomp profile {path}: {reason}")]
    Seccomp { path: PathBuf, reason: String },
}

/// The container's config.json.
pub fn build(config: &RunConfig, ctx: &Context) -> Result<Spec, SpecError> {
    let _ = (config, ctx);
    todo!("engine-spec helper")
}
