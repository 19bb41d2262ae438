//! The UDP event loop: one flow per client address, replies from the published socket.
//!
//! Theory of operation: a datagram from a new client address opens a flow, a socket connected
//! to the container (so the kernel filters replies by source and routes them without a lookup
//! here); the datagram and later ones go out on it. Replies read from a flow's socket are sent
//! to its client from the listening socket, so the client sees them come from the address and
//! port it sent to. A flow without traffic either way for `idle` (docker-proxy: 90 s) is
//! closed; the loop wakes at least once a second to sweep. ICMP errors from the container
//! (ECONNREFUSED on a flow's socket) drop that datagram, not the flow, as docker-proxy does.
//!
//! Caveat: on a wildcard listener the reply's source address is the kernel's route choice, as
//! in docker-proxy; a specific `-host-ip` pins it.
//!
//! Privileges: none beyond the listener's. Tests: `crates/pier/tests/proxy_udp.rs`.
use super::{loop_error, socket, watch_listener, ProxyError, LISTENER};
use crate::Protocol;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// The longest wait between idle sweeps.
const SWEEP_MS: u16 = 1000;

/// One client's flow.
#[derive(Debug)]
struct Flow {
    client: SocketAddr,
    upstream: UdpSocket,
    last: Instant,
}

/// One event loop's state.
#[derive(Debug)]
struct Loop {
    epoll: Epoll,
    listener: UdpSocket,
    container: SocketAddr,
    idle: Duration,
    by_client: HashMap<SocketAddr, usize>,
    flows: Vec<Option<Flow>>,
    free: Vec<usize>,
    buf: Vec<u8>,
}

/// Runs one UDP event loop on `listener` until epoll itself fails.
pub fn run(
    thread: usize,
    listener: OwnedFd,
    container: SocketAddr,
    idle: Duration,
) -> Result<(), ProxyError> {
    let epoll = watch_listener(thread, &listener)?;
    let mut state = Loop {
        epoll,
        listener: UdpSocket::from(listener),
        container,
        idle,
        by_client: HashMap::new(),
        flows: Vec::new(),
        free: Vec::new(),
        buf: vec![0; 65536],
    };
    let mut events = vec![EpollEvent::empty(); 256];
    let mut swept = Instant::now();
    loop {
        let n = match state.epoll.wait(&mut events, EpollTimeout::from(SWEEP_MS)) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(loop_error(thread, "waiting for events")(e)),
        };
        for event in &events[..n] {
            match event.data() {
                LISTENER => state.forward_requests(),
                slot => state.forward_replies(slot as usize),
            }
        }
        if swept.elapsed() >= Duration::from_millis(SWEEP_MS.into()) {
            state.sweep();
            swept = Instant::now();
        }
    }
}

impl Loop {
    /// Forwards every queued client datagram to its flow (opening flows as needed).
    fn forward_requests(&mut self) {
        loop {
            let (len, client) = match self.listener.recv_from(&mut self.buf) {
                Ok(got) => got,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::debug!("receiving on the published socket: {e}");
                    return;
                }
            };
            let Some(slot) = self.flow_for(client) else {
                continue;
            };
            if let Some(flow) = self.flows[slot].as_mut() {
                flow.last = Instant::now();
                if let Err(e) = flow.upstream.send(&self.buf[..len]) {
                    log::debug!("sending to {} for {client}: {e}", self.container);
                }
            }
        }
    }

    /// The flow of `client`, opened when it has none.
    fn flow_for(&mut self, client: SocketAddr) -> Option<usize> {
        if let Some(&slot) = self.by_client.get(&client) {
            return Some(slot);
        }
        match self.open(client) {
            Ok(slot) => Some(slot),
            Err(e) => {
                log::warn!("opening a flow from {client} to {}: {e}", self.container);
                None
            }
        }
    }

    fn open(&mut self, client: SocketAddr) -> nix::Result<usize> {
        let upstream = UdpSocket::from(socket::new_socket(self.container, Protocol::Udp)?);
        upstream
            .connect(self.container)
            .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)))?;
        let slot = self.free.pop().unwrap_or(self.flows.len());
        if let Err(e) = self
            .epoll
            .add(&upstream, EpollEvent::new(EpollFlags::EPOLLIN, slot as u64))
        {
            if slot < self.flows.len() {
                self.free.push(slot);
            }
            return Err(e);
        }
        let flow = Flow {
            client,
            upstream,
            last: Instant::now(),
        };
        if slot == self.flows.len() {
            self.flows.push(Some(flow));
        } else {
            self.flows[slot] = Some(flow);
        }
        self.by_client.insert(client, slot);
        Ok(slot)
    }

    /// Sends every queued reply of flow `slot` to its client from the published socket.
    fn forward_replies(&mut self, slot: usize) {
        let Some(flow) = self.flows.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        loop {
            match flow.upstream.recv(&mut self.buf) {
                Ok(len) => {
                    flow.last = Instant::now();
                    if let Err(e) = self.listener.send_to(&self.buf[..len], flow.client) {
                        log::debug!("replying to {}: {e}", flow.client);
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => log::debug!("receiving from {}: {e}", self.container),
            }
        }
    }

    /// Closes the flows idle for longer than `idle`.
    fn sweep(&mut self) {
        let idle = self.idle;
        for slot in 0..self.flows.len() {
            let expired = self.flows[slot]
                .as_ref()
                .is_some_and(|f| f.last.elapsed() >= idle);
            if let Some(flow) = expired.then(|| self.flows[slot].take()).flatten() {
                self.by_client.remove(&flow.client);
                self.free.push(slot);
            }
        }
    }
}
