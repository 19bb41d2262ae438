//! Socket helpers nix does not cover: adopting inherited fds by number, SIOCATMARK, accept4
//! returning an owned fd, and SO_INCOMING_CPU.
//!
//! Theory of operation: docker-proxy's protocol passes a status pipe as fd 3 and, with
//! `-use-listen-fd`, the listening socket as fd 4. Turning a number into an `OwnedFd` is sound
//! only if nothing else in the process owns it, so [`take_inherited`] checks that the fd is open
//! and refuses to hand out the same number twice (a process-wide bitmap of taken numbers).
//! [`at_mark`] asks a TCP socket whether its read position is at the urgent mark, which the
//! forwarder needs because reads (and splice) stop there. [`accept_nonblocking`] is accept4(2)
//! with SOCK_NONBLOCK | SOCK_CLOEXEC, one syscall where std's accept needs a second to make the
//! socket non-blocking (nix's accept4 returns a raw fd, which only this crate may adopt).
//! [`set_incoming_cpu`] ties a SO_REUSEPORT listener to a CPU, so the forwarder's loops each get
//! the connections whose SYN their CPU processed (a test below checks the kernel does that).
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

/// Sets SO_INCOMING_CPU on a listening socket: in a SO_REUSEPORT group, the kernel hands a new
/// connection to the member whose value is the CPU that processed its SYN (6.1+; older kernels
/// take the value and keep choosing by hash).
pub fn set_incoming_cpu(sock: BorrowedFd<'_>, cpu: usize) -> io::Result<()> {
    let value =
        libc::c_int::try_from(cpu).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: setsockopt reads one int from a pointer to a stack value that outlives the call
    // and the length passed is that int's; sock is a valid open fd borrowed for the call.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_INCOMING_CPU,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    crate::check(rc)?;
    Ok(())
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

    /// Runs `f` on a thread of its own pinned to `cpu`.
    fn on_cpu<T: Send>(cpu: usize, f: impl FnOnce() -> T + Send) -> T {
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: the set is a zeroed cpu_set_t on the stack that CPU_SET fills and
                    // sched_setaffinity reads for the calling thread (pid 0) only.
                    let rc = unsafe {
                        let mut set: libc::cpu_set_t = std::mem::zeroed();
                        libc::CPU_SET(cpu, &mut set);
                        libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set)
                    };
                    assert_eq!(
                        rc,
                        0,
                        "pinning to CPU {cpu}: {}",
                        io::Error::last_os_error()
                    );
                    f()
                })
                .join()
                .expect("pinned thread")
        })
    }

    /// A non-blocking TCP listener on `port` of 127.0.0.1 (0: any) in a SO_REUSEPORT group.
    fn reuseport_listener(port: u16) -> std::net::TcpListener {
        // SAFETY: a new socket is adopted once; setsockopt reads one int from the stack; bind
        // and listen take a sockaddr_in built on the stack with its true length.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            assert!(fd >= 0);
            let one: libc::c_int = 1;
            let len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
            let p = (&one as *const libc::c_int).cast();
            assert_eq!(
                libc::setsockopt(fd, libc::SOL_SOCKET, libc::SO_REUSEPORT, p, len),
                0
            );
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = port.to_be();
            addr.sin_addr.s_addr = u32::from(std::net::Ipv4Addr::LOCALHOST).to_be();
            let alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
            assert_eq!(
                libc::bind(fd, (&addr as *const libc::sockaddr_in).cast(), alen),
                0
            );
            assert_eq!(libc::listen(fd, 16), 0);
            let listener = std::net::TcpListener::from_raw_fd(fd);
            listener.set_nonblocking(true).unwrap();
            listener
        }
    }

    #[test]
    fn incoming_cpu_steers_connections_to_the_listener_of_the_syn_cpu() {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        if cpus < 2 {
            let why = format!("steering by CPU needs two CPUs, this machine has {cpus}");
            assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{why}");
            eprintln!("skipping: {why}");
            return;
        }
        let first = reuseport_listener(0);
        let port = first.local_addr().unwrap().port();
        let second = reuseport_listener(port);
        set_incoming_cpu(first.as_fd(), 0).unwrap();
        set_incoming_cpu(second.as_fd(), 1).unwrap();
        // Eight connections: by hash alone, all would land right one time in 256.
        for n in 0..8 {
            let (cpu, wanted, other) = match n % 2 {
                0 => (0, &first, &second),
                _ => (1, &second, &first),
            };
            let client = on_cpu(cpu, || {
                std::net::TcpStream::connect(("127.0.0.1", port)).unwrap()
            });
            assert!(
                accept_nonblocking(wanted).is_ok(),
                "a SYN on CPU {cpu} missed its listener"
            );
            let stray = accept_nonblocking(other).unwrap_err();
            assert_eq!(stray.kind(), io::ErrorKind::WouldBlock);
            drop(client);
        }
    }
}
