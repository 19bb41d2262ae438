//! The TCP (and SCTP) event loop: accept, connect to the container, move bytes both ways.
//!
//! Theory of operation: each connection holds the client and upstream sockets and one
//! [`Direction`] per way (`direction.rs`: recv/send through this loop's shared buffer for small
//! messages, splice for bulk). Both sockets are registered once, edge-triggered, for IN, OUT,
//! RDHUP and PRI, and never modified; an event on one side moves the way reading from it (when
//! readable) and the way writing to it (only when that way had blocked), so no syscall is spent
//! on the idle way. The connection closes when both ways are shut, or at the first hard error.
//!
//! Connecting: the upstream connect is non-blocking; its first EPOLLOUT (without EPOLLERR)
//! means connected, SO_ERROR is read only when EPOLLERR says there is one. Client events until
//! then are only recorded (urgent mark, FIN), and both ways move once connected.
//!
//! Accepting: accept4 straight to non-blocking, close-on-exec sockets, in batches, from a
//! level-triggered listener so a flood of connections cannot starve established ones; with a
//! listener shared by the loops (`-use-listen-fd`) EPOLLEXCLUSIVE wakes one loop per connection.
//!
//! Privileges: none beyond the listener's. Tests: `crates/pier/tests/proxy_tcp.rs`.
use super::direction::Direction;
use super::{loop_error, socket, watch_listener, ProxyError, LISTENER};
use crate::Protocol;
use nix::errno::Errno;
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{self as sock, sockopt};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;

/// Accepts per listener event, so a flood of connections cannot starve established ones.
const ACCEPT_BATCH: usize = 64;
/// The loop's scratch buffer: a read that fills it switches that way to splice.
const BUFFER: usize = 1 << 16;

/// A forwarded connection.
#[derive(Debug)]
struct Conn {
    client: OwnedFd,
    upstream: OwnedFd,
    connected: bool,
    /// client -> upstream
    up: Direction,
    /// upstream -> client
    down: Direction,
}

impl Conn {
    /// Moves what an event on one side (the upstream's or the client's) allows: the way
    /// reading from that side when it is readable, the way writing to it when that way was
    /// blocked and the side is writable. True when the connection is finished.
    fn pump(&mut self, upstream_side: bool, flags: EpollFlags, io: &mut Io) -> nix::Result<bool> {
        let readable = EpollFlags::EPOLLIN
            | EpollFlags::EPOLLPRI
            | EpollFlags::EPOLLRDHUP
            | EpollFlags::EPOLLHUP
            | EpollFlags::EPOLLERR;
        let writable = EpollFlags::EPOLLOUT | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR;
        let (reading, writing, near, far) = match upstream_side {
            false => (&mut self.up, &mut self.down, &self.client, &self.upstream),
            true => (&mut self.down, &mut self.up, &self.upstream, &self.client),
        };
        if flags.intersects(readable) {
            reading.pump(near, far, io.tcp, &mut io.buf)?;
        }
        if flags.intersects(writable) && writing.blocked {
            writing.pump(far, near, io.tcp, &mut io.buf)?;
        }
        Ok(self.up.shut && self.down.shut)
    }

    /// Moves both ways (once connected); true when the connection is finished.
    fn pump_all(&mut self, io: &mut Io) -> nix::Result<bool> {
        self.up.pump(&self.client, &self.upstream, io.tcp, &mut io.buf)?;
        self.down.pump(&self.upstream, &self.client, io.tcp, &mut io.buf)?;
        Ok(self.up.shut && self.down.shut)
    }

    /// Records what an event says about the side it is for, before anything moves: EPOLLPRI
    /// (an urgent mark ahead) and RDHUP/HUP/ERR (reads must go on to the end).
    fn note(&mut self, upstream_side: bool, flags: EpollFlags) {
        let reading = match upstream_side {
            false => &mut self.up,
            true => &mut self.down,
        };
        if flags.contains(EpollFlags::EPOLLPRI) {
            reading.maybe_urgent = true;
        }
        let ending = EpollFlags::EPOLLRDHUP | EpollFlags::EPOLLHUP | EpollFlags::EPOLLERR;
        if flags.intersects(ending) {
            reading.closing = true;
        }
    }
}

/// What every connection of a loop shares while it moves bytes.
#[derive(Debug)]
struct Io {
    tcp: bool,
    buf: Vec<u8>,
}

/// One event loop's state.
#[derive(Debug)]
struct Loop {
    epoll: Epoll,
    listener: OwnedFd,
    container: SocketAddr,
    protocol: Protocol,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
    io: Io,
}

