//! Paths inside the container's root, resolved so that they can never leave it.
//!
//! Theory of operation: before the pivot, the image's own symlinks are still resolved against
//! the host's `/`, so a naive `join` would let an image with `etc -> /etc` make pier mount over
//! the host's `/etc`. Every destination is therefore opened with `openat2(RESOLVE_IN_ROOT)`
//! relative to an fd of the root: absolute symlinks and `..` are clamped at the root, exactly as
//! they will resolve after the pivot. The result is an `O_PATH` fd; mounts are made onto the fd
//! (`move_mount` with an empty path, or `mount(2)` on `/proc/self/fd/N`), never onto a path
//! string that could be swapped. Missing destinations are created one component at a time with
//! `mkdirat`/`openat(O_CREAT|O_NOFOLLOW)` under a parent that was itself resolved in the root.
//! A component that is a dangling symlink (an image's `/etc/resolv.conf -> /run/...`) is
//! followed: its target, taken inside the root again, is created instead (at most 40 links, as
//! the kernel allows).
//!
//! Privileges: whatever the root's permissions require. Tests: `tests/priv_rootfs.rs`
//! (the symlink escape cases) and the unit test below.
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, readlinkat, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{mkdirat, Mode};
use std::ffi::CStr;
use std::io::Write;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// What to create when a destination is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Dir,
    File,
}

/// How many times a lookup that met a concurrent mount or rename is retried.
const RACE_RETRIES: usize = 128;

/// Opens `path` (absolute or relative, both taken inside the root) as an `O_PATH` fd.
///
/// With RESOLVE_IN_ROOT the kernel answers EAGAIN when a mount or rename anywhere on the host
/// happened while it resolved a `..` (it cannot then prove the walk stayed inside); openat2(2)
/// says to retry, which this does a bounded number of times (busy hosts mount all the time).
pub(crate) fn open_in_root(root: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let path = match path.as_os_str().is_empty() {
        true => Path::new("."),
        false => path,
    };
    let mut tries = 0;
    loop {
        match openat2(root, path, how) {
            Err(Errno::EAGAIN) if tries < RACE_RETRIES => tries += 1,
            other => return other,
        }
    }
}

/// Opens `path` inside the root, creating it (and missing parents, as directories) if needed.
pub(crate) fn ensure(root: BorrowedFd<'_>, path: &Path, kind: Kind) -> Result<OwnedFd, Errno> {
    match open_in_root(root, path) {
        Err(Errno::ENOENT) => create(root, path, kind),
        other => other,
    }
}

/// Creates `path` (found missing) inside the root and opens it.
pub(crate) fn create(root: BorrowedFd<'_>, path: &Path, kind: Kind) -> Result<OwnedFd, Errno> {
    create_following(root, path, kind, 40)
}

fn create_following(
    root: BorrowedFd<'_>,
    path: &Path,
    kind: Kind,
    links_left: u32,
) -> Result<OwnedFd, Errno> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Errno::ENOENT);
    };
    let dir = ensure_following(root, parent, links_left)?;
    let made = match kind {
        Kind::Dir => mkdirat(&dir, name, Mode::from_bits_truncate(0o755)),
        Kind::File => {
            let flags = OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
            openat(&dir, name, flags, Mode::from_bits_truncate(0o644)).map(drop)
        }
    };
    match made {
        Ok(()) => open_in_root(root, path),
        Err(Errno::EEXIST | Errno::ELOOP) => match readlinkat(&dir, name) {
            // A dangling symlink: create its target, resolved inside the root again.
            Ok(target) if links_left > 0 => {
                let next = parent.join(target);
                create_following(root, &next, kind, links_left - 1)?;
                open_in_root(root, path)
            }
            Ok(_) => Err(Errno::ELOOP),
            Err(_) => open_in_root(root, path),
        },
        Err(e) => Err(e),
    }
}

fn ensure_following(root: BorrowedFd<'_>, path: &Path, links_left: u32) -> Result<OwnedFd, Errno> {
    match open_in_root(root, path) {
        Err(Errno::ENOENT) => create_following(root, path, Kind::Dir, links_left),
        other => other,
    }
}

