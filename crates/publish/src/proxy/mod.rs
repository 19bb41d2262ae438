//! The userspace forwarder: one published (host address, port, protocol) to one container
//! address, behind `pier proxy` (a drop-in for Docker's `userland-proxy-path`).
//!
//! Why hand-written: this loop is the product. Seeds 000 and 001 show docker-proxy (a goroutine
//! and a 32 KiB user buffer per direction, two copies per byte) costing more CPU than the
//! application and dropping TCP urgent data; a generic async runtime would bring the same
//! wake-up and copy costs back. Here every byte moves socket -> pipe -> socket with splice(2),
//! never entering user memory, and a connection costs six fds and no thread.
//!
//! Theory of operation: [`Proxy::bind`] makes the listening sockets first, so that a taken port
//! fails before anything runs (the caller reports that on docker-proxy's status fd). Without a
//! passed listener it binds one socket per core with SO_REUSEPORT and the kernel spreads
//! connections (TCP) or client 4-tuples (UDP) across them; with a passed one (`-use-listen-fd`)
//! TCP threads share duplicates of it (accept is race-safe, WouldBlock is expected) and UDP runs
//! a single thread, since a flow must stay on one socket. [`Proxy::run`] runs one event loop per
//! thread: `stream.rs` for TCP (and SCTP where the kernel has it), `udp.rs` for UDP.
//!
//! The event loop is nix's epoll, not mio: nix is already a dependency, and the forwarder needs
//! EPOLLPRI (urgent data), EPOLLRDHUP and edge triggering on raw fds that splice and MSG_OOB use
//! directly; mio would wrap the sockets in types that then have to be unwrapped again.
//!
//! Caveat: SO_REUSEPORT lets another process of the same user join the port; the status fd
//! protocol (dockerd owns the port allocation) makes that a non-issue under Docker.
//!
//! Privileges: binding the host port (root below 1024). Tests: `crates/pier/tests/proxy_*.rs`.
mod direction;
pub mod docker;
mod socket;
mod stream;
mod udp;

use crate::Protocol;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

/// What to forward, and how.
#[derive(Debug)]
pub struct Config {
    pub protocol: Protocol,
    /// The published address; port 0 picks a free one.
    pub host: SocketAddr,
    pub container: SocketAddr,
    /// A listening (TCP) or bound (UDP) socket to use instead of binding `host`.
    pub listen_fd: Option<OwnedFd>,
    /// How long a UDP flow lives without traffic.
    pub udp_idle: Duration,
    /// Event loops to run; 0 means one per core.
    pub threads: usize,
}

/// Why the forwarder could not start or stopped; each names the step and the address.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("sctp is not available in this kernel")]
    SctpUnavailable,
    #[error("failed to listen on {addr}/{protocol}: {source}")]
    Listen {
        addr: SocketAddr,
        protocol: Protocol,
        source: nix::Error,
    },
    #[error("using the passed listening socket (fd 4) for {protocol}: {source}")]
    PassedSocket {
        protocol: Protocol,
        source: nix::Error,
    },
    #[error("-use-listen-fd: fd 4 is not an open socket: {source}")]
    NoListenFd { source: std::io::Error },
    #[error("duplicating the listening socket for event loop {thread}: {source}")]
    Dup { thread: usize, source: nix::Error },
    #[error("event loop {thread}: {step}: {source}")]
    EventLoop {
        thread: usize,
        step: &'static str,
        source: nix::Error,
    },
    #[error("starting event loop thread {thread}: {source}")]
    Thread {
        thread: usize,
        source: std::io::Error,
    },
}

/// The epoll token of a loop's listening socket (connections and flows use their slot index).
const LISTENER: u64 = u64::MAX;

/// An event loop's epoll instance, already watching `listener` under [`LISTENER`],
/// level-triggered and exclusive (a listener shared by loops wakes one of them per event).
fn watch_listener(thread: usize, listener: &OwnedFd) -> Result<Epoll, ProxyError> {
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC)
        .map_err(loop_error(thread, "creating epoll"))?;
    let interest = EpollFlags::EPOLLIN | EpollFlags::EPOLLEXCLUSIVE;
    epoll
        .add(listener, EpollEvent::new(interest, LISTENER))
        .map_err(loop_error(thread, "watching the listener"))?;
    Ok(epoll)
}

/// Names a failure of event loop `thread` at `step`.
fn loop_error(thread: usize, step: &'static str) -> impl Fn(nix::Error) -> ProxyError {
    move |source| ProxyError::EventLoop {
        thread,
        step,
        source,
    }
}

/// A forwarder whose listening sockets exist; [`Proxy::run`] starts forwarding.
#[derive(Debug)]
pub struct Proxy {
    protocol: Protocol,
    container: SocketAddr,
    udp_idle: Duration,
    listeners: Vec<OwnedFd>,
}

impl Proxy {
    /// Creates (or adopts) the listening sockets; fails when the host port is taken.
    pub fn bind(config: Config) -> Result<Proxy, ProxyError> {
        let threads = match config.threads {
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => n,
        };
        let listeners = match config.listen_fd {
            Some(fd) => socket::adopt(fd, config.protocol, threads)?,
            None => socket::listen_all(config.host, config.protocol, threads)?,
        };
        Ok(Proxy {
            protocol: config.protocol,
            container: config.container,
            udp_idle: config.udp_idle,
            listeners,
        })
    }

    /// The address the first listener is bound to (the chosen port when `host` had port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        socket::local_addr(&self.listeners[0])
    }

    /// Forwards until an event loop fails; returns that loop's error.
    pub fn run(self) -> Result<(), ProxyError> {
        let mut handles = Vec::new();
        for (thread, listener) in self.listeners.into_iter().enumerate() {
            let (protocol, container, idle) = (self.protocol, self.container, self.udp_idle);
            let handle = std::thread::Builder::new()
                .name(format!("pier-proxy-{thread}"))
                .spawn(move || match protocol {
                    Protocol::Udp => udp::run(thread, listener, container, idle),
                    Protocol::Tcp | Protocol::Sctp => {
                        stream::run(thread, listener, container, protocol)
                    }
                })
                .map_err(|source| ProxyError::Thread { thread, source })?;
            handles.push(handle);
        }
        for handle in handles {
            match handle.join() {
                Ok(result) => result?,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(())
    }
}