/// Runs one event loop on `listener` until epoll itself fails.
pub fn run(
    thread: usize,
    listener: OwnedFd,
    container: SocketAddr,
    protocol: Protocol,
) -> Result<(), ProxyError> {
    let epoll = watch_listener(thread, &listener)?;
    let mut state = Loop {
        epoll,
        listener,
        container,
        protocol,
        conns: Vec::new(),
        free: Vec::new(),
        io: Io {
            tcp: protocol == Protocol::Tcp,
            buf: vec![0; BUFFER],
        },
    };
    let mut events = vec![EpollEvent::empty(); 256];
    loop {
        let n = match state.epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(loop_error(thread, "waiting for events")(e)),
        };
        for event in &events[..n] {
            match event.data() {
                LISTENER => state.accept_all(),
                token => state.handle(token, event.events()),
            }
        }
    }
}

impl Loop {
    fn accept_all(&mut self) {
        for _ in 0..ACCEPT_BATCH {
            match pier_sys::net::accept_nonblocking(&self.listener) {
                Ok(client) => self.open(client),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::warn!("accepting a connection: {e}");
                    return;
                }
            }
        }
    }

    fn open(&mut self, client: OwnedFd) {
        if let Err(e) = self.try_open(client) {
            log::warn!("forwarding a connection to {}: {e}", self.container);
        }
    }

    fn try_open(&mut self, client: OwnedFd) -> nix::Result<()> {
        let upstream = socket::connect(self.container, self.protocol)?;
        if self.io.tcp {
            // Request/response traffic must not wait for Nagle (Go's default, like docker-proxy).
            let _ = sock::setsockopt(&client, sockopt::TcpNoDelay, &true);
            let _ = sock::setsockopt(&upstream, sockopt::TcpNoDelay, &true);
        }
        let conn = Conn {
            client,
            upstream,
            connected: false,
            up: Direction::default(),
            down: Direction::default(),
        };
        let slot = self.free.pop().unwrap_or(self.conns.len());
        if let Err(e) = self.watch(&conn, slot) {
            if slot < self.conns.len() {
                self.free.push(slot);
            }
            return Err(e);
        }
        if slot == self.conns.len() {
            self.conns.push(Some(conn));
        } else {
            self.conns[slot] = Some(conn);
        }
        Ok(())
    }

    /// Registers both sockets of `conn`, edge-triggered, under tokens 2*slot and 2*slot+1.
    fn watch(&self, conn: &Conn, slot: usize) -> nix::Result<()> {
        let interest = EpollFlags::EPOLLIN
            | EpollFlags::EPOLLOUT
            | EpollFlags::EPOLLRDHUP
            | EpollFlags::EPOLLPRI
            | EpollFlags::EPOLLET;
        let key = slot as u64 * 2;
        self.epoll
            .add(&conn.client, EpollEvent::new(interest, key))?;
        self.epoll
            .add(&conn.upstream, EpollEvent::new(interest, key + 1))
    }

    fn handle(&mut self, token: u64, flags: EpollFlags) {
        let slot = (token / 2) as usize;
        let upstream_side = token % 2 == 1;
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        conn.note(upstream_side, flags);
        let result = if conn.connected {
            conn.pump(upstream_side, flags, &mut self.io)
        } else {
            if !upstream_side {
                return;
            }
            if let Err(e) = connect_result(&conn.upstream, flags) {
                return self.close(slot, e);
            }
            if !flags.contains(EpollFlags::EPOLLOUT) {
                return;
            }
            conn.connected = true;
            // The client's edges so far were not acted on: move both ways now.
            conn.pump_all(&mut self.io)
        };
        match result {
            Ok(false) => {}
            Ok(true) => self.close_quietly(slot),
            Err(e) => self.close(slot, e),
        }
    }

    fn close(&mut self, slot: usize, why: Errno) {
        log::debug!("closing a connection to {}: {why}", self.container);
        self.close_quietly(slot);
    }

    fn close_quietly(&mut self, slot: usize) {
        // Dropping the fds removes them from epoll.
        self.conns[slot] = None;
        self.free.push(slot);
    }
}

/// The outcome of a pending connect as an upstream event shows it: SO_ERROR is asked only
/// when the event carries EPOLLERR or EPOLLHUP.
fn connect_result(upstream: &OwnedFd, flags: EpollFlags) -> nix::Result<()> {
    if !flags.intersects(EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP) {
        return Ok(());
    }
    match sock::getsockopt(upstream, sockopt::SocketError)? {
        0 => Err(Errno::ECONNRESET),
        errno => Err(Errno::from_raw(errno)),
    }
}
