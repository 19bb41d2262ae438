//! `clone3(2)` as a fork: the one way pier creates container processes.
//!
//! Theory of operation: `clone3` without `CLONE_VM` and without a stack behaves like `fork`
//! (the child runs on a copy of the caller's address space and returns from the same call), but
//! in one syscall it also returns a pidfd (`CLONE_PIDFD`), places the child directly into a
//! cgroup2 directory (`CLONE_INTO_CGROUP`, 0.05 ms where writing `cgroup.procs` costs
//! milliseconds) and creates its new namespaces (`CLONE_NEW*`). The child starts with only the
//! calling thread, so callers must be single-threaded or accept that only async-signal-safe work
//! is strictly safe in the child (pier's CLI is single-threaded).
//!
//! Fallback: kernels older than 5.3 answer `ENOSYS`, kernels older than 5.7 refuse
//! `CLONE_INTO_CGROUP` with `E2BIG`/`EINVAL`; then the legacy `clone(2)` (with `CLONE_PIDFD`,
//! 5.2+) is used without the cgroup, and [`Forked::Parent::in_cgroup`] tells the caller to move
//! the child into the cgroup itself.
//!
//! Privileges: `CAP_SYS_ADMIN` for most `CLONE_NEW*` flags.
//! Tests: crates/runtime/tests/priv_lifecycle.rs.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `CLONE_INTO_CGROUP` (libc's constant overflows its `c_int`).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// The kernel's `struct clone_args` (version 2, 88 bytes, with `cgroup`).
#[repr(C)]
#[derive(Debug, Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// Which side of the fork the caller is on.
#[derive(Debug)]
pub enum Forked {
    /// In the new process.
    Child,
    /// In the caller: the child's pid (in the caller's pid namespace) and a pidfd of it.
    Parent {
        /// Pid of the child.
        pid: i32,
        /// `CLONE_PIDFD` result, close-on-exec.
        pidfd: OwnedFd,
        /// True when the child was created inside the requested cgroup.
        in_cgroup: bool,
    },
}

/// Forks with `flags` (`CLONE_NEW*` and the like; `CLONE_PIDFD` and `CLONE_INTO_CGROUP` are
/// added here), the child reporting its exit with `SIGCHLD`, into `cgroup` when given.
pub fn fork(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    match clone3(flags, cgroup) {
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::E2BIG)) => {
            legacy_clone(flags)
        }
        Err(e) if cgroup.is_some() && e.raw_os_error() == Some(libc::EINVAL) => {
            // Kernels 5.3..5.7 know clone3 but not CLONE_INTO_CGROUP.
            match clone3(flags, None)? {
                Forked::Parent { pid, pidfd, .. } => Ok(Forked::Parent {
                    pid,
                    pidfd,
                    in_cgroup: false,
                }),
                Forked::Child => Ok(Forked::Child),
            }
        }
        other => other,
    }
}

fn clone3(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: flags | libc::CLONE_PIDFD as u64,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal: libc::SIGCHLD as u64,
        ..CloneArgs::default()
    };
    if let Some(fd) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = fd.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a valid, fully initialised clone_args of the size passed; `pidfd` outlives
    // the call. Without CLONE_VM and with stack 0 the child gets its own copy of the address
    // space and resumes here like after fork(2), so no memory is shared with the parent.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &mut args as *mut CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    finish(ret, pidfd, cgroup.is_some())
}

fn legacy_clone(flags: u64) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let clone_flags = flags | libc::CLONE_PIDFD as u64 | libc::SIGCHLD as u64;
    // SAFETY: clone(2) on x86_64 takes (flags, stack, parent_tid, child_tid, tls); stack 0 without
    // CLONE_VM means fork semantics; with CLONE_PIDFD the pidfd is stored through `parent_tid`,
    // which points to a live c_int.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            clone_flags,
            0usize,
            std::ptr::addr_of_mut!(pidfd),
            0usize,
            0usize,
        )
    };
    finish(ret, pidfd, false)
}

fn finish(ret: libc::c_long, pidfd: libc::c_int, in_cgroup: bool) -> io::Result<Forked> {
    match ret {
        -1 => Err(io::Error::last_os_error()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent {
            pid: pid as i32,
            // SAFETY: on success the kernel stored a fresh pidfd (close-on-exec) that nothing else
            // owns.
            pidfd: unsafe { OwnedFd::from_raw_fd(pidfd) },
            in_cgroup,
        }),
    }
}

/// Credential changes for a process made by [`fork`].
///
/// glibc's `setresuid`/`setresgid`/`setgroups` apply the change to every thread glibc knows of,
/// by signalling each and waiting for it. A child made by a raw `clone3` inherits glibc's list of
/// the parent's threads; a thread that was being created at fork time never answers, and the
/// child hangs (seen with a multi-threaded test harness). The child has exactly one thread, so
/// the raw syscalls, which change the calling thread, do the whole job.
pub mod child {
    use std::io;

    fn check(ret: libc::c_long) -> io::Result<()> {
        match ret {
            -1 => Err(io::Error::last_os_error()),
            _ => Ok(()),
        }
    }

    /// Raw `setresuid(2)` (all three ids).
    pub fn setresuid(uid: u32) -> io::Result<()> {
        // SAFETY: setresuid takes three ids by value and touches no memory of ours.
        check(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) })
    }

    /// Raw `setresgid(2)` (all three ids).
    pub fn setresgid(gid: u32) -> io::Result<()> {
        // SAFETY: setresgid takes three ids by value and touches no memory of ours.
        check(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) })
    }

    /// Raw `setgroups(2)`.
    pub fn setgroups(groups: &[u32]) -> io::Result<()> {
        // SAFETY: the kernel reads `groups.len()` gid_t values (u32) from a live slice.
        check(unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) })
    }
}
