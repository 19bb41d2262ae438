//! Device nodes and the `/dev` symlinks.
//!
//! Theory of operation (runc's behaviour): when the spec's `/dev` is not a bind of the host's,
//! the default nodes (null, zero, full, random, urandom, tty) and the `linux.devices` are made
//! with `mknodat` under the umask 0, and owned as the spec says; a spec entry with the path of
//! a default replaces it. In a user namespace `mknod` is not allowed, so an empty file is
//! created and the host's node of the same path is bind-mounted onto it. Then the symlinks
//! `/dev/fd`, `/dev/std{in,out,err}` (into `/proc/self/fd`), `/dev/ptmx -> pts/ptmx`, and the
//! `/dev/pts` and `/dev/shm` directories when no spec mount provides them. Paths are resolved
//! inside the root (see [`super::paths`]).
//!
//! Privileges: CAP_MKNOD outside a user namespace; CAP_SYS_ADMIN in it for the binds.
//! Tests: `tests/priv_rootfs.rs`.
use super::mounts::Ctx;
use super::paths::{self, Kind, ProcFd};
use super::RootfsError;
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sys::stat::{makedev, mkdirat, mknodat, umask, Mode, SFlag};
use nix::unistd::{fchownat, symlinkat, unlinkat, FchownatFlags, Gid, Uid, UnlinkatFlags};
use oci_spec::runtime::{LinuxDevice, LinuxDeviceType, Spec};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

/// A node to create: its path in the container, kind, numbers, mode and owner.
#[derive(Debug, Clone, Copy)]
struct Node<'a> {
    path: &'a Path,
    kind: SFlag,
    dev: libc::dev_t,
    mode: u32,
    owner: Option<(u32, u32)>,
}

const DEFAULTS: [(&str, u64, u64); 6] = [
    ("/dev/null", 1, 3),
    ("/dev/zero", 1, 5),
    ("/dev/full", 1, 7),
    ("/dev/random", 1, 8),
    ("/dev/urandom", 1, 9),
    ("/dev/tty", 5, 0),
];

const LINKS: [(&str, &str); 5] = [
    ("/proc/self/fd", "fd"),
    ("/proc/self/fd/0", "stdin"),
    ("/proc/self/fd/1", "stdout"),
    ("/proc/self/fd/2", "stderr"),
    ("pts/ptmx", "ptmx"),
];

fn dev_err(path: &Path, step: &'static str, e: Errno) -> RootfsError {
    RootfsError::Device {
        path: path.to_path_buf(),
        step,
        source: e.into(),
    }
}

/// Creates the devices and `/dev` entries (nothing when `/dev` is a bind of the host's).
pub(crate) fn create(ctx: &Ctx, spec: &Spec) -> Result<(), RootfsError> {
    let mounts = spec.mounts().as_deref().unwrap_or_default();
    let dev_mount = mounts
        .iter()
        .rev()
        .find(|m| m.destination() == Path::new("/dev"));
    let is_bind = |o: &String| o == "bind" || o == "rbind";
    if dev_mount.is_some_and(|m| m.options().iter().flatten().any(is_bind)) {
        return Ok(());
    }
    let dev_path = Path::new("/dev");
    let dev = paths::ensure(ctx.root.as_fd(), dev_path, Kind::Dir)
        .map_err(|e| dev_err(dev_path, "resolving it in the root", e))?;
    let spec_devices = spec
        .linux()
        .as_ref()
        .and_then(|l| l.devices().as_deref())
        .unwrap_or_default();
    let old_umask = umask(Mode::empty());
    let result = create_nodes(ctx, dev.as_fd(), spec_devices)
        .and_then(|()| create_links(dev.as_fd(), mounts));
    umask(old_umask);
    result
}

