//! Root filesystem of a container. INTERFACE STUB: the rootfs helper replaces the bodies.
//!
//! Owner: rootfs (files `rootfs.rs` or `rootfs/`, and `crates/sys/src/mount.rs`).
use oci_spec::runtime::Spec;
use std::path::Path;

/// Options from the command line that change how the root is set up.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `--no-pivot`: move the root with MS_MOVE + chroot instead of pivot_root (ramfs roots).
    pub no_pivot: bool,
}

/// What failed while preparing the container's filesystem view.
#[derive(Debug, thiserror::Error)]
pub enum RootfsError {
    /// Placeholder until the rootfs module lands.
    #[error("rootfs setup is not built yet")]
    NotBuilt,
}

/// Runs in the container's init process, inside its new mount namespace (and its user namespace
/// if it has one), before any hook that runs in the container. `rootfs` is the absolute path of
/// the root (bundle-relative paths already resolved). Sets the propagation of `/`, bind-mounts
/// the root onto itself, performs every mount of `spec.mounts()`, creates default and
/// `linux.devices`, calls `before_pivot` (the createContainer hooks) and then pivots (or
/// MS_MOVE + chroot with `no_pivot`). On return, the cwd is the container's `/`.
pub fn setup(
    spec: &Spec,
    rootfs: &Path,
    opts: &Options,
    before_pivot: &mut dyn FnMut() -> Result<(), String>,
) -> Result<(), RootfsError> {
    let _ = (spec, rootfs, opts, before_pivot);
    Err(RootfsError::NotBuilt)
}

/// Runs after `setup` and after the console was attached: `linux.sysctl`, `readonlyPaths`,
/// `maskedPaths`, `root.readonly`, `rootfsPropagation` of the final root.
pub fn finalize(spec: &Spec) -> Result<(), RootfsError> {
    let _ = spec;
    Err(RootfsError::NotBuilt)
}
