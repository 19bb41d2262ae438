//! The new mount API calls that neither `nix` nor `libc` wrap: `open_tree(2)`, `move_mount(2)`
//! and `mount_setattr(2)` (Linux 5.12+).
//!
//! Theory of operation: the rootfs code clones a bind source into a detached mount with
//! `open_tree(OPEN_TREE_CLONE)`, sets its attributes with `mount_setattr` while nobody can see it
//! (so a read-only bind is never writable, not even for a moment), and attaches it with
//! `move_mount` onto an fd that was resolved inside the container's root. `mount_setattr` with
//! `AT_RECURSIVE` is also what gives the spec's recursive options (`rro`, `rnosuid`, ...) their
//! meaning. The constants are the kernel's UAPI values (`linux/mount.h`, `linux/fcntl.h`).
//!
//! Privileges: CAP_SYS_ADMIN in the user namespace owning the mount namespace (except for
//! `open_tree` without `OPEN_TREE_CLONE`, which is an `O_PATH` open).
//! Tests: unit tests below (those that change mounts live in pier-runtime's `priv_rootfs`).
use nix::NixPath;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// `open_tree`: clone the mount (tree) instead of opening it as an `O_PATH` fd.
pub const OPEN_TREE_CLONE: u32 = 0x1;
/// `open_tree`: close the returned fd on exec.
pub const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
/// `open_tree` / `mount_setattr`: apply to the whole tree below the mount.
pub const AT_RECURSIVE: u32 = 0x8000;
/// Operate on the fd itself (empty path).
pub const AT_EMPTY_PATH: u32 = libc::AT_EMPTY_PATH as u32;

/// Mount attribute: read-only.
pub const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// Mount attribute: ignore suid and sgid bits.
pub const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
/// Mount attribute: no device files.
pub const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
/// Mount attribute: no program execution.
pub const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;
/// Mask of the three atime modes below; clear it to change the mode.
pub const MOUNT_ATTR_ATIME_MASK: u64 = 0x0000_0070;
/// Atime mode: relatime (the value 0 inside the mask).
pub const MOUNT_ATTR_RELATIME: u64 = 0x0000_0000;
/// Atime mode: never update access times.
pub const MOUNT_ATTR_NOATIME: u64 = 0x0000_0010;
/// Atime mode: always update access times.
pub const MOUNT_ATTR_STRICTATIME: u64 = 0x0000_0020;
/// Mount attribute: no directory access time updates.
pub const MOUNT_ATTR_NODIRATIME: u64 = 0x0000_0080;
/// Mount attribute: do not follow symlinks.
pub const MOUNT_ATTR_NOSYMFOLLOW: u64 = 0x0020_0000;

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MountAttr {
    /// `MOUNT_ATTR_*` bits to set.
    pub attr_set: u64,
    /// `MOUNT_ATTR_*` bits to clear (applied before `attr_set`).
    pub attr_clr: u64,
    /// One of `MS_PRIVATE`, `MS_SHARED`, `MS_SLAVE`, `MS_UNBINDABLE`, or 0 to leave it.
    pub propagation: u64,
    /// User namespace fd for `MOUNT_ATTR_IDMAP` (unused by pier so far).
    pub userns_fd: u64,
}

impl MountAttr {
    /// True when applying this would change nothing.
    pub fn is_empty(&self) -> bool {
        self.attr_set == 0 && self.attr_clr == 0 && self.propagation == 0
    }
}

fn raw_dirfd(dirfd: Option<BorrowedFd<'_>>) -> RawFd {
    dirfd.map_or(libc::AT_FDCWD, |fd| fd.as_raw_fd())
}

