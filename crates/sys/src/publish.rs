//! The two raw calls the publish engines need: a network namespace's cookie and a child that
//! gets a status pipe as fd 3 and dies with its parent.
//!
//! Theory of operation: the eBPF programs tell the host's sockets from a container's by the
//! netns cookie (`bpf_get_netns_cookie`), so the loader must learn the cookie of the namespace
//! pier runs in: `getsockopt(SO_NETNS_COOKIE)` (5.14+) on any socket made there answers it.
//! [`spawn_with_fd3`] starts a `std::process::Command` whose child, between fork and exec,
//! duplicates the given fd onto 3 (docker-proxy's status pipe) and asks for SIGKILL when the
//! thread that forked it dies (`PR_SET_PDEATHSIG`), so a forwarder never outlives its monitor.
//!
//! Privileges: none. Tests: below.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

/// `SO_NETNS_COOKIE` from <asm-generic/socket.h> (libc does not export it for every target).
const SO_NETNS_COOKIE: libc::c_int = 71;

/// The cookie of the network namespace socket `sock` lives in.
pub fn netns_cookie(sock: BorrowedFd<'_>) -> io::Result<u64> {
    let mut cookie: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` (8) bytes into `cookie`, which lives on the stack
    // for the whole call, and updates `len`; sock is a valid open fd borrowed for the call.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_NETNS_COOKIE,
            (&mut cookie as *mut u64).cast(),
            &mut len,
        )
    };
    crate::check(rc)?;
    Ok(cookie)
}

/// Spawns `cmd` with `fd3` duplicated onto fd 3 of the child and `PR_SET_PDEATHSIG(SIGKILL)`
/// set in it. The child dies when the *thread* that called this exits (a kernel rule), so
/// call it from a thread that lives as long as the child should.
pub fn spawn_with_fd3(cmd: &mut Command, fd3: OwnedFd) -> io::Result<Child> {
    let raw: RawFd = fd3.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and calls only dup2, fcntl and
    // prctl, which are async-signal-safe and allocate nothing; `raw` stays open in the child
    // because `fd3` is dropped in the parent only after spawn returns.
    unsafe {
        cmd.pre_exec(move || {
            if raw == 3 {
                crate::check(libc::fcntl(3, libc::F_SETFD, 0))?;
            } else {
                crate::check(libc::dup2(raw, 3))?;
            }
            crate::check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0))?;
            Ok(())
        });
    }
    let child = cmd.spawn();
    drop(fd3);
    child
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::os::fd::AsFd;

    #[test]
    fn two_sockets_of_one_namespace_share_a_cookie() {
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let cookie = netns_cookie(a.as_fd()).unwrap();
        assert_ne!(cookie, 0);
        assert_eq!(cookie, netns_cookie(b.as_fd()).unwrap());
    }

    #[test]
    fn the_child_writes_to_fd_3() {
        let (mut read, write) = std::io::pipe().unwrap();
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo 0 >&3"]);
        let mut child = spawn_with_fd3(&mut cmd, write.into()).unwrap();
        assert!(child.wait().unwrap().success());
        let mut text = String::new();
        read.read_to_string(&mut text).unwrap();
        assert_eq!(text, "0\n");
    }
}
