//! Spec mounts of type `cgroup` and `cgroup2`.
//!
//! Theory of operation:
//! - On a unified (cgroup2-only) host, and for type `cgroup2` anywhere: with a cgroup namespace
//!   a new `cgroup2` mount (its root is the namespace's root, the container's cgroup); without
//!   one, an rbind of the container's own cgroup directory from the host's cgroup2 mount, so
//!   the container never sees the host's tree.
//! - Type `cgroup` on a v1 or hybrid host (runc's layout): a tmpfs at the destination, then one
//!   directory per hierarchy the container's init belongs to (`/proc/self/cgroup`), named as
//!   the host names it (its mount point's last component: `cpu,cpuacct`, `systemd`, `unified`
//!   ...). Hosts mount them at `/sys/fs/cgroup/<controllers>`; only when one is not there is
//!   mountinfo read to find it. Each gets a new mount of that hierarchy with a cgroup namespace,
//!   or a bind of the container's cgroup directory without one; co-mounted controllers get
//!   symlinks (`cpu -> cpu,cpuacct`). The mount's options (`ro`, `nosuid`...) are applied at the
//!   end to the tmpfs and all hierarchies at once (`mount_setattr(AT_RECURSIVE)`).
//!
//! Privileges: CAP_SYS_ADMIN in the container's user namespace. Tests: `tests/priv_rootfs.rs`.
use super::mounts::{self, At, Ctx};
use super::options::MountOptions;
use super::paths::{self, Kind};
use super::{mountinfo, RootfsError};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::mount::MsFlags;
use nix::sys::stat::{mkdirat, Mode};
use nix::unistd::symlinkat;
use pier_sys::mount::{
    self as sysmount, MountAttr, AT_EMPTY_PATH, AT_RECURSIVE, OPEN_TREE_CLOEXEC, OPEN_TREE_CLONE,
};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

/// Mounts spec mount `at` of type `fstype` (`cgroup` or `cgroup2`).
pub(super) fn mount(
    ctx: &Ctx,
    at: At,
    fstype: &str,
    opts: &MountOptions,
) -> Result<(), RootfsError> {
    let unified = nix::sys::statfs::statfs("/sys/fs/cgroup")
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
    if unified || fstype == "cgroup2" {
        let host = if unified {
            "/sys/fs/cgroup"
        } else {
            "/sys/fs/cgroup/unified"
        };
        return v2(ctx, at, opts, Path::new(host));
    }
    v1(ctx, at, opts)
}

/// The container's cgroup path in the hierarchy with these `controllers` (empty: cgroup2).
fn own_path<'a>(proc_cgroup: &'a str, controllers: &str) -> Option<&'a str> {
    proc_cgroup.lines().find_map(|l| {
        let (_, rest) = l.split_once(':')?;
        let (c, path) = rest.split_once(':')?;
        (c == controllers).then_some(path)
    })
}

fn read_proc_cgroup(at: At) -> Result<String, RootfsError> {
    std::fs::read_to_string("/proc/self/cgroup").map_err(|e| at.err("reading /proc/self/cgroup", e))
}

fn v2(ctx: &Ctx, at: At, opts: &MountOptions, host: &Path) -> Result<(), RootfsError> {
    let dest = mounts::destination(ctx, at, || Kind::Dir)?;
    if ctx.ns.cgroup {
        mounts::mount_on(
            dest.as_fd(),
            Path::new("cgroup2"),
            "cgroup2",
            opts.fs_flags(),
            &opts.data,
        )
        .map_err(|e| at.err("mounting", e))?;
        let top = paths::open_in_root(ctx.root.as_fd(), at.m.destination())
            .map_err(|e| at.err("opening the new mount", e))?;
        return mounts::propagate(ctx, at, top.as_fd(), opts.propagation);
    }
    let text = read_proc_cgroup(at)?;
    let own = own_path(&text, "").unwrap_or("/");
    let tree = mounts::clone_tree(at, &host.join(own.trim_start_matches('/')), true, opts)?;
    mounts::attach(ctx, at, &tree, &dest, opts)
}

/// One hierarchy the init belongs to, and where the host has it mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hierarchy {
    /// The controllers field of `/proc/self/cgroup` (`cpu,cpuacct`, `name=systemd`, empty).
    controllers: String,
    /// Directory name under the destination (last component of the host mount point).
    name: String,
    /// The host's mount point of the hierarchy.
    mount_point: PathBuf,
    /// Where the container's cgroup of this hierarchy is on the host.
    source: PathBuf,
    /// `cgroup` or `cgroup2`.
    fstype: &'static str,
    /// Data for a new mount of the hierarchy (`cpu,cpuacct`, `none,name=systemd`).
    data: String,
}