fn create_nodes(
    ctx: &Ctx,
    dev: BorrowedFd,
    spec_devices: &[LinuxDevice],
) -> Result<(), RootfsError> {
    for (path, major, minor) in DEFAULTS {
        let path = Path::new(path);
        if spec_devices.iter().any(|d| d.path() == path) {
            continue;
        }
        let dev_t = makedev(major, minor);
        node(
            ctx,
            dev,
            Node {
                path,
                kind: SFlag::S_IFCHR,
                dev: dev_t,
                mode: 0o666,
                owner: None,
            },
        )?;
    }
    for d in spec_devices {
        let kind = match d.typ() {
            LinuxDeviceType::C | LinuxDeviceType::U => SFlag::S_IFCHR,
            LinuxDeviceType::B => SFlag::S_IFBLK,
            LinuxDeviceType::P => SFlag::S_IFIFO,
            LinuxDeviceType::A => {
                return Err(dev_err(
                    d.path(),
                    "type \"a\" is not a node type",
                    Errno::EINVAL,
                ))
            }
        };
        let dev_t = makedev(d.major() as u64, d.minor() as u64);
        let mode = d.file_mode().unwrap_or(0o666) & 0o7777;
        let owner = (d.uid().is_some() || d.gid().is_some())
            .then(|| (d.uid().unwrap_or(0), d.gid().unwrap_or(0)));
        node(
            ctx,
            dev,
            Node {
                path: d.path(),
                kind,
                dev: dev_t,
                mode,
                owner,
            },
        )?;
    }
    Ok(())
}

/// Makes one node; `dev` is the container's `/dev`, the parent of most nodes.
fn node(ctx: &Ctx, dev: BorrowedFd, n: Node) -> Result<(), RootfsError> {
    let parent = n.path.parent().unwrap_or(Path::new("/"));
    let Some(name) = n.path.file_name() else {
        return Err(dev_err(n.path, "the path has no file name", Errno::EINVAL));
    };
    let other_dir;
    let dir = if parent == Path::new("/dev") {
        dev
    } else {
        other_dir = paths::ensure(ctx.root.as_fd(), parent, Kind::Dir)
            .map_err(|e| dev_err(n.path, "resolving its directory in the root", e))?;
        other_dir.as_fd()
    };
    if ctx.ns.user && n.kind != SFlag::S_IFIFO {
        return bind_host_node(dir, name, n.path);
    }
    match mknodat(dir, name, n.kind, Mode::from_bits_truncate(n.mode), n.dev) {
        Ok(()) => {}
        Err(Errno::EEXIST) => return Ok(()),
        Err(Errno::EPERM) => return bind_host_node(dir, name, n.path),
        Err(e) => return Err(dev_err(n.path, "mknod", e)),
    }
    if let Some((uid, gid)) = n.owner {
        let (uid, gid) = (Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)));
        fchownat(dir, name, uid, gid, FchownatFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| dev_err(n.path, "chown", e))?;
    }
    Ok(())
}

/// Bind-mounts the host's node at `path` onto an empty file `name` in `dir`.
fn bind_host_node(dir: BorrowedFd, name: &OsStr, path: &Path) -> Result<(), RootfsError> {
    let flags = OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_RDONLY | OFlag::O_CLOEXEC;
    let target = openat(dir, name, flags, Mode::from_bits_truncate(0o644))
        .map_err(|e| dev_err(path, "creating the bind target", e))?;
    let target = ProcFd::new(target.as_fd());
    mount(
        Some(path),
        target.as_cstr(),
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(|e| dev_err(path, "bind-mounting the host's node", e))
}

fn create_links(dev: BorrowedFd, mounts: &[oci_spec::runtime::Mount]) -> Result<(), RootfsError> {
    let dev_path = Path::new("/dev");
    for (target, name) in LINKS {
        link(dev, target, name)?;
    }
    for (name, mode) in [("pts", 0o755), ("shm", 0o1777)] {
        let path = dev_path.join(name);
        if mounts.iter().any(|m| m.destination() == &path) {
            continue;
        }
        match mkdirat(dev, name, Mode::from_bits_truncate(mode)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(dev_err(&path, "mkdir", e)),
        }
    }
    Ok(())
}

/// `/dev/<name> -> target`; an existing `ptmx` node is replaced, other existing entries kept.
fn link(dev: BorrowedFd, target: &str, name: &str) -> Result<(), RootfsError> {
    let err = |step, e| dev_err(&Path::new("/dev").join(name), step, e);
    match symlinkat(target, dev, name) {
        Ok(()) => Ok(()),
        Err(Errno::EEXIST) if name == "ptmx" => {
            unlinkat(dev, name, UnlinkatFlags::NoRemoveDir)
                .map_err(|e| err("removing the old node", e))?;
            symlinkat(target, dev, name).map_err(|e| err("symlink", e))
        }
        Err(Errno::EEXIST) => Ok(()),
        Err(e) => Err(err("symlink", e)),
    }
}
