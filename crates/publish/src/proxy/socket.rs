//! Socket set-up for the forwarder: listeners (bound here or passed by dockerd) and the
//! non-blocking sockets towards the container.
//!
//! Theory of operation: listeners are made like Go's `net.Listen` in docker-proxy (SO_REUSEADDR
//! for TCP, IPV6_V6ONLY for an IPv6 address, since dockerd starts one proxy per family) plus
//! SO_REUSEPORT so each event loop owns one. A passed socket is made non-blocking and, for
//! TCP, put (again) into the listening state, which is harmless when dockerd already did.
//! SCTP uses one-to-one (SOCK_STREAM) sockets; when socket(2) refuses the protocol the kernel
//! has no SCTP and the caller gets exactly that.
//!
//! Privileges: as for binding the host port. Tests: through `crates/pier/tests/proxy_*.rs`.
use super::ProxyError;
use crate::Protocol;
use nix::errno::Errno;
use nix::sys::socket::{
    self, sockopt, AddressFamily, Backlog, SockFlag, SockProtocol, SockType, SockaddrStorage,
};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// A new non-blocking, close-on-exec socket of `protocol` for addresses like `addr`.
pub fn new_socket(addr: SocketAddr, protocol: Protocol) -> nix::Result<OwnedFd> {
    let family = match addr {
        SocketAddr::V4(_) => AddressFamily::Inet,
        SocketAddr::V6(_) => AddressFamily::Inet6,
    };
    let (ty, proto) = match protocol {
        Protocol::Tcp => (SockType::Stream, SockProtocol::Tcp),
        Protocol::Udp => (SockType::Datagram, SockProtocol::Udp),
        Protocol::Sctp => (SockType::Stream, SockProtocol::Sctp),
    };
    let flags = SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC;
    socket::socket(family, ty, flags, proto)
}

/// `threads` sockets bound to `host` with SO_REUSEPORT (the first picks the port when it is 0).
pub fn listen_all(
    host: SocketAddr,
    protocol: Protocol,
    threads: usize,
) -> Result<Vec<OwnedFd>, ProxyError> {
    let first = listen_one(host, protocol)?;
    let host = local_addr(&first).unwrap_or(host);
    let mut listeners = vec![first];
    for _ in 1..threads {
        listeners.push(listen_one(host, protocol)?);
    }
    Ok(listeners)
}

fn listen_one(host: SocketAddr, protocol: Protocol) -> Result<OwnedFd, ProxyError> {
    let failed = |source| ProxyError::Listen {
        addr: host,
        protocol,
        source,
    };
    let sock = new_socket(host, protocol).map_err(|e| match e {
        Errno::EPROTONOSUPPORT | Errno::ESOCKTNOSUPPORT if protocol == Protocol::Sctp => {
            ProxyError::SctpUnavailable
        }
        e => failed(e),
    })?;
    if protocol != Protocol::Udp {
        socket::setsockopt(&sock, sockopt::ReuseAddr, &true).map_err(failed)?;
    }
    socket::setsockopt(&sock, sockopt::ReusePort, &true).map_err(failed)?;
    if host.is_ipv6() {
        socket::setsockopt(&sock, sockopt::Ipv6V6Only, &true).map_err(failed)?;
    }
    socket::bind(sock.as_raw_fd(), &SockaddrStorage::from(host)).map_err(failed)?;
    if protocol != Protocol::Udp {
        socket::listen(&sock, Backlog::MAXCONN).map_err(failed)?;
    }
    Ok(sock)
}

/// The passed socket, made ready, plus duplicates for the other TCP event loops.
pub fn adopt(fd: OwnedFd, protocol: Protocol, threads: usize) -> Result<Vec<OwnedFd>, ProxyError> {
    let failed = |source| ProxyError::PassedSocket { protocol, source };
    let flags = nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_GETFL).map_err(failed)?;
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(&fd, nix::fcntl::FcntlArg::F_SETFL(flags)).map_err(failed)?;
    let threads = match protocol {
        Protocol::Udp => 1,
        Protocol::Tcp | Protocol::Sctp => {
            socket::listen(&fd, Backlog::MAXCONN).map_err(failed)?;
            threads
        }
    };
    let mut listeners = Vec::with_capacity(threads);
    for thread in 1..threads {
        let dup = fd
            .as_fd()
            .try_clone_to_owned()
            .map_err(|e| ProxyError::Dup {
                thread,
                source: Errno::from_raw(e.raw_os_error().unwrap_or(0)),
            })?;
        listeners.push(dup);
    }
    listeners.insert(0, fd);
    Ok(listeners)
}

/// The local address of socket `fd`, when it has an IP one.
pub fn local_addr(fd: &OwnedFd) -> Option<SocketAddr> {
    let addr: SockaddrStorage = socket::getsockname(fd.as_raw_fd()).ok()?;
    if let Some(v4) = addr.as_sockaddr_in() {
        return Some(SocketAddr::V4((*v4).into()));
    }
    addr.as_sockaddr_in6()
        .map(|v6| SocketAddr::V6((*v6).into()))
}

/// A non-blocking connection attempt to `to`; completion shows as writability.
pub fn connect(to: SocketAddr, protocol: Protocol) -> nix::Result<OwnedFd> {
    let sock = new_socket(to, protocol)?;
    match socket::connect(sock.as_raw_fd(), &SockaddrStorage::from(to)) {
        Ok(()) | Err(Errno::EINPROGRESS) => Ok(sock),
        Err(e) => Err(e),
    }
}
