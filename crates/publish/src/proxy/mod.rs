//! The userspace forwarder: one published (host address, port, protocol) to one container
//! address, behind `pier proxy` (a drop-in for Docker's `userland-proxy-path`).
//!
//! Why hand-written: this loop is the product. Seeds 000 and 001 show docker-proxy (a goroutine
//! and a 32 KiB user buffer per direction, two copies per byte) costing more CPU than the
//! application and dropping TCP urgent data; a generic async runtime would bring the same
//! wake-up and copy costs back. Here a small message costs one recv and one send (through the
//! event loop's buffer, with no EAGAIN read after it), bulk moves socket -> pipe -> socket with
//! splice(2) without entering user memory, and a connection costs two fds (four more once it
//! has moved bulk) and no thread. What remains per request is the kernel's: each send runs the
//! receiver's TCP input and wake-up on the sender's CPU (loopback and veth), and each message
//! wakes the loop; `examples/proxy_cpu.rs` measures it against docker-proxy, nginx and haproxy
//! (figures in the crate's README).
//!
//! Theory of operation: [`Proxy::bind`] makes the listening sockets first, so that a taken port
//! fails before anything runs (the caller reports that on docker-proxy's status fd). Without a
//! passed listener it binds one socket per core with SO_REUSEPORT. For TCP (and SCTP) each
//! socket is tied to one CPU with SO_INCOMING_CPU and its loop is pinned there, so the kernel
//! gives a connection to the loop on the CPU that processed its SYN: the client's own CPU for a
//! local client, the receiving CPU for a remote one. Then the client's packets wake a loop on
//! the CPU they are processed on (no inter-processor interrupt) and one loop serves every
//! connection of a busy CPU, more of them per wake-up. Measured (`pier bench net`, same runs):
//! 17–26% less CPU per request than hashing connections over unpinned loops at -c4 and -c8.
//! UDP keeps the kernel's hash of client 4-tuples, since a flow must stay on one socket
//! whatever CPU its next datagram lands on. With a passed one (`-use-listen-fd`)
//! TCP threads share duplicates of it (accept is race-safe, WouldBlock is expected, and
//! EPOLLEXCLUSIVE wakes one loop per connection) and UDP runs
//! a single thread, since a flow must stay on one socket. [`Proxy::run`] runs one event loop per
//! thread: `stream.rs` for TCP (and SCTP where the kernel has it), with `direction.rs` moving
//! each way of a connection, and `udp.rs` for UDP.
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
use std::os::fd::{AsFd, OwnedFd};
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

/// The CPUs this process may run on, in order (empty when the kernel will not say).
fn allowed_cpus() -> Vec<usize> {
    use nix::sched::{sched_getaffinity, CpuSet};
    let Ok(set) = sched_getaffinity(nix::unistd::Pid::from_raw(0)) else {
        return Vec::new();
    };
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// Ties each TCP/SCTP listener of a SO_REUSEPORT group to one of `cpus` (SO_INCOMING_CPU), so a
/// connection goes to the loop running on the CPU that processed its SYN; returns each loop's
/// CPU. UDP keeps the kernel's hash: a flow must stay on one socket whatever CPU its next
/// datagram lands on.
fn steer(listeners: &[OwnedFd], protocol: Protocol, cpus: &[usize]) -> Vec<Option<usize>> {
    let none = vec![None; listeners.len()];
    if protocol == Protocol::Udp || listeners.len() < 2 || listeners.len() > cpus.len() {
        return none;
    }
    let mut out = Vec::with_capacity(listeners.len());
    for (i, listener) in listeners.iter().enumerate() {
        let cpu = cpus[i];
        if let Err(e) = pier_sys::net::set_incoming_cpu(listener.as_fd(), cpu) {
            log::debug!("SO_INCOMING_CPU {cpu}: {e}; connections spread by hash");
            return none;
        }
        out.push(Some(cpu));
    }
    out
}

/// Pins the calling thread (event loop `thread`) to `cpu`. A refusal (the CPU left the
/// process's cpuset since) costs only locality: the loop runs unpinned and says so.
fn pin_to(thread: usize, cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    let pinned = set
        .set(cpu)
        .and_then(|()| nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set));
    if let Err(e) = pinned {
        log::warn!("event loop {thread}: cannot pin to CPU {cpu}: {e}; it runs unpinned");
    }
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
    /// The CPU each listener's loop runs on, when connections are steered by CPU.
    cpus: Vec<Option<usize>>,
}

impl Proxy {
    /// Creates (or adopts) the listening sockets; fails when the host port is taken.
    pub fn bind(config: Config) -> Result<Proxy, ProxyError> {
        let allowed = allowed_cpus();
        let threads = match config.threads {
            0 => allowed.len().max(1),
            n => n,
        };
        let (listeners, cpus) = match config.listen_fd {
            Some(fd) => {
                let listeners = socket::adopt(fd, config.protocol, threads)?;
                let cpus = vec![None; listeners.len()];
                (listeners, cpus)
            }
            None => {
                let listeners = socket::listen_all(config.host, config.protocol, threads)?;
                let cpus = steer(&listeners, config.protocol, &allowed);
                (listeners, cpus)
            }
        };
        Ok(Proxy {
            protocol: config.protocol,
            container: config.container,
            udp_idle: config.udp_idle,
            listeners,
            cpus,
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
            let cpu = self.cpus[thread];
            let handle = std::thread::Builder::new()
                .name(format!("pier-proxy-{thread}"))
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        pin_to(thread, cpu);
                    }
                    match protocol {
                        Protocol::Udp => udp::run(thread, listener, container, idle),
                        Protocol::Tcp | Protocol::Sctp => {
                            stream::run(thread, listener, container, protocol)
                        }
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
