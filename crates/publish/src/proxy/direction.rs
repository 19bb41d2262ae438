//! One way of a forwarded stream connection: read from one socket, write to the other, with
//! the fewest syscalls the kernel's edge-triggered epoll allows.
//!
//! Theory of operation: small messages (the request/response traffic the proxy mostly sees)
//! go recv -> send through the event loop's shared buffer, two syscalls and no per-connection
//! memory. A read that fills that buffer means bulk: the way then splices socket -> pipe ->
//! socket (no user copy) until the source is empty, and drops back to recv/send for the next
//! burst; the pipe is made on the first bulk burst and kept. Bytes the far side cannot take
//! yet are held in a per-way buffer (allocated only then) and the way waits for EPOLLOUT.
//!
//! Edges: epoll reports a socket again whenever new data, a FIN or an error arrives after the
//! event was taken, so a recv that returns less than it asked for proves the socket was empty
//! and the way stops there, without the EAGAIN read. Two things make a short read stop early
//! with more to come, and both were already signalled when the event was taken: a FIN
//! (EPOLLRDHUP: `closing`) and the urgent mark (EPOLLPRI: `maybe_urgent`); with either, the way
//! reads on to EAGAIN or end of stream. splice stops early when the pipe's slots fill, so bulk
//! always reads to EAGAIN.
//!
//! States: reading -> (end of stream read) -> flushing -> shut (SHUT_WR sent to the far side).
//!
//! Urgent data (TCP only): with SO_OOBINLINE off, reads stop in front of the urgent mark (recv
//! then steps over it, splice returns EAGAIN, or 0 with a FIN queued). After EPOLLPRI the way
//! asks SIOCATMARK before each read; at the mark it takes the urgent byte with recv(MSG_OOB)
//! and the data after the mark with one recv, and sends the byte with MSG_OOB before that data,
//! so the peer sees it at the same place in the stream. A splice that returns 0 is checked the
//! same way before it counts as end of stream.
//!
//! Privileges: none. Tests: `crates/pier/tests/proxy_tcp.rs` (black-box).
use nix::errno::Errno;
use nix::fcntl::{splice, OFlag, SpliceFFlags};
use nix::sys::socket::{self as sock, MsgFlags, Shutdown};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The default pipe capacity: one splice never asks for more than an empty pipe holds.
const CHUNK: usize = 1 << 16;
const SPLICE: SpliceFFlags = SpliceFFlags::SPLICE_F_NONBLOCK.union(SpliceFFlags::SPLICE_F_MOVE);
const SEND: MsgFlags = MsgFlags::MSG_NOSIGNAL.union(MsgFlags::MSG_DONTWAIT);

/// What one read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Read {
    /// Bytes moved and more may follow.
    More,
    /// A short recv: the source is empty until its next edge.
    Drained,
    /// EAGAIN: the source is empty (or at the urgent mark).
    Again,
    /// 0: end of stream (or, from splice, possibly the urgent mark).
    Zero,
    /// The far side took only part (now held): wait for EPOLLOUT.
    Blocked,
}

/// The pipe of a way that has moved bulk; `pending` bytes sit in it.
#[derive(Debug)]
struct Pipe {
    rd: OwnedFd,
    wr: OwnedFd,
    pending: usize,
}

/// One way of a connection and where it stands.
#[derive(Debug, Default)]
pub struct Direction {
    /// Bytes read but not yet taken by the far side; `held_sent` of them are sent.
    held: Vec<u8>,
    held_sent: usize,
    pipe: Option<Pipe>,
    /// The current burst moves through the pipe.
    bulk: bool,
    /// An urgent byte read at the mark, to send before the bytes read after it.
    urgent: Option<u8>,
    eof: bool,
    pub shut: bool,
    /// The last pump stopped because the far side could not take more (wait for EPOLLOUT).
    pub blocked: bool,
    /// EPOLLPRI was seen on the source and its mark not yet passed.
    pub maybe_urgent: bool,
    /// EPOLLRDHUP, HUP or ERR was seen on the source: read on to EAGAIN or end of stream.
    pub closing: bool,
}