/// `open_tree(dirfd, path, flags)`; `dirfd` None means the cwd. With `OPEN_TREE_CLONE` the
/// result is a detached copy of the mount (of the tree with `AT_RECURSIVE`).
pub fn open_tree<P: ?Sized + NixPath>(
    dirfd: Option<BorrowedFd<'_>>,
    path: &P,
    flags: u32,
) -> io::Result<OwnedFd> {
    let dirfd = raw_dirfd(dirfd);
    let ret = path.with_nix_path(|p| {
        // SAFETY: `p` is a NUL-terminated string that outlives the call; the kernel only reads
        // it. `dirfd` is AT_FDCWD or a descriptor borrowed for the duration of the call.
        unsafe { libc::syscall(libc::SYS_open_tree, dirfd, p.as_ptr(), flags) }
    })?;
    crate::check(ret)?;
    // SAFETY: on success open_tree returns a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// `move_mount(from, "", to, to_path, MOVE_MOUNT_F_EMPTY_PATH [| MOVE_MOUNT_T_EMPTY_PATH])`:
/// attaches the (detached or attached) mount `from` on top of `to_path` relative to the
/// directory `to`, or on top of `to` itself when `to_path` is empty.
pub fn move_mount<P: ?Sized + NixPath>(
    from: BorrowedFd<'_>,
    to: BorrowedFd<'_>,
    to_path: &P,
) -> io::Result<()> {
    const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x04;
    const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
    let mut flags = MOVE_MOUNT_F_EMPTY_PATH;
    if to_path.is_empty() {
        flags |= MOVE_MOUNT_T_EMPTY_PATH;
    }
    let empty = c"";
    let ret = to_path.with_nix_path(|p| {
        // SAFETY: both descriptors are borrowed for the duration of the call; both paths are
        // NUL-terminated strings that outlive it, and the kernel only reads them.
        unsafe {
            libc::syscall(
                libc::SYS_move_mount,
                from.as_raw_fd(),
                empty.as_ptr(),
                to.as_raw_fd(),
                p.as_ptr(),
                flags,
            )
        }
    })?;
    crate::check(ret)?;
    Ok(())
}

/// `mount_setattr(dirfd, path, flags, attr)`; `dirfd` None means the cwd. Use `AT_EMPTY_PATH`
/// with an empty path to act on the fd itself and `AT_RECURSIVE` for the whole tree.
pub fn mount_setattr<P: ?Sized + NixPath>(
    dirfd: Option<BorrowedFd<'_>>,
    path: &P,
    flags: u32,
    attr: &MountAttr,
) -> io::Result<()> {
    let dirfd = raw_dirfd(dirfd);
    let ret = path.with_nix_path(|p| {
        // SAFETY: `p` is NUL-terminated and outlives the call; `attr` points to a live
        // `struct mount_attr` whose size is passed along, and the kernel only reads both.
        unsafe {
            libc::syscall(
                libc::SYS_mount_setattr,
                dirfd,
                p.as_ptr(),
                flags,
                attr as *const MountAttr,
                std::mem::size_of::<MountAttr>(),
            )
        }
    })?;
    crate::check(ret)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn mount_attr_has_the_kernel_layout() {
        assert_eq!(std::mem::size_of::<MountAttr>(), 32); // MOUNT_ATTR_SIZE_VER0
        assert!(MountAttr::default().is_empty());
    }

    #[test]
    fn open_tree_without_clone_opens_a_path_fd() {
        let fd = open_tree(None, "/", OPEN_TREE_CLOEXEC).expect("open_tree /");
        let st = nix::sys::stat::fstat(fd.as_fd()).expect("fstat");
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFDIR);
    }

    #[test]
    fn open_tree_reports_a_missing_path() {
        let err = open_tree(None, "/pier-test-does-not-exist", OPEN_TREE_CLOEXEC).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
    }

    #[test]
    fn move_mount_needs_a_mount_to_move() {
        let dir = open_tree(None, "/", OPEN_TREE_CLOEXEC).expect("open_tree /");
        let not_a_mount = std::fs::File::open("/proc/self/status").expect("open");
        let err = move_mount(not_a_mount.as_fd(), dir.as_fd(), "").unwrap_err();
        assert!(
            matches!(err.raw_os_error(), Some(libc::EINVAL) | Some(libc::EPERM)),
            "{err}"
        );
    }

    #[test]
    fn mount_setattr_rejects_unknown_flags() {
        let attr = MountAttr {
            attr_set: 1 << 40,
            ..Default::default()
        };
        let err = mount_setattr(None, "/", 0, &attr).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }
}
