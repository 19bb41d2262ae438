//! Spec mounts of type `cgroup` and `cgroup2`.
//!
//! Theory of operation:
//! - On a unified (cgroup2-only) host, and for type `cgroup2` anywhere: with a cgroup namespace
//!   a new `cgroup2` mount (its root is the namespace's root, the container's cgroup); without
//!   one, an rbind of the container's own cgroup directory from the host's cgroup2 mount, so
//!   the container never sees the host's tree.
//! - Type `cgroup` on a v1 or hybrid host (runc's layout): a tmpfs at the destination, then one
//!   directory per hierarchy the container's init belongs to (`/proc/self/cgroup`), named as
//!   the host names it (its mount point's last component, from mountinfo: `cpu,cpuacct`,
//!   `systemd`, `unified` ...). Each gets a new mount of that hierarchy with a cgroup namespace,
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

/// One hierarchy of the host, found in mountinfo.
struct Hierarchy {
    /// Directory name under the destination (last component of the host mount point).
    name: String,
    /// Where the container's cgroup of this hierarchy is on the host.
    source: PathBuf,
    /// `cgroup` or `cgroup2`.
    fstype: &'static str,
    /// Data for a new mount of the hierarchy (`cpu,cpuacct`, `none,name=systemd`).
    data: String,
}

/// The hierarchies the init belongs to, matched with the host's mounts of them.
fn hierarchies(proc_cgroup: &str, mountinfo: &str) -> Vec<Hierarchy> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let Some((controllers, path)) = line.split_once(':').and_then(|(_, r)| r.split_once(':'))
        else {
            continue;
        };
        let found = mountinfo::entries(mountinfo).find(|e| {
            if controllers.is_empty() {
                e.fstype == "cgroup2"
            } else {
                e.fstype == "cgroup"
                    && controllers
                        .split(',')
                        .all(|c| e.super_options.split(',').any(|o| o == c))
            }
        });
        let Some(e) = found else { continue };
        let Some(name) = e.mount_point.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let rel = path
            .strip_prefix(e.root)
            .unwrap_or(path)
            .trim_start_matches('/');
        let (fstype, data) = match controllers {
            "" => ("cgroup2", String::new()),
            c if c.starts_with("name=") => ("cgroup", format!("none,{c}")),
            c => ("cgroup", c.to_string()),
        };
        out.push(Hierarchy {
            name: name.to_string(),
            source: e.mount_point.join(rel),
            fstype,
            data,
        });
    }
    out
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
    let info = mountinfo::read().map_err(|e| at.err("reading /proc/self/mountinfo", e))?;
    for h in hierarchies(&text, &info) {
        hierarchy(ctx, at, top.as_fd(), &h, opts)?;
    }
    // One call gives the tmpfs and every hierarchy the mount's options (`ro`, `nosuid`, ...).
    if !opts.attrs.is_empty() {
        let attr = MountAttr {
            attr_set: opts.attrs.set,
            attr_clr: opts.attrs.clr,
            ..Default::default()
        };
        sysmount::mount_setattr(Some(top.as_fd()), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr)
            .map_err(|e| at.err("setting the mount options on the hierarchies", e))?;
    }
    mounts::propagate(ctx, at, top.as_fd(), opts.propagation)
}

fn hierarchy(
    ctx: &Ctx,
    at: At,
    top: BorrowedFd,
    h: &Hierarchy,
    opts: &MountOptions,
) -> Result<(), RootfsError> {
    let step_err = |step, e: Errno| at.err(step, e);
    match mkdirat(top, h.name.as_str(), Mode::from_bits_truncate(0o755)) {
        Ok(()) | Err(Errno::EEXIST) => {}
        Err(e) => return Err(step_err("creating a hierarchy directory", e)),
    }
    if ctx.ns.cgroup {
        let oflags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let sub = openat(top, h.name.as_str(), oflags, Mode::empty())
            .map_err(|e| step_err("opening a hierarchy directory", e))?;
        let (cgroup, flags) = (Path::new("cgroup"), opts.fs_flags());
        mounts::mount_on(sub.as_fd(), cgroup, h.fstype, flags, &h.data)
            .map_err(|e| step_err("mounting a hierarchy", e))?;
    } else {
        // The directory was just made in our own new tmpfs: its name cannot be a symlink.
        let flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
        let tree = sysmount::open_tree(None, &h.source, flags)
            .map_err(|e| at.err("cloning a hierarchy", e))?;
        sysmount::move_mount(tree.as_fd(), top, h.name.as_str())
            .map_err(|e| at.err("attaching a hierarchy", e))?;
    }
    if h.name.contains(',') {
        for c in h.name.split(',') {
            match symlinkat(h.name.as_str(), top, c) {
                Ok(()) | Err(Errno::EEXIST) => {}
                Err(e) => return Err(step_err("linking a co-mounted controller", e)),
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC: &str = "12:cpu,cpuacct:/pier/c1\n1:name=systemd:/pier/c1\n0::/pier/c1\n3:rdma:/\n";
    const INFO: &str = "\
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd\n\
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    #[test]
    fn hierarchies_follow_the_hosts_names_and_the_inits_paths() {
        let h = hierarchies(PROC, INFO);
        let got: Vec<_> = h
            .iter()
            .map(|h| (h.name.as_str(), h.source.clone(), h.fstype, h.data.as_str()))
            .collect();
        assert_eq!(
            got,
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
            ]
        );
    }

    #[test]
    fn own_path_of_the_unified_hierarchy() {
        assert_eq!(own_path(PROC, ""), Some("/pier/c1"));
        assert_eq!(own_path(PROC, "memory"), None);
    }
}
