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
use nix::mount::{mount, umount2, MntFlags, MsFlags};
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
    /// The directory whose `etc/passwd` and `etc/group` name the root's users (`/` for `host`,
    /// the lower directory for a directory root).
    pub etc_root: PathBuf,
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

fn io_err<'a>(
    step: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> RootfsError + 'a {
    move |source| RootfsError::Io {
        step,
        path: path.to_path_buf(),
        source,
    }
}

fn nix_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(nix::Error) -> RootfsError + 'a {
    move |errno| io_err(step, path)(errno.into())
}

/// Prepares the root of the container whose directory is `container_dir`.
pub fn prepare(
    paths: &Paths,
    rootfs: &Rootfs,
    read_only: bool,
    container_dir: &Path,
) -> Result<Prepared, RootfsError> {
    match rootfs {
        Rootfs::Host => host_root(paths),
        Rootfs::Dir(lower) => {
            let root = match read_only {
                true => bind_read_only(lower, container_dir),
                false => overlay(lower, container_dir),
            };
            root.inspect_err(|_| {
                let _ = release(container_dir);
            })
            .map(|root| Prepared {
                root,
                readonly: read_only,
                mounts: Vec::new(),
                etc_root: lower.clone(),
            })
        }
    }
}

/// Unmounts the overlay of `container_dir` if mounted and removes its layers (idempotent).
pub fn release(container_dir: &Path) -> Result<(), RootfsError> {
    let root = container_dir.join(ROOT);
    // Detach until nothing is mounted there: EINVAL = not a mount point, ENOENT = no directory.
    loop {
        match umount2(&root, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            Err(nix::errno::Errno::EINVAL | nix::errno::Errno::ENOENT) => break,
            Err(e) => return Err(nix_err("unmounting the root", &root)(e)),
        }
    }
    for layer in [UPPER, WORK] {
        let dir = container_dir.join(layer);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_err("removing the layer", &dir)(e))
            }
            _ => {}
        }
    }
    // remove_dir, never remove_dir_all: if the root were still mounted this must not recurse
    // into the user's directory.
    match std::fs::remove_dir(&root) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(io_err("removing the mount point", &root)(e))
        }
        _ => Ok(()),
    }
}

/// Names inside the container directory.
const ROOT: &str = "rootfs";
const UPPER: &str = "upper";
const WORK: &str = "work";

/// overlay(lower = the directory, upper and work in the container directory) at `rootfs`.
fn overlay(lower: &Path, container_dir: &Path) -> Result<PathBuf, RootfsError> {
    let [root, upper, work] = [ROOT, UPPER, WORK].map(|d| container_dir.join(d));
    for dir in [&root, &upper, &work] {
        std::fs::create_dir_all(dir).map_err(io_err("creating the overlay directory", dir))?;
    }
    let data = format!(
        "lowerdir={},upperdir={},workdir={}",
        escape(lower),
        escape(&upper),
        escape(&work)
    );
    mount(
        Some("overlay"),
        &root,
        Some("overlay"),
        MsFlags::empty(),
        Some(data.as_str()),
    )
    .map_err(nix_err("mounting the overlay on", &root))?;
    Ok(root)
}

