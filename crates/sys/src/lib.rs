//! pier-sys: the unsafe boundary of pier.
//!
//! Theory of operation: every other crate is `#![deny(unsafe_code)]` (workspace lint). When a
//! syscall is not covered by `nix` (clone3 with CLONE_INTO_CGROUP, seccomp(2) with its flags,
//! capset, the new mount API, ioprio_set, sched_setattr, ...), it gets a small safe wrapper here,
//! one module per concern, each `unsafe` block carrying a `// SAFETY:` comment that names the
//! invariant it relies on. Wrappers return `std::io::Result` (errno preserved) so callers can map
//! them into their own typed errors naming the step.
//!
//! Privileges: whatever the wrapped syscall needs; nothing here changes state on its own.
//! Tests: unit tests beside each module (those that need root skip outside CI, fail under CI=true).
#![allow(unsafe_code)]

pub mod caps;
pub mod cgroup;
pub mod clone;
pub mod mount;
pub mod net;
pub mod pidfd;
pub mod process;
pub mod publish;
pub mod seccomp;
pub mod tcx;

/// The result of a raw syscall: a negative return is the failure whose errno is in `errno`.
pub(crate) fn check<T: Copy + PartialOrd + Default>(rc: T) -> std::io::Result<T> {
    if rc < T::default() {
        return Err(std::io::Error::last_os_error());
    }
    Ok(rc)
}