/// Splits a `/proc/self/cgroup` line into (controllers, path).
fn split_line(line: &str) -> Option<(&str, &str)> {
    line.split_once(':').and_then(|(_, r)| r.split_once(':'))
}

fn hierarchy(controllers: &str, path: &str, mount_point: PathBuf, root: &str) -> Hierarchy {
    let rel = path
        .strip_prefix(root)
        .unwrap_or(path)
        .trim_start_matches('/');
    let (fstype, data) = match controllers {
        "" => ("cgroup2", String::new()),
        c if c.starts_with("name=") => ("cgroup", format!("none,{c}")),
        c => ("cgroup", c.to_string()),
    };
    let name = mount_point
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_string();
    Hierarchy {
        controllers: controllers.to_string(),
        name,
        source: mount_point.join(rel),
        mount_point,
        fstype,
        data,
    }
}

/// The hierarchies where hosts mount them: `/sys/fs/cgroup/<controllers>` (a named one at its
/// name), and cgroup2 at `/sys/fs/cgroup/unified` on a hybrid host. No mountinfo needed.
fn by_convention(proc_cgroup: &str, hybrid: bool) -> Vec<Hierarchy> {
    let base = Path::new("/sys/fs/cgroup");
    let lines = proc_cgroup.lines().filter_map(split_line);
    lines
        .filter(|(c, _)| hybrid || !c.is_empty())
        .map(|(c, path)| {
            let dir = if c.is_empty() {
                "unified"
            } else {
                c.strip_prefix("name=").unwrap_or(c)
            };
            hierarchy(c, path, base.join(dir), "/")
        })
        .collect()
}

/// The hierarchies with these `controllers`, found in mountinfo (for hosts that mount them
/// elsewhere).
fn from_mountinfo(proc_cgroup: &str, mountinfo: &str, controllers: &[String]) -> Vec<Hierarchy> {
    let lines = proc_cgroup.lines().filter_map(split_line);
    let wanted = lines.filter(|(c, _)| controllers.iter().any(|w| w == c));
    let found = wanted.filter_map(|(c, path)| {
        let e = mountinfo::entries(mountinfo).find(|e| {
            if c.is_empty() {
                e.fstype == "cgroup2"
            } else {
                e.fstype == "cgroup"
                    && c.split(',')
                        .all(|c| e.super_options.split(',').any(|o| o == c))
            }
        })?;
        Some(hierarchy(c, path, e.mount_point, e.root))
    });
    found.collect()
}

fn v1(ctx: &Ctx, at: At, opts: &MountOptions) -> Result<(), RootfsError> {
    let dest = mounts::destination(ctx, at, || Kind::Dir)?;
    let tmpfs_flags = opts.fs_flags() - MsFlags::MS_RDONLY;
    mounts::mount_on(
        dest.as_fd(),
        Path::new("tmpfs"),
        "tmpfs",
        tmpfs_flags,
        "mode=755",
    )
    .map_err(|e| at.err("mounting the tmpfs for the hierarchies", e))?;
    let top = paths::open_in_root(ctx.root.as_fd(), at.m.destination())
        .map_err(|e| at.err("opening the new mount", e))?;
    let text = read_proc_cgroup(at)?;
    let hybrid = nix::sys::statfs::statfs("/sys/fs/cgroup/unified")
        .is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
    let missing = attach_all(ctx, at, top.as_fd(), &by_convention(&text, hybrid), opts)?;
    if !missing.is_empty() {
        let info = mountinfo::read().map_err(|e| at.err("reading /proc/self/mountinfo", e))?;
        attach_all(
            ctx,
            at,
            top.as_fd(),
            &from_mountinfo(&text, &info, &missing),
            opts,
        )?;
    }
    // One call gives the tmpfs and every hierarchy the mount's options (`ro`, `nosuid`, ...).
    if !opts.attrs.is_empty() {
        let (attr_set, attr_clr) = (opts.attrs.set, opts.attrs.clr);
        let attr = MountAttr {
            attr_set,
            attr_clr,
            ..Default::default()
        };
        sysmount::mount_setattr(Some(top.as_fd()), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr)
            .map_err(|e| at.err("setting the mount options on the hierarchies", e))?;
    }
    mounts::propagate(ctx, at, top.as_fd(), opts.propagation)
}

/// Attaches each hierarchy under `top`; returns the controllers of those the host does not
/// have where `list` says.
fn attach_all(
    ctx: &Ctx,
    at: At,
    top: BorrowedFd,
    list: &[Hierarchy],
    opts: &MountOptions,
) -> Result<Vec<String>, RootfsError> {
    let mut missing = Vec::new();
    for h in list {
        match attach(ctx.ns.cgroup, top, h, opts) {
            Ok(()) => {}
            Err((_, Errno::ENOENT)) => missing.push(h.controllers.clone()),
            Err((step, e)) => return Err(at.err(step, e)),
        }
    }
    Ok(missing)
}