/// `--read-only` on a directory: the directory itself, bound read-only at `rootfs`.
fn bind_read_only(lower: &Path, container_dir: &Path) -> Result<PathBuf, RootfsError> {
    let root = container_dir.join(ROOT);
    std::fs::create_dir_all(&root).map_err(io_err("creating the mount point", &root))?;
    mount(
        Some(lower),
        &root,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .map_err(nix_err("binding the root directory at", &root))?;
    let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
    mount(None::<&str>, &root, None::<&str>, ro, None::<&str>)
        .map_err(nix_err("making the root read-only at", &root))?;
    Ok(root)
}

/// Escapes the characters overlayfs's option parser splits on.
fn escape(path: &Path) -> String {
    let mut out = String::new();
    for c in path.to_string_lossy().chars() {
        if matches!(c, '\\' | ',' | ':') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The host's directories the `host` root binds read-only when present.
const HOST_DIRS: [&str; 6] = ["usr", "etc", "var", "opt", "srv", "home"];
/// The /usr-merge names: symlinks into /usr on Debian (copied as they are), directories on
/// hosts without the merge (bound like the others).
const USR_MERGE: [&str; 6] = ["bin", "sbin", "lib", "lib32", "lib64", "libx32"];
/// Empty mount points (and homes) of the skeleton.
const EMPTY_DIRS: [&str; 7] = ["proc", "dev", "sys", "tmp", "run", "root", "mnt"];
/// Private tmpfs of every `host` container: (destination, mode).
const HOST_TMPFS: [(&str, &str); 3] = [("/tmp", "1777"), ("/run", "755"), ("/var/tmp", "1777")];

/// The `host` root: the shared skeleton and its mounts. Nothing is mounted on the host.
fn host_root(paths: &Paths) -> Result<Prepared, RootfsError> {
    let skeleton = skeleton(paths)?;
    let mut mounts = Vec::new();
    for name in HOST_DIRS.iter().chain(&USR_MERGE) {
        let in_skeleton = std::fs::symlink_metadata(skeleton.join(name));
        if in_skeleton.is_ok_and(|m| m.is_dir()) {
            let host = Path::new("/").join(name);
            mounts.push(oci_mount(&host, "bind", &host, &["bind", "ro", "nodev"]));
        }
    }
    for (dst, mode) in HOST_TMPFS {
        let mode = format!("mode={mode}");
        let opts = ["nosuid", "nodev", mode.as_str()];
        mounts.push(oci_mount(
            Path::new(dst),
            "tmpfs",
            Path::new("tmpfs"),
            &opts,
        ));
    }
    Ok(Prepared {
        root: skeleton,
        readonly: true,
        mounts,
        etc_root: PathBuf::from("/"),
    })
}

fn oci_mount(destination: &Path, typ: &str, source: &Path, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(destination.to_path_buf())
        .set_typ(Some(typ.to_string()))
        .set_source(Some(source.to_path_buf()))
        .set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

/// `<state>/hostroot`, made once: built under a unique temporary name and renamed into place,
/// so concurrent first runs never see a half-made skeleton (the loser of the rename race
/// removes its copy and uses the winner's).
fn skeleton(paths: &Paths) -> Result<PathBuf, RootfsError> {
    let dir = paths.host_root();
    if dir.is_dir() {
        return Ok(dir);
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = paths
        .state_dir
        .join(format!(".hostroot-{}-{nanos}", std::process::id()));
    let built = build_skeleton(&tmp).and_then(|()| {
        std::fs::rename(&tmp, &dir).or_else(|e| match dir.is_dir() {
            true => Ok(()),
            false => Err(io_err("renaming the host root skeleton to", &dir)(e)),
        })
    });
    if tmp.exists() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    built.map(|()| dir)
}

fn build_skeleton(tmp: &Path) -> Result<(), RootfsError> {
    std::fs::create_dir_all(tmp).map_err(io_err("creating the host root skeleton", tmp))?;
    for name in EMPTY_DIRS {
        let path = tmp.join(name);
        std::fs::create_dir(&path).map_err(io_err("creating the mount point", &path))?;
    }
    for name in HOST_DIRS.iter().chain(&USR_MERGE) {
        let (host, path) = (Path::new("/").join(name), tmp.join(name));
        let Ok(meta) = std::fs::symlink_metadata(&host) else {
            continue;
        };
        if meta.is_symlink() {
            let target = std::fs::read_link(&host).map_err(io_err("reading the link", &host))?;
            std::os::unix::fs::symlink(target, &path).map_err(io_err("copying the link", &path))?;
        } else if meta.is_dir() {
            std::fs::create_dir(&path).map_err(io_err("creating the mount point", &path))?;
        }
    }
    Ok(())
}
