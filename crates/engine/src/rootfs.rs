//! A container's root filesystem: the built-in `host` root or an overlay on a directory.
//!
//! Theory of operation: `host` uses one shared, read-only skeleton directory
//! (`<state>/hostroot`: empty mount points and the /usr-merge symlinks, made once) and a list of
//! spec mounts: the host's system directories bound read-only, private tmpfs on /tmp, /run and
//! /var/tmp, and the container's generated /etc files; nothing is mounted on the host. A
//! directory root becomes the lower layer of an overlay mounted on the host at
//! `<container dir>/rootfs`, with `upper`/`work` beside it (no upper with `--read-only`), so the
//! directory given is never changed. The mount point is fixed by the container directory, so
//! [`release`] (unmount if mounted, remove the layers) needs no other record and is what teardown
//! and crash recovery both call.
//! Privileges: root (mount). Tests: crates/engine/tests/priv_rootfs.rs.
use oci_spec::runtime::Mount;
use std::path::{Path, PathBuf};

use crate::config::Rootfs;
use crate::Paths;

/// The prepared root: what the spec's `root` and extra `mounts` must say.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// `root.path` of the spec.
    pub root: PathBuf,
    /// `root.readonly` of the spec.
    pub readonly: bool,
    /// Mounts the root needs (host directories for `host`), before the container's own.
    pub mounts: Vec<Mount>,
}

/// Why a root filesystem could not be prepared.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Prepares the root of the container whose directory is `container_dir`.
pub fn prepare(
    paths: &Paths,
    rootfs: &Rootfs,
    read_only: bool,
    container_dir: &Path,
) -> Result<Prepared, RootfsError> {
    let _ = (paths, rootfs, read_only, container_dir);
    todo!("engine-spec helper")
}

/// Unmounts the overlay of `container_dir` if mounted and removes its layers (idempotent).
pub fn release(container_dir: &Path) -> Result<(), RootfsError> {
    let _ = container_dir;
    todo!("engine-spec helper")
}
