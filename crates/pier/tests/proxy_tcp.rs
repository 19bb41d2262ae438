//! `pier proxy` over TCP, black-box: a 1 MiB echo with matching checksum, half-close in both
//! directions, an urgent byte that reaches the server as urgent, small messages moving without
//! a pipe and bulk through splice, a stream of tiny writes and replies larger than the client's window losing nothing, and
//! one SO_REUSEPORT listener per event loop thread.
//! Loopback only, servers in the test, every wait bounded.
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

/// A server on 127.0.0.1 echoing every connection until its EOF, each on its own thread.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for mut conn in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut reader = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut reader, &mut conn);
            });
        }
    });
    addr
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

/// Sends "ab", urgent "!", "cd" and the FIN on `conn`.
fn send_with_urgent(mut conn: TcpStream) {
    conn.write_all(b"ab").unwrap();
    send(conn.as_raw_fd(), b"!", MsgFlags::MSG_OOB).unwrap();
    conn.write_all(b"cd").unwrap();
    conn.shutdown(Shutdown::Write).unwrap();
}

/// Checks that `conn` receives what [`send_with_urgent`] sent, the urgent byte as urgent and
/// at its place: once everything is in (the FIN seen), a read stops at the mark after "ab".
fn expect_urgent_in_place(mut conn: TcpStream) {
    let timeout = PollTimeout::try_from(WAIT).unwrap();
    let mut fds = [PollFd::new(
        conn.as_fd(),
        PollFlags::from_bits_retain(libc::POLLRDHUP),
    )];
    assert_eq!(poll(&mut fds, timeout).unwrap(), 1, "no FIN");
    let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLPRI)];
    assert_eq!(
        poll(&mut fds, PollTimeout::ZERO).unwrap(),
        1,
        "no urgent data"
    );
    let mut before = [0u8; 16];
    let n = conn.read(&mut before).unwrap();
    assert_eq!(
        &before[..n],
        b"ab",
        "the read did not stop at the urgent mark"
    );
    let mut urgent = [0u8];
    let n = recv(conn.as_raw_fd(), &mut urgent, MsgFlags::MSG_OOB).unwrap();
    assert_eq!(&urgent[..n], b"!");
    let mut after = Vec::new();
    conn.read_to_end(&mut after).unwrap();
    assert_eq!(after, b"cd");
}

#[test]
fn urgent_byte_arrives_as_urgent_in_its_place() {
    let (addr, server) = server(expect_urgent_in_place);
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, addr);
    send_with_urgent(client(port));
    server.join().unwrap();
}

#[test]
fn urgent_byte_from_the_server_arrives_as_urgent_in_its_place() {
    let (addr, server) = server(send_with_urgent);
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, addr);
    expect_urgent_in_place(client(port));
    server.join().unwrap();
}

#[test]
fn small_messages_use_no_pipe_and_bulk_is_spliced() {
    let port = free_tcp_port();
    let proxy = Proxy::ready("tcp", port, echo_server());
    let at_start = proxy.pipes();
    let mut conn = client(port);
    for _ in 0..3 {
        conn.write_all(b"ping").unwrap();
        let mut pong = [0u8; 4];
        conn.read_exact(&mut pong).unwrap();
        assert_eq!(&pong, b"ping");
    }
    assert_eq!(proxy.pipes(), at_start, "a pipe for small messages");
    let sent = noise(4 << 20);
    let mut writer = conn.try_clone().unwrap();
    let data = sent.clone();
    let writing = thread::spawn(move || writer.write_all(&data).unwrap());
    let mut got = vec![0u8; sent.len()];
    conn.read_exact(&mut got).unwrap();
    writing.join().unwrap();
    assert_eq!(checksum(&got), checksum(&sent));
    // The connection is still open, so the pipes of the ways that moved bulk still exist.
    assert!(proxy.pipes() >= at_start + 2, "4 MiB moved without a pipe");
}

#[test]
fn many_small_writes_arrive_whole_and_in_order() {
    let port = free_tcp_port();
    let _proxy = Proxy::ready("tcp", port, echo_server());
    let sent = noise(20_000 * 7);
    let mut conn = client(port);
    let mut writer = conn.try_clone().unwrap();
    let data = sent.clone();
    // Each write is its own segment (TCP_NODELAY on the proxy's sides), so the proxy sees a
    // stream of short reads and must miss no edge.
    let writing = thread::spawn(move || data.chunks(7).for_each(|c| writer.write_all(c).unwrap()));
    let mut got = vec![0u8; sent.len()];
    conn.read_exact(&mut got).unwrap();
    writing.join().unwrap();
    assert_eq!(checksum(&got), checksum(&sent));
}

