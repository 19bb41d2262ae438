//! pier-runtime: the OCI container lifecycle (to be written).
//!
//! Module owners while the first version is built (one helper each, files disjoint):
//! - `rootfs/`  : mounts, devices, pivot_root, masked/readonly paths, propagation, sysctl
//! - `process/` : the init's last mile: rlimits, user, capabilities, NNP, LSM labels, seccomp,
//!   console (pty over --console-socket), preserved fds, exec; plus `hooks.rs`
//! - everything else: lifecycle, state, namespaces, clone3, create/start/kill/delete/exec
pub mod hooks;
pub mod process;
pub mod rootfs;
