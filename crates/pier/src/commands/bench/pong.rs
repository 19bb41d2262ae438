//! `pier bench pong` (hidden): the HTTP server `pier bench net` measures through every path. It
//! answers every request with `pong`, keeps connections alive, and is cheap enough that the path
//! and not the server is the bottleneck (seed 000's Go server plays this part there).
//!
//! Theory of operation: one thread per CPU the process may run on (its affinity, so a cpuset
//! given by `taskset` or the container's `--cpuset-cpus` sizes it), each with its own listening
//! socket on the same port (SO_REUSEPORT: the kernel spreads connections over the threads with no
//! lock and no hand-off) and its own epoll set. A connection belongs to the thread that accepted
//! it. A request is everything up to the blank line ending its headers (wrk and pgbench-free
//! HTTP clients send no bodies on GET); every complete request gets one fixed response, so
//! pipelined requests are answered in order. The socket is IPv6 with V6ONLY off, so one listener
//! serves both 127.0.0.1 and ::1; on a host without IPv6 it falls back to IPv4.
//!
//! Privileges: none. Exercised by tests/bench_net.rs through `pier bench net`.
use anyhow::Context;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::socket::{
    bind, listen, setsockopt, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType,
    SockaddrIn, SockaddrIn6,
};
use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The response to every request.
const PONG: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\npong";

/// Flags of `pier bench pong`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// TCP port to listen on (all addresses, IPv4 and IPv6)
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Server threads (default: one per CPU this process may run on)
    #[arg(long)]
    threads: Option<usize>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let listeners = (0..threads.max(1))
        .map(|_| listener(args.port))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let handles: Vec<_> = listeners
        .into_iter()
        .map(|l| std::thread::spawn(move || serve(l)))
        .collect();
    for handle in handles {
        match handle.join() {
            Ok(result) => result?,
            Err(_) => anyhow::bail!("a pong server thread panicked"),
        }
    }
    Ok(0)
}

/// A non-blocking listening socket on `port` with SO_REUSEPORT: dual-stack IPv6, else IPv4.
fn listener(port: u16) -> anyhow::Result<TcpListener> {
    let flags = SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK;
    let six = socket(AddressFamily::Inet6, SockType::Stream, flags, None).and_then(|fd| {
        setsockopt(&fd, sockopt::Ipv6V6Only, &false)?;
        prepare(&fd)?;
        bind(
            fd.as_raw_fd(),
            &SockaddrIn6::from(SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, port, 0, 0)),
        )?;
        Ok(fd)
    });
    let fd = match six {
        Ok(fd) => fd,
        Err(_) => {
            let fd = socket(AddressFamily::Inet, SockType::Stream, flags, None)
                .context("socket(AF_INET) for the pong server")?;
            prepare(&fd).context("setsockopt SO_REUSEADDR/SO_REUSEPORT")?;
            bind(
                fd.as_raw_fd(),
                &SockaddrIn::from(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, port)),
            )
            .with_context(|| format!("binding the pong server to port {port}"))?;
            fd
        }
    };
    listen(&fd, Backlog::new(1024).unwrap_or(Backlog::MAXCONN))
        .with_context(|| format!("listen on port {port}"))?;
    Ok(TcpListener::from(fd))
}

fn prepare(fd: &OwnedFd) -> nix::Result<()> {
    setsockopt(fd, sockopt::ReuseAddr, &true)?;
    setsockopt(fd, sockopt::ReusePort, &true)
}

/// One thread's event loop: accept on `listener`, answer on every connection it accepted.
fn serve(listener: TcpListener) -> anyhow::Result<()> {
    let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).context("epoll_create1")?;
    let key = |fd: &dyn AsRawFd| fd.as_raw_fd() as u64;
    epoll
        .add(
            listener.as_fd(),
            EpollEvent::new(EpollFlags::EPOLLIN, key(&listener)),
        )
        .context("adding the listener to epoll")?;
    let mut connections: HashMap<u64, Connection> = HashMap::new();
    let mut events = vec![EpollEvent::empty(); 256];
    loop {
        let n = match epoll.wait(&mut events, EpollTimeout::NONE) {
            Ok(n) => n,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("epoll_wait"),
        };
        for event in &events[..n] {
            if event.data() == key(&listener) {
                accept_all(&listener, &epoll, &mut connections);
            } else if let Some(conn) = connections.get_mut(&event.data()) {
                if !conn.answer() {
                    let _ = epoll.delete(conn.stream.as_fd());
                    connections.remove(&event.data());
                }
            }
        }
    }
}

fn accept_all(listener: &TcpListener, epoll: &Epoll, connections: &mut HashMap<u64, Connection>) {
    while let Ok((stream, _)) = listener.accept() {
        if stream.set_nonblocking(true).is_err() {
            continue;
        }
        let _ = stream.set_nodelay(true);
        let key = stream.as_raw_fd() as u64;
        if epoll
            .add(stream.as_fd(), EpollEvent::new(EpollFlags::EPOLLIN, key))
            .is_ok()
        {
            connections.insert(key, Connection::new(stream));
        }
    }
}

/// A keep-alive connection and the part of a request received so far.
#[derive(Debug)]
struct Connection {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Connection {
    fn new(stream: TcpStream) -> Connection {
        Connection {
            stream,
            pending: Vec::new(),
        }
    }

    /// Reads what arrived and answers every complete request; false when the connection is done.
    fn answer(&mut self) -> bool {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return false,
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
        let requests = complete_requests(&mut self.pending);
        let reply = PONG.repeat(requests);
        write_all(&mut self.stream, &reply)
    }
}

/// Removes the complete requests (header blocks ending in a blank line) from the front of
/// `pending`; returns how many there were.
fn complete_requests(pending: &mut Vec<u8>) -> usize {
    let mut count = 0;
    let mut consumed = 0;
    while let Some(end) = pending[consumed..]
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
    {
        consumed += end + 4;
        count += 1;
    }
    pending.drain(..consumed);
    count
}

/// Writes all of `bytes` on a non-blocking socket, waiting for room when the buffer is full.
fn write_all(stream: &mut TcpStream, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                let mut fds = [nix::poll::PollFd::new(
                    stream.as_fd(),
                    nix::poll::PollFlags::POLLOUT,
                )];
                if nix::poll::poll(&mut fds, nix::poll::PollTimeout::NONE).is_err() {
                    return false;
                }
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pipelined_requests_are_counted_and_a_partial_one_kept() {
        let mut pending = b"GET / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\n\r\nGET /".to_vec();
        assert_eq!(complete_requests(&mut pending), 2);
        assert_eq!(pending, b"GET /");
        pending.extend_from_slice(b" HTTP/1.1\r\n\r\n");
        assert_eq!(complete_requests(&mut pending), 1);
        assert!(pending.is_empty());
    }

    #[test]
    fn server_answers_pong_on_a_kept_alive_connection() {
        let probe = TcpListener::bind("127.0.0.1:0").expect("bind probe");
        let port = probe.local_addr().expect("addr").port();
        drop(probe);
        let server = listener(port).expect("pong listener");
        std::thread::spawn(move || serve(server));
        let mut client = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        for _ in 0..2 {
            client
                .write_all(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
                .expect("send");
            let mut reply = vec![0u8; PONG.len()];
            client.read_exact(&mut reply).expect("reply");
            assert_eq!(reply, PONG);
        }
    }
}
