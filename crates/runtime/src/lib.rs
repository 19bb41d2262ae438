//! pier-runtime: the OCI container lifecycle.
//!
//! Module owners while the first version is built (one helper each, files disjoint):
//! - `rootfs`   : mounts, devices, pivot_root, masked/readonly paths, propagation, sysctl
//! - `process`, `hooks` : the init's last mile (rlimits, user, capabilities, NNP, LSM labels,
//!   seccomp, console, preserved fds, exec) and OCI hooks
//! - `container` and the rest (core): lifecycle (`container`, `create`, `exec`, `wait`), the
//!   state directory (`state`), config parsing (`spec`), namespaces, the forked side (`init`)
//!   the parent/child socket (`sync`) and the seccomp agent's socket (`listener`)
pub mod container;
mod create;
mod exec;
pub mod hooks;
mod init;
mod listener;
mod namespaces;
pub mod process;
pub mod rootfs;
pub mod spec;
pub mod state;
mod sync;
mod wait;

pub use container::{
    default_spec, features, Child, CreateOptions, Error, ExecOptions, Runtime, State, Stdio,
};