#[test]
fn replies_larger_than_the_client_side_takes_at_once_arrive_whole() {
    const ROUNDS: usize = 20;
    const REPLY: usize = 60_000;
    let sent = noise(ROUNDS * REPLY);
    let data = sent.clone();
    let (addr, server) = server(move |mut conn| {
        for reply in data.chunks(REPLY) {
            let mut ask = [0u8; 4];
            conn.read_exact(&mut ask).unwrap();
            conn.write_all(reply).unwrap();
        }
    });
    let cport = addr.port().to_string();
    let args = ["-container-ip", "127.0.0.1", "-container-port", &cport];
    // The proxy's sockets towards clients inherit a 4 KiB send buffer from the passed
    // listener: each reply is one read for the proxy (below its bulk threshold) but more than
    // that socket takes, so the proxy holds the rest until EPOLLOUT.
    let Some((mut proxy, port)) = Proxy::spawn_with_listener_sndbuf(&args, 4096) else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "python3 is needed"
        );
        eprintln!("skipping: no python3 to pass fd 4");
        return;
    };
    assert_eq!(proxy.status(), "0\n");
    let mut conn = client(port);
    let mut got = vec![0u8; sent.len()];
    for reply in got.chunks_mut(REPLY) {
        conn.write_all(b"next").unwrap();
        conn.read_exact(reply).unwrap();
    }
    assert_eq!(checksum(&got), checksum(&sent));
    server.join().unwrap();
}

#[test]
fn each_event_loop_thread_has_its_own_listener() {
    let port = free_tcp_port();
    let addr = echo_server();
    let args = ["-proto", "tcp", "-host-ip", "127.0.0.1", "-host-port"];
    let (cip, cport) = (addr.ip().to_string(), addr.port().to_string());
    let port_text = port.to_string();
    let mut args = args.to_vec();
    args.extend([
        port_text.as_str(),
        "-container-ip",
        &cip,
        "-container-port",
        &cport,
    ]);
    args.extend(["-threads", "2"]);
    let mut proxy = Proxy::spawn(&args);
    assert_eq!(proxy.status(), "0\n");
    // The status is written once the listeners exist, before the loops' threads start.
    let started = std::time::Instant::now();
    let has_loops = |threads: &[String]| {
        let has = |name: &str| threads.iter().any(|t| t == name);
        has("pier-proxy-0") && has("pier-proxy-1")
    };
    while !has_loops(&proxy.threads()) {
        assert!(started.elapsed() < WAIT, "threads: {:?}", proxy.threads());
        thread::sleep(std::time::Duration::from_millis(10));
    }
    let tcp = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let listening = format!(":{port:04X} 00000000:0000 0A");
    assert_eq!(tcp.matches(&listening).count(), 2, "listeners on {port}");
    let clients: Vec<_> = (0..16)
        .map(|i| {
            thread::spawn(move || {
                let mut conn = client(port);
                let message = format!("client {i}");
                conn.write_all(message.as_bytes()).unwrap();
                conn.shutdown(Shutdown::Write).unwrap();
                let mut echo = String::new();
                conn.read_to_string(&mut echo).unwrap();
                assert_eq!(echo, message);
            })
        })
        .collect();
    for c in clients {
        c.join().unwrap();
    }
}

#[test]
fn event_loops_are_pinned_one_per_cpu() {
    // One loop per CPU, pinned to it; on a single CPU the one loop runs where the process may.
    let cpus = allowed_cpus();
    let addr = echo_server();
    let mut proxy = Proxy::ready("tcp", free_tcp_port(), addr);
    assert_eq!(proxy.status(), "0\n");
    let loops = |proxy: &Proxy| {
        let mut loops: Vec<_> = proxy
            .thread_cpus()
            .into_iter()
            .filter(|(name, _)| name.starts_with("pier-proxy-"))
            .collect();
        loops.sort();
        loops
    };
    let started = std::time::Instant::now();
    let wanted: Vec<_> = cpus
        .iter()
        .enumerate()
        .map(|(n, cpu)| (format!("pier-proxy-{n}"), cpu.to_string()))
        .collect();
    // The loops pin themselves as they start, just after the status is written.
    while loops(&proxy) != wanted {
        assert!(
            started.elapsed() < WAIT,
            "loops and CPUs: {:?}",
            loops(&proxy)
        );
        thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// The CPUs this test may run on (and so the proxy it starts), from /proc/self/status.
fn allowed_cpus() -> Vec<usize> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap();
    let mut cpus = Vec::new();
    for part in list.trim().split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        cpus.extend(a.parse::<usize>().unwrap()..=b.parse::<usize>().unwrap());
    }
    cpus
}
