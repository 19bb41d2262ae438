//! `pier proxy` over UDP, black-box: two clients at once each get their own flow and their
//! replies from the published address. Loopback only, the server in the test, waits bounded.
mod proxy_support;

use proxy_support::{free_udp_port, Proxy, WAIT};
use std::collections::HashSet;
use std::net::{SocketAddr, UdpSocket};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

const ROUNDS: usize = 20;

/// An echo server that reports each datagram's source; it stops on "stop" or `WAIT` of silence.
fn echo_server() -> (
    SocketAddr,
    mpsc::Receiver<SocketAddr>,
    thread::JoinHandle<()>,
) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(WAIT)).unwrap();
    let addr = sock.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    let handle = thread::spawn(move || {
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            if &buf[..n] == b"stop" {
                return;
            }
            tx.send(from).unwrap();
            sock.send_to(&buf[..n], from).unwrap();
        }
    });
    (addr, rx, handle)
}

/// Sends ROUNDS tagged datagrams to `published` and checks each echo and its source.
fn client(tag: &'static str, published: SocketAddr) {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut buf = [0u8; 2048];
    for round in 0..ROUNDS {
        let message = format!("{tag} {round}");
        let reply = (0..10).find_map(|_| {
            sock.send_to(message.as_bytes(), published).unwrap();
            sock.recv_from(&mut buf).ok()
        });
        let (n, from) = reply.unwrap_or_else(|| panic!("no reply to {message:?}"));
        assert_eq!(&buf[..n], message.as_bytes());
        assert_eq!(
            from, published,
            "the reply does not come from the published address"
        );
    }
}

#[test]
fn two_concurrent_clients_get_replies_from_the_published_address() {
    let (container, sources, server) = echo_server();
    let port = free_udp_port();
    let proxy = Proxy::ready("udp", port, container);
    let published: SocketAddr = ([127, 0, 0, 1], port).into();
    let a = thread::spawn(move || client("a", published));
    let b = thread::spawn(move || client("b", published));
    a.join().unwrap();
    b.join().unwrap();
    drop(proxy);
    let seen: HashSet<SocketAddr> = sources.try_iter().collect();
    assert_eq!(seen.len(), 2, "one flow per client expected, saw {seen:?}");
    assert!(!seen.iter().any(|s| s.port() == port));
    let stopper = UdpSocket::bind("127.0.0.1:0").unwrap();
    stopper.send_to(b"stop", container).unwrap();
    server.join().unwrap();
}

#[test]
fn idle_flow_is_closed_and_the_next_datagram_opens_a_new_one() {
    let (container, sources, server) = echo_server();
    let port = free_udp_port().to_string();
    let mut proxy = Proxy::spawn(&[
        "-proto",
        "udp",
        "-host-ip",
        "127.0.0.1",
        "-host-port",
        &port,
        "-container-ip",
        "127.0.0.1",
        "-container-port",
        &container.port().to_string(),
        "-udp-idle-timeout",
        "1",
    ]);
    assert_eq!(proxy.status(), "0\n");
    let published: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    client("first", published);
    let first = sources.recv_timeout(WAIT).unwrap();
    // Past the 1 s timeout and the sweep after it (the loop sweeps every second).
    thread::sleep(Duration::from_millis(2500));
    while sources.try_recv().is_ok() {}
    client("second", published);
    let second = sources.recv_timeout(WAIT).unwrap();
    assert_ne!(first, second, "the idle flow was reused");
    let stopper = UdpSocket::bind("127.0.0.1:0").unwrap();
    stopper.send_to(b"stop", container).unwrap();
    server.join().unwrap();
}
