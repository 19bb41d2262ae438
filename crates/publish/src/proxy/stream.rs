//! The TCP (and SCTP) event loop: accept, connect to the container, splice both ways.
//!
//! Theory of operation: each connection holds the client and upstream sockets and one
//! [`Direction`] per way, a non-blocking pipe that bytes cross with splice(2) (socket -> pipe ->
//! socket, no user copy). Both sockets are registered edge-triggered for IN, OUT, RDHUP and PRI,
//! and an event on one side moves the way reading from it (when readable) and the way writing
//! to it (only when that way had blocked), each until the kernel says EAGAIN, so no edge is
//! lost and no syscall is spent on the idle way. A direction reads only when its pipe is empty
//! and asks for at most the pipe's capacity, so EAGAIN from a read always means "socket empty".
//!
//! States of a direction: reading -> (EOF read) -> flushing -> shut (SHUT_WR sent to the far
//! side); the connection closes when both directions are shut, or at the first hard error.
//!
//! Urgent data (TCP only): with SO_OOBINLINE off, reads and splice stop at the urgent mark
//! (EAGAIN, or 0 when a FIN is queued). After EPOLLPRI, a read that stops asks SIOCATMARK; at
//! the mark, the urgent byte is taken with recv(MSG_OOB) and one ordinary recv steps over the
//! mark into the (empty) pipe; the urgent byte is sent with MSG_OOB before that data, so the
//! peer sees it at the same place in the stream.
//!
//! Privileges: none beyond the listener's. Tests: `crates/pier/tests/proxy_tcp.rs`.
use super::{loop_error, socket, watch_listener, ProxyError, LISTENER};
use crate::Protocol;
use nix::errno::Errno;
use nix::fcntl::{splice, OFlag, SpliceFFlags};
use nix::sys::epoll::{Epoll, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{self as sock, sockopt, MsgFlags, Shutdown};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The default pipe capacity: one read never asks for more than an empty pipe holds.
const CHUNK: usize = 1 << 16;
/// Accepts per listener event, so a flood of connections cannot starve established ones.
const ACCEPT_BATCH: usize = 64;

/// Why a read from the socket into the pipe moved nothing.
#[derive(Debug, Clone, Copy)]
enum Stop {
    /// splice returned 0: end of stream, unless at the urgent mark
    Zero,
    /// splice returned EAGAIN: nothing to read, unless at the urgent mark
    Again,
}

/// One way of a connection: its pipe and where it stands.
#[derive(Debug)]
struct Direction {
    rd: OwnedFd,
    wr: OwnedFd,
    /// Bytes in the pipe not yet written out.
    pending: usize,
    /// An urgent byte read at the mark, to send before anything now in the pipe.
    urgent: Option<u8>,
    eof: bool,
    shut: bool,
    /// The last pump stopped because the far side could not take more (wait for EPOLLOUT).
    blocked: bool,
    /// EPOLLPRI was seen on the source and its mark not yet passed: reads that stop early
    /// must ask SIOCATMARK (only then, to keep that syscall off the common path).
    maybe_urgent: bool,
}

impl Direction {
    fn new() -> nix::Result<Self> {
        let (rd, wr) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
        Ok(Direction {
            rd,
            wr,
            pending: 0,
            urgent: None,
            eof: false,
            shut: false,
            blocked: false,
            maybe_urgent: false,
        })
    }

    /// Moves bytes from `from` to `to` until either blocks; shuts `to` after EOF and the flush.
    fn pump(&mut self, from: &OwnedFd, to: &OwnedFd, tcp: bool) -> nix::Result<()> {
        self.blocked = false;
        loop {
            if !self.flush(to)? {
                self.blocked = true;
                return Ok(());
            }
            if self.eof {
                return self.shut_down(to);
            }
            let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
            let stopped = match splice(from, None, &self.wr, None, CHUNK, flags) {
                Ok(0) => Stop::Zero,
                Ok(n) => {
                    self.pending = n;
                    continue;
                }
                Err(Errno::EAGAIN) => Stop::Again,
                Err(e) => return Err(e),
            };
            // splice stops at the urgent mark, reporting EAGAIN, or 0 once a FIN is queued
            // behind the mark; neither means what it says there.
            let at_mark =
                tcp && self.maybe_urgent && pier_sys::net::at_mark(from.as_fd()).unwrap_or(false);
            match (at_mark, stopped) {
                (true, _) if self.step_over_mark(from)? => {}
                (true, _) | (false, Stop::Again) => return Ok(()),
                (false, Stop::Zero) => self.eof = true,
            }
        }
    }

    /// Sends the pending urgent byte, then the pipe; false when `to` cannot take more.
    fn flush(&mut self, to: &OwnedFd) -> nix::Result<bool> {
        if let Some(byte) = self.urgent {
            match sock::send(to.as_raw_fd(), &[byte], MsgFlags::MSG_OOB) {
                Ok(_) => self.urgent = None,
                Err(Errno::EAGAIN) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        let flags = SpliceFFlags::SPLICE_F_NONBLOCK | SpliceFFlags::SPLICE_F_MOVE;
        while self.pending > 0 {
            match splice(&self.rd, None, to, None, self.pending, flags) {
                Ok(n) => self.pending -= n,
                Err(Errno::EAGAIN) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// At the urgent mark: takes the urgent byte and reads past the mark into the empty pipe.
    /// Returns whether there is anything to send now.
    fn step_over_mark(&mut self, from: &OwnedFd) -> nix::Result<bool> {
        self.maybe_urgent = false;
        let mut one = [0u8];
        match sock::recv(from.as_raw_fd(), &mut one, MsgFlags::MSG_OOB) {
            Ok(1) => self.urgent = Some(one[0]),
            Ok(_) | Err(Errno::EINVAL | Errno::EAGAIN) => {}
            Err(e) => return Err(e),
        }
        let mut buf = [0u8; 16384];
        match sock::recv(from.as_raw_fd(), &mut buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => self.eof = true,
            // An empty pipe holds CHUNK bytes, so this write is whole.
            Ok(n) => self.pending = nix::unistd::write(&self.wr, &buf[..n])?,
            Err(Errno::EAGAIN) => return Ok(self.urgent.is_some()),
            Err(e) => return Err(e),
        }
        Ok(true)
    }

    fn shut_down(&mut self, to: &OwnedFd) -> nix::Result<()> {
        if !self.shut {
            match sock::shutdown(to.as_raw_fd(), Shutdown::Write) {
                Ok(()) | Err(Errno::ENOTCONN) => self.shut = true,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

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
    fn pump(&mut self, upstream_side: bool, flags: EpollFlags, tcp: bool) -> nix::Result<bool> {
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
            reading.pump(near, far, tcp)?;
        }
        if flags.intersects(writable) && writing.blocked {
            writing.pump(far, near, tcp)?;
        }
        Ok(self.up.shut && self.down.shut)
    }

    /// Moves both ways (once connected); true when the connection is finished.
    fn pump_all(&mut self, tcp: bool) -> nix::Result<bool> {
        self.up.pump(&self.client, &self.upstream, tcp)?;
        self.down.pump(&self.upstream, &self.client, tcp)?;
        Ok(self.up.shut && self.down.shut)
    }
}

/// One event loop's state.
#[derive(Debug)]
struct Loop {
    epoll: Epoll,
    listener: TcpListener,
    container: SocketAddr,
    protocol: Protocol,
    conns: Vec<Option<Conn>>,
    free: Vec<usize>,
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
        listener: TcpListener::from(listener),
        container,
        protocol,
        conns: Vec::new(),
        free: Vec::new(),
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
            match self.listener.accept() {
                Ok((client, _)) => self.open(client),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return,
                Err(e) => {
                    log::warn!("accepting a connection: {e}");
                    return;
                }
            }
        }
    }

    fn open(&mut self, client: TcpStream) {
        if let Err(e) = self.try_open(client) {
            log::warn!("forwarding a connection to {}: {e}", self.container);
        }
    }

    fn try_open(&mut self, client: TcpStream) -> nix::Result<()> {
        client.set_nonblocking(true).map_err(io_errno)?;
        let upstream = socket::connect(self.container, self.protocol)?;
        if self.protocol == Protocol::Tcp {
            // Request/response traffic must not wait for Nagle (Go's default, like docker-proxy).
            let _ = client.set_nodelay(true);
            let _ = sock::setsockopt(&upstream, sockopt::TcpNoDelay, &true);
        }
        let conn = Conn {
            client: OwnedFd::from(client),
            upstream,
            connected: false,
            up: Direction::new()?,
            down: Direction::new()?,
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
        let tcp = self.protocol == Protocol::Tcp;
        let Some(conn) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        if flags.contains(EpollFlags::EPOLLPRI) {
            // Recorded even before the upstream connects, when the edge is not acted on yet.
            match token % 2 {
                0 => conn.up.maybe_urgent = true,
                _ => conn.down.maybe_urgent = true,
            }
        }
        let result = if conn.connected {
            conn.pump(token % 2 == 1, flags, tcp)
        } else {
            let upstream_ready =
                token % 2 == 1 && flags.intersects(EpollFlags::EPOLLOUT | EpollFlags::EPOLLERR);
            if !upstream_ready {
                return;
            }
            match sock::getsockopt(&conn.upstream, sockopt::SocketError) {
                Ok(0) => conn.connected = true,
                Ok(errno) => return self.close(slot, Errno::from_raw(errno)),
                Err(e) => return self.close(slot, e),
            }
            // The client's edges so far were not acted on: move both ways now.
            conn.pump_all(tcp)
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

fn io_errno(e: std::io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}
