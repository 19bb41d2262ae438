//! Socket helpers nix does not cover: adopting inherited fds by number, SIOCATMARK, and
//! accept4 returning an owned fd.
//!
//! Theory of operation: docker-proxy's protocol passes a status pipe as fd 3 and, with
//! `-use-listen-fd`, the listening socket as fd 4. Turning a number into an `OwnedFd` is sound
//! only if nothing else in the process owns it, so [`take_inherited`] checks that the fd is open
//! and refuses to hand out the same number twice (a process-wide bitmap of taken numbers).
//! [`at_mark`] asks a TCP socket whether its read position is at the urgent mark, which the
//! forwarder needs because reads (and splice) stop there. [`accept_nonblocking`] is accept4(2)
//! with SOCK_NONBLOCK | SOCK_CLOEXEC, one syscall where std's accept needs a second to make the
//! socket non-blocking (nix's accept4 returns a raw fd, which only this crate may adopt).
//!
//! Privileges: none. Tests: below.
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

/// Numbers 0..64 already adopted by [`take_inherited`].
static TAKEN: AtomicU64 = AtomicU64::new(0);

/// Adopts fd `fd` (0..64) that the process inherited from its parent; EBADF when it is not
/// open, EBUSY when it was already taken, EINVAL when out of range.
pub fn take_inherited(fd: RawFd) -> io::Result<OwnedFd> {
    if !(0..64).contains(&fd) {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: F_GETFD reads the fd's flags only; an fd number that is not open yields EBADF.
    if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let bit = 1u64 << fd;
    if TAKEN.fetch_or(bit, Ordering::SeqCst) & bit != 0 {
        return Err(io::Error::from_raw_os_error(libc::EBUSY));
    }
    // SAFETY: the fd is open (checked above), was inherited rather than opened by Rust code
    // (callers take inherited numbers only, at startup) and the bitmap guarantees this is the
    // only OwnedFd ever made from this number here, so ownership is unique.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `SIOCATMARK` from <linux/sockios.h> (libc does not export it for Linux).
const SIOCATMARK: libc::Ioctl = 0x8905;

/// Whether the TCP socket `sock` reads at the urgent mark (SIOCATMARK).
pub fn at_mark(sock: BorrowedFd<'_>) -> io::Result<bool> {
    let mut at: libc::c_int = 0;
    // SAFETY: SIOCATMARK writes one int, which lives on the stack for the whole call; sock is
    // a valid open fd borrowed for the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCATMARK, &mut at as *mut libc::c_int) };
    crate::check(rc)?;
    Ok(at != 0)
}

/// Accepts one connection on `listener` as a non-blocking, close-on-exec socket (accept4);
/// `WouldBlock` when none is queued on a non-blocking listener.
pub fn accept_nonblocking(listener: &impl AsFd) -> io::Result<OwnedFd> {
    let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
    // SAFETY: null address and length pointers are allowed (the peer address is not wanted);
    // the listener is a valid fd borrowed for the call.
    let fd = unsafe {
        libc::accept4(
            listener.as_fd().as_raw_fd(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            flags,
        )
    };
    crate::check(fd)?;
    // SAFETY: accept4 succeeded, so fd is a new open descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::IntoRawFd;

    #[test]
    fn take_inherited_refuses_closed_taken_and_out_of_range() {
        let raw = std::fs::File::open("/dev/null").unwrap().into_raw_fd();
        let fd = take_inherited(raw).unwrap();
        assert_eq!(
            take_inherited(raw).unwrap_err().raw_os_error(),
            Some(libc::EBUSY)
        );
        drop(fd);
        assert_eq!(
            take_inherited(63).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        assert_eq!(
            take_inherited(64).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn fresh_tcp_connection_is_not_at_mark() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        assert!(!at_mark(c.as_fd()).unwrap());
    }

    #[test]
    fn accept_nonblocking_gives_a_nonblocking_cloexec_socket() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let e = accept_nonblocking(&l).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        let _c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let fd = accept_nonblocking(&l).unwrap();
        // SAFETY: F_GETFL and F_GETFD read flags of an fd this test owns.
        let (fl, fd_flags) = unsafe {
            (
                libc::fcntl(fd.as_raw_fd(), libc::F_GETFL),
                libc::fcntl(fd.as_raw_fd(), libc::F_GETFD),
            )
        };
        assert_ne!(fl & libc::O_NONBLOCK, 0);
        assert_ne!(fd_flags & libc::FD_CLOEXEC, 0);
    }
}
