//! The spec's `mounts`, in order, relative to the container's root.
//!
//! Theory of operation, per mount:
//! - bind/rbind: `open_tree(OPEN_TREE_CLONE[, AT_RECURSIVE])` of the source (a missing source
//!   fails here, before anything is created), `mount_setattr` of the per-mount options on the
//!   detached clone and of the recursive ones (`rro`, ...) with `AT_RECURSIVE`, then the
//!   destination is resolved (created as a file or directory like the source) and the clone is
//!   attached with `move_mount`. A detached clone is in no peer group, so a bind that asks for
//!   `slave`/`shared` propagation (relative to its source) is made with `mount(MS_BIND)`
//!   instead and gets its options right after;
//! - any other type: `mount(2)` onto `/proc/self/fd/N` of the resolved destination with the
//!   options as `MS_*` flags and data. Fallbacks as runc has them: sysfs and mqueue in a user
//!   namespace the kernel will not mount them in become rbinds of the host's `/sys` and
//!   `/dev/mqueue`; devpts without a mapped `gid=` is retried without it;
//! - `tmpcopyup` on a tmpfs: the directory it covers is copied in ([`super::copyup`]);
//! - cgroup and cgroup2: see [`super::cgroup`];
//! - propagation (and recursive attributes of a new filesystem) last, on the attached mount.
//!   A `private`/`rprivate` request under a root that is already recursively private is a no-op
//!   and is skipped.
//!
//! Privileges: CAP_SYS_ADMIN in the container's user namespace. Tests: `tests/priv_rootfs.rs`.
use super::options::{MountOptions, Propagation};
use super::paths::{self, Kind, ProcFd};
use super::{cgroup, copyup, Namespaces, RootfsError};
use nix::errno::Errno;
use nix::mount::{mount, MsFlags};
use oci_spec::runtime::{Mount, Spec};
use pier_sys::mount::{
    self as sysmount, MountAttr, AT_EMPTY_PATH, AT_RECURSIVE, MOUNT_ATTR_RDONLY, OPEN_TREE_CLOEXEC,
    OPEN_TREE_CLONE,
};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

/// What every mount step needs to know about the container.
#[derive(Debug)]
pub(crate) struct Ctx<'a> {
    /// `O_PATH` fd of the root (the bind of the rootfs onto itself).
    pub root: &'a OwnedFd,
    pub ns: Namespaces,
    /// `/` was made recursively private (no rootfsPropagation given).
    pub private_root: bool,
    /// The bundle directory, when it can be told from `root.path`: relative bind sources are
    /// relative to it. None: they resolve against the cwd.
    pub bundle: Option<&'a Path>,
}

/// One spec mount and its index, for error values.
#[derive(Debug, Clone, Copy)]
pub(crate) struct At<'a> {
    pub index: usize,
    pub m: &'a Mount,
}

impl At<'_> {
    pub fn err(&self, step: &'static str, e: impl Into<io::Error>) -> RootfsError {
        RootfsError::Mount {
            index: self.index,
            source: self.m.source().clone().unwrap_or_default(),
            destination: self.m.destination().clone(),
            fstype: self.m.typ().clone().unwrap_or_else(|| "none".into()),
            step,
            source_err: e.into(),
        }
    }
}

/// Performs every mount of `spec.mounts()` in order.
pub(crate) fn mount_all(ctx: &Ctx, spec: &Spec) -> Result<(), RootfsError> {
    for (index, m) in spec.mounts().iter().flatten().enumerate() {
        mount_one(ctx, At { index, m })?;
    }
    Ok(())
}

fn mount_one(ctx: &Ctx, at: At) -> Result<(), RootfsError> {
    let opts = MountOptions::parse(at.m.options().as_deref().unwrap_or_default());
    if let Some(o) = &opts.unsupported {
        let e = io::Error::new(io::ErrorKind::Unsupported, format!("option {o:?}"));
        return Err(at.err("unsupported option", e));
    }
    if at.m.uid_mappings().is_some() || at.m.gid_mappings().is_some() {
        let e = io::Error::new(io::ErrorKind::Unsupported, "uidMappings/gidMappings");
        return Err(at.err("idmapped mounts are not supported", e));
    }
    let fstype = at.m.typ().as_deref().unwrap_or("none");
    if opts.bind || fstype == "bind" {
        let src = at.m.source().as_deref().unwrap_or(Path::new(""));
        let joined;
        let src = match ctx.bundle {
            Some(bundle) if src.is_relative() => {
                joined = bundle.join(src);
                joined.as_path()
            }
            _ => src,
        };
        if opts
            .propagation
            .is_some_and(|p| p.kind == MsFlags::MS_SHARED || p.kind == MsFlags::MS_SLAVE)
        {
            return bind_in_peer_group(ctx, at, src, &opts);
        }
        let tree = clone_tree(at, src, opts.rbind, &opts)?;
        let dest = destination(ctx, at, || kind_of(&tree))?;
        return attach(ctx, at, &tree, &dest, &opts);
    }
    match fstype {
        "cgroup" | "cgroup2" => cgroup::mount(ctx, at, fstype, &opts),
        _ => new_fs(ctx, at, fstype, &opts),
    }
}

