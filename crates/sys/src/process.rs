//! Per-process attributes nix does not wrap: session keyring, I/O priority, `sched_setattr`,
//! personality, close-on-exec of an fd range, the controlling terminal and its size, `pidfd_open` and the
//! receiving side of fd passing (SCM_RIGHTS).
//!
//! Theory of operation: each function is one syscall on the calling process, with its arguments
//! typed; errno comes back as `io::Error`. Callers in pier-runtime run them in the container's
//! init (single-threaded) just before execve, in the order runc uses.
//!
//! Privileges: joining a keyring, ioprio classes other than RT and `personality` need none;
//! RT ioprio and RT/deadline scheduling need CAP_SYS_NICE (or CAP_SYS_ADMIN); TIOCSCTTY needs a
//! session leader without a controlling terminal.
//! Tests: unit tests below; the effects in pier-runtime's `priv_process`.
use crate::check;
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// Joins a session keyring (`KEYCTL_JOIN_SESSION_KEYRING`): a new anonymous one when `name` is
/// None, else the named one (created if the caller can find none); returns its serial number.
pub fn join_session_keyring(name: Option<&CStr>) -> io::Result<i32> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    let ptr = name.map_or(std::ptr::null(), CStr::as_ptr);
    // SAFETY: ptr is NULL or a NUL-terminated string that outlives the call; the kernel only
    // reads it.
    let rc = unsafe { libc::syscall(libc::SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, ptr) };
    check(rc).map(|v| v as i32)
}

/// Sets the calling process's I/O priority (`ioprio_set(IOPRIO_WHO_PROCESS, 0, ...)`).
/// `class` is 1 (RT), 2 (BE) or 3 (IDLE); `level` is 0..=7.
pub fn ioprio_set(class: u16, level: u16) -> io::Result<()> {
    const IOPRIO_WHO_PROCESS: libc::c_long = 1;
    const IOPRIO_CLASS_SHIFT: u32 = 13;
    let prio = (libc::c_long::from(class) << IOPRIO_CLASS_SHIFT) | libc::c_long::from(level);
    // SAFETY: integer arguments only; no memory is passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            IOPRIO_WHO_PROCESS,
            0 as libc::c_long,
            prio,
        )
    };
    check(rc).map(drop)
}

/// The fields of `struct sched_attr` (see sched_setattr(2)); `size` is filled in by
/// [`sched_setattr`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedAttr {
    /// `SCHED_OTHER`, `SCHED_FIFO`, ... (libc constants).
    pub policy: u32,
    /// `SCHED_FLAG_*` bits.
    pub flags: u64,
    /// Nice value for SCHED_OTHER/SCHED_BATCH.
    pub nice: i32,
    /// Static priority for SCHED_FIFO/SCHED_RR.
    pub priority: u32,
    /// SCHED_DEADLINE runtime in nanoseconds.
    pub runtime: u64,
    /// SCHED_DEADLINE deadline in nanoseconds.
    pub deadline: u64,
    /// SCHED_DEADLINE period in nanoseconds.
    pub period: u64,
}

/// Sets the calling thread's scheduling policy and attributes (`sched_setattr(0, attr, 0)`).
pub fn sched_setattr(attr: &SchedAttr) -> io::Result<()> {
    let raw = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: attr.policy,
        sched_flags: attr.flags,
        sched_nice: attr.nice,
        sched_priority: attr.priority,
        sched_runtime: attr.runtime,
        sched_deadline: attr.deadline,
        sched_period: attr.period,
    };
    // SAFETY: raw is a fully initialised sched_attr whose size field matches its layout; it
    // outlives the call and the kernel only reads it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            0 as libc::c_long,
            &raw as *const libc::sched_attr,
            0,
        )
    };
    check(rc).map(drop)
}