/// `/proc/self/fd/N` for `mount(2)`, which takes paths only; built on the stack.
pub(crate) struct ProcFd {
    buf: [u8; 32],
}

impl ProcFd {
    pub fn new(fd: BorrowedFd<'_>) -> Self {
        let mut buf = [0u8; 32];
        let mut w = &mut buf[..];
        // 14 bytes of prefix + at most 10 digits + NUL fit in 32 bytes.
        let _ = write!(w, "/proc/self/fd/{}\0", fd.as_raw_fd());
        Self { buf }
    }

    pub fn as_cstr(&self) -> &CStr {
        CStr::from_bytes_until_nul(&self.buf).unwrap_or(c"/proc/self/fd")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// Renames elsewhere on the host make a `..` walk answer EAGAIN now and then; every open
    /// must still succeed.
    #[test]
    fn lookups_survive_concurrent_renames() {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        std::fs::create_dir_all(root_dir.join("a")).unwrap();
        std::fs::create_dir_all(root_dir.join("b")).unwrap();
        let busy = tmp.path().join("busy");
        std::fs::write(&busy, "").unwrap();
        let root = nix::fcntl::open(&root_dir, OFlag::O_PATH, Mode::empty()).unwrap();
        let stop = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            s.spawn(|| {
                let other = busy.with_extension("moved");
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    std::fs::rename(&busy, &other).unwrap();
                    std::fs::rename(&other, &busy).unwrap();
                }
            });
            let failed = (0..20_000)
                .filter(|_| open_in_root(root.as_fd(), Path::new("a/../b")).is_err())
                .count();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            assert_eq!(failed, 0, "lookups failed while renames ran");
        });
    }

    #[test]
    fn ensure_stays_inside_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&root_dir).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root_dir.join("abs")).unwrap();
        std::os::unix::fs::symlink("../../../outside", root_dir.join("rel")).unwrap();
        std::fs::create_dir_all(root_dir.join(outside.strip_prefix("/").unwrap())).unwrap();
        std::fs::create_dir_all(root_dir.join("outside")).unwrap();
        let root = nix::fcntl::open(&root_dir, OFlag::O_PATH, Mode::empty()).unwrap();

        ensure(root.as_fd(), Path::new("/abs/a/b"), Kind::Dir).unwrap();
        ensure(root.as_fd(), Path::new("rel/f"), Kind::File).unwrap();

        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "escaped the root"
        );
        let inside = root_dir.join(outside.strip_prefix("/").unwrap());
        assert!(inside.join("a/b").is_dir());
        assert!(root_dir.join("outside/f").is_file());
    }

    #[test]
    fn a_dangling_symlink_is_followed_inside_the_root() {
        let tmp = tempfile::tempdir().unwrap();
        let root_dir = tmp.path().join("root");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root_dir.join("etc")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, root_dir.join("abs")).unwrap();
        std::os::unix::fs::symlink("../run/x/resolv.conf", root_dir.join("etc/resolv.conf"))
            .unwrap();
        std::os::unix::fs::symlink("loop", root_dir.join("loop")).unwrap();
        let root = nix::fcntl::open(&root_dir, OFlag::O_PATH, Mode::empty()).unwrap();

        ensure(root.as_fd(), Path::new("/abs/a"), Kind::Dir).unwrap();
        ensure(root.as_fd(), Path::new("/etc/resolv.conf"), Kind::File).unwrap();
        let err = ensure(root.as_fd(), Path::new("/loop/a"), Kind::Dir).unwrap_err();

        assert_eq!(err, Errno::ELOOP);
        assert!(
            std::fs::read_dir(&outside).unwrap().next().is_none(),
            "escaped the root"
        );
        assert!(root_dir
            .join(outside.strip_prefix("/").unwrap())
            .join("a")
            .is_dir());
        assert!(root_dir.join("run/x/resolv.conf").is_file());
    }

    #[test]
    fn proc_fd_path() {
        let f = std::fs::File::open("/").unwrap();
        let p = ProcFd::new(f.as_fd());
        assert_eq!(
            p.as_cstr().to_str().unwrap(),
            format!("/proc/self/fd/{}", f.as_raw_fd())
        );
    }
}