/// A bind made with `mount(2)`, which (unlike a detached `open_tree` clone) joins the source's
/// peer group, so that `slave`/`shared` relate the bind to its source as they do in runc.
fn bind_in_peer_group(
    ctx: &Ctx,
    at: At,
    src: &Path,
    opts: &MountOptions,
) -> Result<(), RootfsError> {
    let st = nix::sys::stat::stat(src).map_err(|e| match e {
        Errno::ENOENT => at.err("source does not exist", e),
        _ => at.err("inspecting the source", e),
    })?;
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let dest = destination(ctx, at, || if is_dir { Kind::Dir } else { Kind::File })?;
    let mut flags = MsFlags::MS_BIND;
    if opts.rbind {
        flags |= MsFlags::MS_REC;
    }
    let target = ProcFd::new(dest.as_fd());
    mount(
        Some(src),
        target.as_cstr(),
        None::<&str>,
        flags,
        None::<&str>,
    )
    .map_err(|e| at.err("bind-mounting", e))?;
    let top = paths::open_in_root(ctx.root.as_fd(), at.m.destination())
        .map_err(|e| at.err("opening the new mount", e))?;
    if !opts.attrs.is_empty() {
        let attr = MountAttr {
            attr_set: opts.attrs.set,
            attr_clr: opts.attrs.clr,
            ..Default::default()
        };
        sysmount::mount_setattr(Some(top.as_fd()), "", AT_EMPTY_PATH, &attr)
            .map_err(|e| at.err("setting the mount options", e))?;
    }
    set_recursive_attrs(at, top.as_fd(), opts)?;
    propagate(ctx, at, top.as_fd(), opts.propagation)
}

/// Opens the destination in the root, creating it as `kind()` if it is missing.
pub(crate) fn destination(
    ctx: &Ctx,
    at: At,
    kind: impl FnOnce() -> Kind,
) -> Result<OwnedFd, RootfsError> {
    let dest = at.m.destination();
    match paths::open_in_root(ctx.root.as_fd(), dest) {
        Err(Errno::ENOENT) => paths::create(ctx.root.as_fd(), dest, kind()),
        other => other,
    }
    .map_err(|e| at.err("resolving the destination in the root", e))
}

fn kind_of(fd: &OwnedFd) -> Kind {
    match nix::sys::stat::fstat(fd) {
        Ok(st) if st.st_mode & libc::S_IFMT != libc::S_IFDIR => Kind::File,
        _ => Kind::Dir,
    }
}

/// A detached clone of `src` with the per-mount and recursive attributes of `opts` applied.
pub(crate) fn clone_tree(
    at: At,
    src: &Path,
    recursive: bool,
    opts: &MountOptions,
) -> Result<OwnedFd, RootfsError> {
    let mut flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    let tree = sysmount::open_tree(None, src, flags).map_err(|e| {
        let step = match e.raw_os_error() {
            Some(libc::ENOENT) => "source does not exist",
            _ => "cloning the source",
        };
        at.err(step, e)
    })?;
    if !opts.attrs.is_empty() {
        let attr = MountAttr {
            attr_set: opts.attrs.set,
            attr_clr: opts.attrs.clr,
            ..Default::default()
        };
        sysmount::mount_setattr(Some(tree.as_fd()), "", AT_EMPTY_PATH, &attr)
            .map_err(|e| at.err("setting the mount options", e))?;
    }
    set_recursive_attrs(at, tree.as_fd(), opts)?;
    Ok(tree)
}

fn set_recursive_attrs(at: At, fd: BorrowedFd, opts: &MountOptions) -> Result<(), RootfsError> {
    if opts.rec_attrs.is_empty() {
        return Ok(());
    }
    let r = opts.rec_attrs;
    let attr = MountAttr {
        attr_set: r.set,
        attr_clr: r.clr,
        ..Default::default()
    };
    sysmount::mount_setattr(Some(fd), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr)
        .map_err(|e| at.err("setting the recursive mount options", e))
}

/// Attaches a detached `tree` onto `dest` and sets the propagation of `opts`.
pub(crate) fn attach(
    ctx: &Ctx,
    at: At,
    tree: &OwnedFd,
    dest: &OwnedFd,
    opts: &MountOptions,
) -> Result<(), RootfsError> {
    sysmount::move_mount(tree.as_fd(), dest.as_fd(), "")
        .map_err(|e| at.err("attaching the bind", e))?;
    propagate(ctx, at, tree.as_fd(), opts.propagation)
}