/// Sets the execution domain (`personality(2)`), e.g. `PER_LINUX` (0) or `PER_LINUX32` (8).
pub fn set_personality(persona: u32) -> io::Result<()> {
    // SAFETY: integer argument only.
    let rc = unsafe { libc::personality(libc::c_ulong::from(persona)) };
    check(rc).map(drop)
}

/// Marks every fd >= `first` close-on-exec (`close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`),
/// so the coming execve closes them while the caller can still use them until then.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    // SAFETY: no fd is closed (only the FD_CLOEXEC flag is set), so no owner is invalidated.
    let rc =
        unsafe { libc::close_range(first, u32::MAX, libc::CLOSE_RANGE_CLOEXEC as libc::c_int) };
    check(rc).map(drop)
}

/// Clears FD_CLOEXEC on fd number `fd` so it survives execve (fds the runtime was told to pass
/// on by number, such as `--preserve-fds`); EBADF when no such fd is open.
pub fn clear_cloexec(fd: libc::c_int) -> io::Result<()> {
    // SAFETY: F_SETFD with 0 only changes the fd's close-on-exec flag; an fd number that is not
    // open yields EBADF; no memory is passed and no fd is closed or created.
    let rc = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    check(rc).map(drop)
}

/// Makes the terminal `fd` the controlling terminal of the calling session leader (TIOCSCTTY).
pub fn set_controlling_terminal(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal); fd is a valid open fd.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSCTTY, 0 as libc::c_int) };
    check(rc).map(drop)
}

/// Sets the window size of the terminal `fd` (TIOCSWINSZ).
pub fn set_window_size(fd: BorrowedFd<'_>, rows: u16, cols: u16) -> io::Result<()> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one struct winsize, which lives on the stack for the whole call;
    // fd is a valid open fd.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCSWINSZ,
            &size as *const libc::winsize,
        )
    };
    check(rc).map(drop)
}

/// The window size (rows, columns) of the terminal `fd` (TIOCGWINSZ).
pub fn window_size(fd: BorrowedFd<'_>) -> io::Result<(u16, u16)> {
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one struct winsize into the stack value, which outlives the
    // call; fd is a valid open fd.
    let rc = unsafe {
        libc::ioctl(
            fd.as_raw_fd(),
            libc::TIOCGWINSZ,
            &mut size as *mut libc::winsize,
        )
    };
    check(rc).map(|_| (size.ws_row, size.ws_col))
}

/// Opens a pidfd for `pid` (`pidfd_open(pid, 0)`); it polls readable when the process exits.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: integer arguments only.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    let fd = check(rc)?;
    // SAFETY: on success the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Receives one message from the stream socket `sock` into `buf`; returns the payload length
/// and the first fd passed with SCM_RIGHTS (the receiving side of runc's `SendFd` protocol, used
/// for `--console-socket`, and by a seccomp agent receiving the listener from `listenerPath`).
/// The fd arrives close-on-exec.
pub fn recv_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<(usize, Option<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([std::os::fd::RawFd; 4]);
    let msg = recvmsg::<()>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            fds.extend(raw);
        }
    }
    let len = msg.bytes;
    // SAFETY: each fd came from SCM_RIGHTS in this message: the kernel installed it in this
    // process just now and nothing else refers to it, so each is owned exactly once.
    let mut owned = fds
        .into_iter()
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    Ok((len, owned.next()))
}

