//! seccomp(2): install a classic-BPF filter, probe what the kernel supports, and the two
//! user-notification ioctls a listener needs.
//!
//! Theory of operation: `set_mode_filter` hands a `sock_fprog` to `seccomp(SECCOMP_SET_MODE_FILTER)`
//! with the caller's flags. The kernel refuses flags it does not know with EINVAL; like crun,
//! the optional flags (WAIT_KILLABLE_RECV, SPEC_ALLOW, LOG: newest first) are dropped one at a
//! time on EINVAL and the call retried, and the flags finally used are returned. TSYNC and
//! NEW_LISTENER are never dropped: without them the filter would not mean what was asked.
//! TSYNC together with NEW_LISTENER needs TSYNC_ESRCH (the kernel cannot report a thread id and
//! an fd in one return value), which is added here.
//!
//! Privileges: installing needs no_new_privs set or CAP_SYS_ADMIN (EACCES otherwise).
//! Tests: crates/seccomp/tests/priv_load.rs loads real filters in child processes.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

pub use libc::sock_filter;

/// Synchronise all threads of the process to the new filter.
pub const FLAG_TSYNC: u32 = libc::SECCOMP_FILTER_FLAG_TSYNC as u32;
/// Log every action but ALLOW.
pub const FLAG_LOG: u32 = libc::SECCOMP_FILTER_FLAG_LOG as u32;
/// Disable the speculative store bypass mitigation.
pub const FLAG_SPEC_ALLOW: u32 = libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW as u32;
/// Return a user-notification listener fd.
pub const FLAG_NEW_LISTENER: u32 = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER as u32;
/// With TSYNC: report a thread that cannot sync as ESRCH instead of its tid.
pub const FLAG_TSYNC_ESRCH: u32 = libc::SECCOMP_FILTER_FLAG_TSYNC_ESRCH as u32;
/// Notified tasks wait killably once the listener has received the notification.
pub const FLAG_WAIT_KILLABLE_RECV: u32 = libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV as u32;

/// Flags that may be dropped when the kernel does not know them, newest first.
const OPTIONAL_FLAGS: [u32; 3] = [FLAG_WAIT_KILLABLE_RECV, FLAG_SPEC_ALLOW, FLAG_LOG];

/// What `set_mode_filter` did: the listener (with NEW_LISTENER) and the flags the kernel took.
#[derive(Debug)]
pub struct Installed {
    /// The user-notification fd, when NEW_LISTENER was asked for.
    pub listener: Option<OwnedFd>,
    /// The flags finally passed (the asked ones less those the kernel refused).
    pub flags: u32,
}

/// Installs `filter` on the calling thread (all threads with TSYNC).
pub fn set_mode_filter(filter: &[sock_filter], flags: u32) -> io::Result<Installed> {
    let mut flags = flags;
    if flags & FLAG_TSYNC != 0 && flags & FLAG_NEW_LISTENER != 0 {
        flags |= FLAG_TSYNC_ESRCH;
    }
    loop {
        match seccomp_filter(filter, flags) {
            Ok(listener) => return Ok(Installed { listener, flags }),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                match OPTIONAL_FLAGS.iter().find(|f| flags & **f != 0) {
                    Some(optional) => flags &= !optional,
                    None => return Err(e),
                }
            }
            Err(e) => return Err(e),
        }
    }
}

fn seccomp_filter(filter: &[sock_filter], flags: u32) -> io::Result<Option<OwnedFd>> {
    let len =
        u16::try_from(filter.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let prog = libc::sock_fprog {
        len,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: `prog` points at `filter`, which outlives the call; the kernel copies the program
    // and only reads through the pointer. The flags are plain integers it validates itself.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::c_ulong::from(flags),
            &prog as *const libc::sock_fprog,
        )
    };
    crate::check(ret)?;
    if flags & FLAG_NEW_LISTENER == 0 {
        return Ok(None);
    }
    let fd = i32::try_from(ret).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: with NEW_LISTENER the kernel returns a new fd that nothing else owns.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }))
}

/// Whether the kernel knows the filter return action `action` (SECCOMP_GET_ACTION_AVAIL).
pub fn action_available(action: u32) -> io::Result<bool> {
    // SAFETY: the kernel reads one u32 from the pointer, which points at a live local.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_ACTION_AVAIL,
            0 as libc::c_ulong,
            &action as *const u32,
        )
    };
    match ret {
        0 => Ok(true),
        _ => match io::Error::last_os_error() {
            e if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(false),
            e => Err(e),
        },
    }
}

/// One received user notification (the fields a listener decides on).
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    /// Cookie to answer with.
    pub id: u64,
    /// Thread id of the notifying task.
    pub pid: u32,
    /// Syscall number.
    pub nr: i32,
    /// AUDIT_ARCH_* of the call.
    pub arch: u32,
    /// The six syscall arguments.
    pub args: [u64; 6],
}

/// Blocks until a notification arrives on `listener` (SECCOMP_IOCTL_NOTIF_RECV).
pub fn notif_recv(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: seccomp_notif is plain old data; all-zero is a valid value and the kernel
    // requires the buffer zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: the ioctl writes one seccomp_notif into `notif`, a live, correctly sized local.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut notif as *mut libc::seccomp_notif,
        )
    };
    crate::check(ret)?;
    Ok(Notification {
        id: notif.id,
        pid: notif.pid,
        nr: notif.data.nr,
        arch: notif.data.arch,
        args: notif.data.args,
    })
}

/// Answers notification `id`: `error` = 0 with `val` as the return value, or a negative errno.
pub fn notif_respond(listener: BorrowedFd<'_>, id: u64, val: i64, error: i32) -> io::Result<()> {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags: 0,
    };
    // SAFETY: the ioctl reads one seccomp_notif_resp from `resp`, a live, initialised local.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    };
    crate::check(ret)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allow_action_is_always_available() {
        assert!(action_available(libc::SECCOMP_RET_ALLOW).unwrap());
    }

    #[test]
    fn unknown_action_is_reported_unavailable() {
        assert!(!action_available(0x7ff1_0000).unwrap());
    }
}
