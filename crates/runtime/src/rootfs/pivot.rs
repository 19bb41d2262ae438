//! Making the prepared root the container's `/`.
//!
//! Theory of operation: `pivot_root(".", ".")` with the cwd at the new root stacks the old root
//! on top of the new one, so no put_old directory is needed; `umount2(".", MNT_DETACH)` then
//! drops the old root (pivot_root(2), NOTES). When the root propagation left mounts that may be
//! peers of the host's (anything but the recursive private/slave types), the old root is first
//! made rslave so that its lazy unmount does not propagate to the host. `--no-pivot` (roots on
//! ramfs, where pivot_root is refused) moves the root mount onto `/` with MS_MOVE and chroots
//! into it instead.
//!
//! Privileges: CAP_SYS_ADMIN (and CAP_SYS_CHROOT for --no-pivot) in the container's user
//! namespace. Tests: `tests/priv_rootfs.rs`.
use super::RootfsError;
use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::unistd::{chdir, chroot, fchdir, pivot_root as pivot};
use std::os::fd::OwnedFd;
use std::path::Path;

/// pivot_root into `root` (an fd of `rootfs`) and detach the old root.
pub(crate) fn pivot_root(
    root: &OwnedFd,
    rootfs: &Path,
    may_propagate: bool,
) -> Result<(), RootfsError> {
    let err = |step, e: Errno| RootfsError::PivotRoot {
        rootfs: rootfs.to_path_buf(),
        step,
        source: e.into(),
    };
    fchdir(root).map_err(|e| err("entering the root", e))?;
    pivot(".", ".").map_err(|e| err("pivot_root", e))?;
    if may_propagate {
        let flags = MsFlags::MS_SLAVE | MsFlags::MS_REC;
        mount(None::<&str>, ".", None::<&str>, flags, None::<&str>)
            .map_err(|e| err("making the old root rslave", e))?;
    }
    umount2(".", MntFlags::MNT_DETACH).map_err(|e| err("detaching the old root", e))?;
    chdir("/").map_err(|e| err("entering the new /", e))
}

/// `--no-pivot`: MS_MOVE the root onto `/` and chroot into it.
pub(crate) fn move_root(root: &OwnedFd, rootfs: &Path) -> Result<(), RootfsError> {
    let err = |step, e: Errno| RootfsError::MoveRoot {
        rootfs: rootfs.to_path_buf(),
        step,
        source: e.into(),
    };
    fchdir(root).map_err(|e| err("entering the root", e))?;
    mount(Some("."), "/", None::<&str>, MsFlags::MS_MOVE, None::<&str>)
        .map_err(|e| err("MS_MOVE", e))?;
    chroot(".").map_err(|e| err("chroot", e))?;
    chdir("/").map_err(|e| err("entering the new /", e))
}