/// Closes `fd` in a short-lived orphan process instead of in the caller, for files whose release
/// blocks: the last close of an nftables netlink socket that committed a delete waits for an RCU
/// grace period (10-20 ms here). A child forks a grandchild and exits at once (reaped here); the
/// caller closes its copy, then the pipe the grandchild reads, so the grandchild holds the last
/// reference when it sees end-of-file and exits. It is then an orphan of init or the nearest
/// subreaper, which reaps it.
pub fn close_in_orphan(fd: OwnedFd) -> io::Result<()> {
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (read_raw, write_raw) = (read_end.as_raw_fd(), write_end.as_raw_fd());
    // SAFETY: the child and the grandchild make only async-signal-safe calls (fork, close,
    // read, _exit) on memory of their own stack and exit without returning, which is sound in
    // a child of a multi-threaded process.
    let child = unsafe { libc::fork() };
    match child {
        -1 => return Err(io::Error::last_os_error()),
        // SAFETY: in the child: async-signal-safe calls only, on a byte of its own stack; the
        // fds are ours (the pipe's ends), and neither process returns from this block.
        0 => unsafe {
            if libc::fork() == 0 {
                let mut byte = 0u8;
                libc::close(write_raw);
                libc::read(read_raw, std::ptr::addr_of_mut!(byte).cast(), 1);
            }
            libc::_exit(0)
        },
        _ => {}
    }
    // The child exits at once; its copies are closed before ours, so no copy outlives the
    // grandchild's but its own.
    let reaped = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
    drop(fd);
    drop(read_end);
    drop(write_end);
    match reaped {
        Err(nix::errno::Errno::ECHILD) | Ok(_) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `_exit(2)`: ends the process at once, without running atexit handlers or flushing the
/// buffers it shares with its parent after a fork (a forked helper must not print its parent's
/// pending output a second time).
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes an int by value, touches no memory of ours and does not return.
    unsafe { libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn close_in_orphan_hands_the_last_reference_away() {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        close_in_orphan(write_end).unwrap();
        // Every write end is closed once the orphan exits: the read end then sees EOF.
        let mut buf = [0u8; 1];
        let n = nix::unistd::read(&read_end, &mut buf).unwrap();
        assert_eq!(n, 0);
    }

    #[test]
    fn recv_fd_returns_payload_and_fd() {
        use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
        use std::os::unix::net::UnixStream;
        let (a, b) = UnixStream::pair().unwrap();
        let file = std::fs::File::open("/proc/self/status").unwrap();
        let iov = [io::IoSlice::new(b"name")];
        let fds = [file.as_raw_fd()];
        sendmsg::<()>(
            a.as_raw_fd(),
            &iov,
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .unwrap();
        let mut buf = [0u8; 16];
        let (len, fd) = recv_fd(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf[..len], b"name");
        let mut text = String::new();
        io::Read::read_to_string(&mut std::fs::File::from(fd.unwrap()), &mut text).unwrap();
        assert!(text.contains("Pid:"));
    }

    #[test]
    fn pidfd_of_self_opens() {
        let fd = pidfd_open(std::process::id() as libc::pid_t).unwrap();
        assert!(fd.as_raw_fd() >= 0);
    }

    #[test]
    fn pidfd_of_missing_pid_fails() {
        let err = pidfd_open(i32::MAX).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn clear_cloexec_keeps_fd_across_exec_and_reports_ebadf() {
        let file = std::fs::File::open("/dev/null").unwrap();
        clear_cloexec(file.as_raw_fd()).unwrap();
        let flags = nix::fcntl::fcntl(&file, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_eq!(flags & libc::FD_CLOEXEC, 0);
        assert_eq!(
            clear_cloexec(-1).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }

    #[test]
    fn window_size_is_accepted_by_a_pty_only() {
        let master =
            nix::pty::posix_openpt(nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_NOCTTY)
                .unwrap();
        set_window_size(master.as_fd(), 40, 132).unwrap();
        let err =
            set_window_size(std::fs::File::open("/dev/null").unwrap().as_fd(), 1, 1).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOTTY));
    }

    #[test]
    fn ioprio_rejects_bad_class() {
        let err = ioprio_set(7, 0).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL));
    }

    #[test]
    fn sched_setattr_other_keeps_policy() {
        let attr = SchedAttr {
            policy: libc::SCHED_OTHER as u32,
            nice: 0,
            ..SchedAttr::default()
        };
        sched_setattr(&attr).unwrap();
    }
}