/// Sets `prop` on the attached mount `fd` (unless it is a no-op, see the file header).
pub(crate) fn propagate(
    ctx: &Ctx,
    at: At,
    fd: BorrowedFd,
    prop: Option<Propagation>,
) -> Result<(), RootfsError> {
    let Some(p) = prop else { return Ok(()) };
    if p.kind == MsFlags::MS_PRIVATE && ctx.private_root {
        return Ok(());
    }
    let flags = if p.recursive {
        AT_EMPTY_PATH | AT_RECURSIVE
    } else {
        AT_EMPTY_PATH
    };
    let attr = MountAttr {
        propagation: p.kind.bits(),
        ..Default::default()
    };
    sysmount::mount_setattr(Some(fd), "", flags, &attr)
        .map_err(|e| at.err("setting propagation", e))
}

/// `mount(2)` of a new filesystem onto the fd `dest`.
pub(crate) fn mount_on(
    dest: BorrowedFd,
    source: &Path,
    fstype: &str,
    flags: MsFlags,
    data: &str,
) -> Result<(), Errno> {
    let target = ProcFd::new(dest);
    let data = (!data.is_empty()).then_some(data);
    mount(Some(source), target.as_cstr(), Some(fstype), flags, data)
}

/// A user namespace without its own network (ipc) namespace may not mount sysfs (mqueue): bind
/// the host's, with its submounts; a read-only request covers those too.
fn bind_hosts(
    ctx: &Ctx,
    at: At,
    fstype: &str,
    opts: &MountOptions,
    dest: &OwnedFd,
) -> Result<(), RootfsError> {
    let host = if fstype == "sysfs" {
        "/sys"
    } else {
        "/dev/mqueue"
    };
    let mut opts = opts.clone();
    opts.rec_attrs.set |= opts.attrs.set & MOUNT_ATTR_RDONLY;
    let tree = clone_tree(at, Path::new(host), true, &opts)?;
    attach(ctx, at, &tree, dest, &opts)
}

fn new_fs(ctx: &Ctx, at: At, fstype: &str, opts: &MountOptions) -> Result<(), RootfsError> {
    let dest = destination(ctx, at, || Kind::Dir)?;
    let src = at.m.source().as_deref().unwrap_or(Path::new(fstype));
    let copy_up = opts.copy_up && fstype == "tmpfs";
    let mut flags = opts.fs_flags();
    if copy_up {
        flags -= MsFlags::MS_RDONLY; // made read-only after the copy
    }
    match mount_on(dest.as_fd(), src, fstype, flags, &opts.data) {
        Ok(()) => {}
        Err(Errno::EPERM) if ctx.ns.user && matches!(fstype, "sysfs" | "mqueue") => {
            return bind_hosts(ctx, at, fstype, opts, &dest);
        }
        Err(Errno::EINVAL) if fstype == "devpts" && opts.data.contains("gid=") => {
            let data: Vec<&str> = opts
                .data
                .split(',')
                .filter(|o| !o.starts_with("gid="))
                .collect();
            mount_on(dest.as_fd(), src, fstype, flags, &data.join(","))
                .map_err(|e| at.err("mounting (also without gid=)", e))?;
        }
        Err(e) => return Err(at.err("mounting", e)),
    }
    let needs_prop = opts
        .propagation
        .is_some_and(|p| !(p.kind == MsFlags::MS_PRIVATE && ctx.private_root));
    if !copy_up && opts.rec_attrs.is_empty() && !needs_prop {
        return Ok(());
    }
    // `dest` is the directory under the new mount; the mount itself is on top of it.
    let top = paths::open_in_root(ctx.root.as_fd(), at.m.destination())
        .map_err(|e| at.err("opening the new mount", e))?;
    if copy_up {
        copy_up_into(at, &dest, &top, opts)?;
    }
    set_recursive_attrs(at, top.as_fd(), opts)?;
    propagate(ctx, at, top.as_fd(), opts.propagation)
}

/// `tmpcopyup`: fills the new tmpfs `top` from the directory `under` it, then makes it
/// read-only if asked.
fn copy_up_into(
    at: At,
    under: &OwnedFd,
    top: &OwnedFd,
    opts: &MountOptions,
) -> Result<(), RootfsError> {
    copyup::copy_dir(under.as_fd(), top.as_fd())
        .map_err(|e| at.err("copying the directory into the tmpfs (tmpcopyup)", e))?;
    if opts.attrs.set & MOUNT_ATTR_RDONLY == 0 {
        return Ok(());
    }
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        ..Default::default()
    };
    sysmount::mount_setattr(Some(top.as_fd()), "", AT_EMPTY_PATH, &attr)
        .map_err(|e| at.err("making the tmpfs read-only after tmpcopyup", e))
}
