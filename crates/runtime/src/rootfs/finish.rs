//! The last touches, from inside the new root: `linux.readonlyPaths`, `linux.maskedPaths`,
//! `root.readonly`.
//!
//! Theory of operation: after the pivot, paths resolve inside the container, so plain paths
//! are safe. A readonly path is bind-mounted onto itself with its submounts and made read-only
//! recursively with `mount_setattr(AT_RECURSIVE)`, which sets only `MOUNT_ATTR_RDONLY` and so
//! keeps every other flag (also the ones a user namespace locks). A masked path gets
//! `/dev/null` bound over it, or, when it is a directory (ENOTDIR), a read-only tmpfs. Paths
//! that do not exist are skipped, as runc does. `root.readonly` sets `MOUNT_ATTR_RDONLY` on the
//! root mount only (the spec's mounts below keep their own options); `/dev` stays as the spec
//! made it.
//!
//! Privileges: CAP_SYS_ADMIN in the container's user namespace. Tests: `tests/priv_rootfs.rs`.
use super::RootfsError;
use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use pier_sys::mount::{self as sysmount, MountAttr, AT_RECURSIVE, MOUNT_ATTR_RDONLY};
use std::io;
use std::path::Path;

const READ_ONLY: MountAttr = MountAttr {
    attr_set: MOUNT_ATTR_RDONLY,
    attr_clr: 0,
    propagation: 0,
    userns_fd: 0,
};

/// Makes `path` (and everything mounted below it) read-only; a missing path is skipped.
pub(crate) fn readonly_path(path: &Path) -> Result<(), RootfsError> {
    let err = |step, e: io::Error| RootfsError::ReadonlyPath {
        path: path.to_path_buf(),
        step,
        source: e,
    };
    let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
    match mount(Some(path), path, None::<&str>, flags, None::<&str>) {
        Ok(()) => {}
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(err("bind-mounting it onto itself", e.into())),
    }
    sysmount::mount_setattr(None, path, AT_RECURSIVE, &READ_ONLY)
        .map_err(|e| err("making it read-only", e))
}

/// Hides `path`: `/dev/null` over a file, a read-only tmpfs over a directory.
pub(crate) fn mask_path(path: &Path) -> Result<(), RootfsError> {
    let err = |e: Errno| RootfsError::MaskedPath {
        path: path.to_path_buf(),
        source: e.into(),
    };
    match mount(
        Some("/dev/null"),
        path,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    ) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(Errno::ENOTDIR) => mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::MS_RDONLY,
            None::<&str>,
        )
        .map_err(err),
        Err(e) => Err(err(e)),
    }
}

/// `root.readonly`: the root mount becomes read-only.
pub(crate) fn readonly_root() -> Result<(), RootfsError> {
    sysmount::mount_setattr(None, "/", 0, &READ_ONLY).map_err(RootfsError::ReadonlyRoot)
}
