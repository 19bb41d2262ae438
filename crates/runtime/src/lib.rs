//! pier-runtime: the OCI container lifecycle.
//!
//! Module owners while the first version is built (one helper each, files disjoint):
//! - `rootfs`   : mounts, devices, pivot_root, masked/readonly paths, propagation, sysctl
//! - `process`, `hooks` : the init's last mile (rlimits, user, capabilities, NNP, LSM labels,
//!   seccomp, console, preserved fds, exec) and OCI hooks
//! - `container` and the rest (core): lifecycle, state, namespaces, clone3, the runc verbs
pub mod container;
pub mod hooks;
pub mod process;
pub mod rootfs;

pub use container::{default_spec, features, CreateOptions, Error, ExecOptions, Runtime, State};
