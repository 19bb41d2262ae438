//! `pier proxy` over TCP, black-box: a 1 MiB echo with matching checksum, half-close in both
//! directions, and an urgent byte that reaches the server as urgent. Loopback only, servers in
//! the test, every wait bounded.
mod proxy_support;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, send, MsgFlags};
use proxy_support::{checksum, free_tcp_port, noise, Proxy, WAIT};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::thread;

/// A server on 127.0.0.1 that runs `serve` on its first connection.
fn server(serve: impl FnOnce(TcpStream) + Send + 'static) -> (SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(WAIT)).unwrap();
        serve(conn);
    });
    (addr, handle)
}

/// A client connected through a proxy on 127.0.0.1:`port`.
fn client(port: u16) -> TcpStream {
    let conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
    conn.set_read_timeout(Some(WAIT)).unwrap();
    conn
}

#[test]
fn one_mib_echoes_with_matching_checksum() {
    let (addr, server) = server(|mut conn| {
        let mut data = Vec::new();
        conn.read_to_end(&mut data).unwrap();
        conn.write_all(&data).unwrap();
    });
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, addr);
    let sent = noise(1 << 20);
    let mut conn = client(port);
    conn.write_all(&sent).unwrap();
    conn.shutdown(Shutdown::Write).unwrap();
    let mut got = Vec::new();
    conn.read_to_end(&mut got).unwrap();
    assert_eq!(got.len(), sent.len());
    assert_eq!(checksum(&got), checksum(&sent));
    server.join().unwrap();
}

#[test]
fn half_close_lets_the_server_reply_after_the_client_is_done() {
    let (addr, server) = server(|mut conn| {
        let mut request = Vec::new();
        conn.read_to_end(&mut request).unwrap();
        assert_eq!(request, b"request");
        conn.write_all(b"reply after your EOF").unwrap();
    });
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, addr);
    let mut conn = client(port);
    conn.write_all(b"request").unwrap();
    conn.shutdown(Shutdown::Write).unwrap();
    let mut reply = String::new();
    conn.read_to_string(&mut reply).unwrap();
    assert_eq!(reply, "reply after your EOF");
    server.join().unwrap();
}

#[test]
fn server_half_close_reaches_the_client_which_can_still_send() {
    let (addr, server) = server(|mut conn| {
        conn.write_all(b"banner").unwrap();
        conn.shutdown(Shutdown::Write).unwrap();
        let mut rest = Vec::new();
        conn.read_to_end(&mut rest).unwrap();
        assert_eq!(rest, b"late data");
    });
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, addr);
    let mut conn = client(port);
    let mut banner = Vec::new();
    conn.read_to_end(&mut banner).unwrap();
    assert_eq!(banner, b"banner");
    conn.write_all(b"late data").unwrap();
    conn.shutdown(Shutdown::Write).unwrap();
    server.join().unwrap();
}

#[test]
fn urgent_byte_arrives_as_urgent() {
    let (addr, server) = server(|mut conn| {
        let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLPRI)];
        let timeout = PollTimeout::try_from(WAIT).unwrap();
        assert_eq!(poll(&mut fds, timeout).unwrap(), 1, "no urgent data");
        let mut urgent = [0u8];
        let n = recv(conn.as_raw_fd(), &mut urgent, MsgFlags::MSG_OOB).unwrap();
        assert_eq!(&urgent[..n], b"!");
        let mut normal = Vec::new();
        conn.read_to_end(&mut normal).unwrap();
        assert_eq!(normal, b"abcd");
    });
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, addr);
    let mut conn = client(port);
    conn.write_all(b"ab").unwrap();
    send(conn.as_raw_fd(), b"!", MsgFlags::MSG_OOB).unwrap();
    conn.write_all(b"cd").unwrap();
    conn.shutdown(Shutdown::Write).unwrap();
    server.join().unwrap();
}