impl Direction {
    /// Moves bytes from `from` to `to` until either blocks; shuts `to` after EOF and the flush.
    /// `buf` is the event loop's scratch buffer; its length is the bulk threshold.
    pub fn pump(
        &mut self,
        from: &OwnedFd,
        to: &OwnedFd,
        tcp: bool,
        buf: &mut [u8],
    ) -> nix::Result<()> {
        self.blocked = false;
        loop {
            if !self.flush(to)? {
                self.blocked = true;
                return Ok(());
            }
            if self.eof {
                return self.shut_down(to);
            }
            let at_mark = |from: &OwnedFd| tcp && pier_sys::net::at_mark(from.as_fd()).unwrap_or(false);
            if self.maybe_urgent && at_mark(from) {
                match self.step_over_mark(from, buf)? {
                    true => continue,
                    false => return Ok(()),
                }
            }
            match self.read(from, to, buf)? {
                Read::More => {}
                Read::Drained => return Ok(()),
                Read::Again => {
                    self.bulk = false;
                    return Ok(());
                }
                Read::Blocked => {
                    self.blocked = true;
                    return Ok(());
                }
                Read::Zero if at_mark(from) => self.maybe_urgent = true,
                Read::Zero => self.eof = true,
            }
        }
    }

    /// One read from `from`: spliced into the pipe during bulk, else received into `buf` and
    /// sent on to `to` at once (what `to` does not take is held).
    fn read(&mut self, from: &OwnedFd, to: &OwnedFd, buf: &mut [u8]) -> nix::Result<Read> {
        if self.bulk {
            let pipe = self.pipe.as_mut().expect("bulk ways have a pipe");
            return match splice(from, None, &pipe.wr, None, CHUNK, SPLICE) {
                Ok(0) => Ok(Read::Zero),
                Ok(n) => {
                    pipe.pending = n;
                    Ok(Read::More)
                }
                Err(Errno::EAGAIN) => Ok(Read::Again),
                Err(e) => Err(e),
            };
        }
        let n = match sock::recv(from.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => return Ok(Read::Zero),
            Ok(n) => n,
            Err(Errno::EAGAIN) => return Ok(Read::Again),
            Err(e) => return Err(e),
        };
        let sent = send_some(to, &buf[..n])?;
        if n == buf.len() {
            self.start_bulk()?;
        }
        if sent < n {
            self.held.extend_from_slice(&buf[sent..n]);
            return Ok(Read::Blocked);
        }
        match n < buf.len() && !self.closing && !self.maybe_urgent {
            true => Ok(Read::Drained),
            false => Ok(Read::More),
        }
    }

    fn start_bulk(&mut self) -> nix::Result<()> {
        if self.pipe.is_none() {
            let (rd, wr) = nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
            self.pipe = Some(Pipe { rd, wr, pending: 0 });
        }
        self.bulk = true;
        Ok(())
    }

    /// Sends the urgent byte, the held bytes, then the pipe; false when `to` cannot take more.
    fn flush(&mut self, to: &OwnedFd) -> nix::Result<bool> {
        if let Some(byte) = self.urgent {
            match sock::send(to.as_raw_fd(), &[byte], MsgFlags::MSG_OOB | SEND) {
                Ok(_) => self.urgent = None,
                Err(Errno::EAGAIN) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        if self.held_sent < self.held.len() {
            self.held_sent += send_some(to, &self.held[self.held_sent..])?;
            if self.held_sent < self.held.len() {
                return Ok(false);
            }
            // Give the memory back: holding is the exception.
            self.held = Vec::new();
            self.held_sent = 0;
        }
        let Some(pipe) = self.pipe.as_mut() else {
            return Ok(true);
        };
        while pipe.pending > 0 {
            match splice(&pipe.rd, None, to, None, pipe.pending, SPLICE) {
                Ok(n) => pipe.pending -= n,
                Err(Errno::EAGAIN) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// At the urgent mark: takes the urgent byte and the data after the mark (the way has
    /// nothing else to send). Returns whether there is anything to send now.
    fn step_over_mark(&mut self, from: &OwnedFd, buf: &mut [u8]) -> nix::Result<bool> {
        self.maybe_urgent = false;
        let mut one = [0u8];
        match sock::recv(from.as_raw_fd(), &mut one, MsgFlags::MSG_OOB) {
            Ok(1) => self.urgent = Some(one[0]),
            Ok(_) | Err(Errno::EINVAL | Errno::EAGAIN) => {}
            Err(e) => return Err(e),
        }
        match sock::recv(from.as_raw_fd(), buf, MsgFlags::MSG_DONTWAIT) {
            Ok(0) => self.eof = true,
            Ok(n) => self.held.extend_from_slice(&buf[..n]),
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

/// Sends what `to` takes of `data` now (0 on EAGAIN).
fn send_some(to: &OwnedFd, data: &[u8]) -> nix::Result<usize> {
    match sock::send(to.as_raw_fd(), data, SEND) {
        Ok(n) => Ok(n),
        Err(Errno::EAGAIN) => Ok(0),
        Err(e) => Err(e),
    }
}