/// One hierarchy: a new mount of it (with a cgroup namespace) or a bind of the container's
/// cgroup in it, on `top/<name>`; symlinks for co-mounted controllers. ENOENT: not on the host.
fn attach(
    cgroupns: bool,
    top: BorrowedFd,
    h: &Hierarchy,
    opts: &MountOptions,
) -> Result<(), (&'static str, Errno)> {
    let name = h.name.as_str();
    if cgroupns {
        nix::unistd::access(&h.mount_point, nix::unistd::AccessFlags::F_OK)
            .map_err(|e| ("finding a hierarchy", e))?;
        mkdir(top, name)?;
        let oflags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let sub = openat(top, name, oflags, Mode::empty())
            .map_err(|e| ("opening a hierarchy directory", e))?;
        let (cgroup, flags) = (Path::new("cgroup"), opts.fs_flags());
        mounts::mount_on(sub.as_fd(), cgroup, h.fstype, flags, &h.data)
            .map_err(|e| ("mounting a hierarchy", e))?;
    } else {
        let flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
        let tree = sysmount::open_tree(None, &h.source, flags).map_err(|e| {
            (
                "cloning a hierarchy",
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })?;
        mkdir(top, name)?;
        // The directory was just made in our own new tmpfs: its name cannot be a symlink.
        sysmount::move_mount(tree.as_fd(), top, name).map_err(|e| {
            (
                "attaching a hierarchy",
                Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            )
        })?;
    }
    for c in h.name.split(',').filter(|_| h.name.contains(',')) {
        match symlinkat(name, top, c) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(("linking a co-mounted controller", e)),
        }
    }
    Ok(())
}

fn mkdir(top: BorrowedFd, name: &str) -> Result<(), (&'static str, Errno)> {
    match mkdirat(top, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => Ok(()),
        Err(e) => Err(("creating a hierarchy directory", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC: &str = "12:cpu,cpuacct:/pier/c1\n1:name=systemd:/pier/c1\n0::/pier/c1\n3:rdma:/\n";
    const INFO: &str = "\
32 31 0:29 / /cg/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
40 31 0:37 /pier /cg/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n\
41 31 0:38 / /cg/unified rw,relatime - cgroup2 cgroup2 rw\n";

    fn summary(h: &[Hierarchy]) -> Vec<(&str, PathBuf, &str, &str)> {
        h.iter()
            .map(|h| (h.name.as_str(), h.source.clone(), h.fstype, h.data.as_str()))
            .collect()
    }

    #[test]
    fn hierarchies_by_convention() {
        let h = by_convention(PROC, true);
        assert_eq!(
            summary(&h),
            vec![
                (
                    "cpu,cpuacct",
                    PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/pier/c1"),
                    "cgroup",
                    "cpu,cpuacct"
                ),
                (
                    "systemd",
                    PathBuf::from("/sys/fs/cgroup/systemd/pier/c1"),
                    "cgroup",
                    "none,name=systemd"
                ),
                (
                    "unified",
                    PathBuf::from("/sys/fs/cgroup/unified/pier/c1"),
                    "cgroup2",
                    ""
                ),
                (
                    "rdma",
                    PathBuf::from("/sys/fs/cgroup/rdma"),
                    "cgroup",
                    "rdma"
                ),
            ]
        );
        assert_eq!(
            by_convention(PROC, false).len(),
            3,
            "no unified line on a v1 host"
        );
    }

    #[test]
    fn hierarchies_from_mountinfo_follow_the_hosts_mount_points() {
        let wanted = [
            "cpu,cpuacct".to_string(),
            "name=systemd".to_string(),
            String::new(),
            "rdma".into(),
        ];
        let h = from_mountinfo(PROC, INFO, &wanted);
        assert_eq!(
            summary(&h),
            vec![
                (
                    "cpu,cpuacct",
                    PathBuf::from("/cg/cpu,cpuacct/pier/c1"),
                    "cgroup",
                    "cpu,cpuacct"
                ),
                (
                    "systemd",
                    PathBuf::from("/cg/systemd/c1"),
                    "cgroup",
                    "none,name=systemd"
                ),
                (
                    "unified",
                    PathBuf::from("/cg/unified/pier/c1"),
                    "cgroup2",
                    ""
                ),
            ]
        );
    }

    #[test]
    fn own_path_of_the_unified_hierarchy() {
        assert_eq!(own_path(PROC, ""), Some("/pier/c1"));
        assert_eq!(own_path(PROC, "memory"), None);
    }
}
