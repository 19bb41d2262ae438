//! `pier proxy` and dockerd's protocol, black-box: "0\n" on fd 3 once listening, "1\n" and the
//! error when the host port is taken or the command line is wrong, the flag named on stderr,
//! and SCTP refused with a clear message on a kernel without it.
mod proxy_support;

use proxy_support::{free_tcp_port, Proxy};
use std::net::TcpListener;

#[test]
fn status_is_zero_once_listening() {
    let container = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free_tcp_port();
    let mut proxy = Proxy::ready("tcp", port, container.local_addr().unwrap());
    assert_eq!(proxy.status(), "0\n");
    std::net::TcpStream::connect(("127.0.0.1", port)).expect("the published port accepts");
}

#[test]
fn taken_host_port_reports_one_and_the_error() {
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let mut proxy = Proxy::spawn(&[
        "-proto",
        "tcp",
        "-host-ip",
        "127.0.0.1",
        "-host-port",
        &port,
        "-container-ip",
        "127.0.0.1",
        "-container-port",
        "9",
    ]);
    let status = proxy.status();
    let (exit, stderr) = proxy.exit();
    assert!(!exit.success());
    assert!(status.starts_with("1\n"), "{status:?}");
    let expected = format!("failed to listen on 127.0.0.1:{port}/tcp");
    assert!(status.contains(&expected), "{status:?}");
    assert!(stderr.contains(&expected), "{stderr}");
}

/// `pier proxy ARGS` fails, naming `flag` on stderr and on the status pipe.
fn fails_naming(args: &[&str], flag: &str) {
    let mut proxy = Proxy::spawn(args);
    let status = proxy.status();
    let (exit, stderr) = proxy.exit();
    assert!(!exit.success(), "{args:?} succeeded");
    assert!(
        stderr.contains(flag),
        "{args:?}: stderr does not name {flag}: {stderr}"
    );
    assert!(
        status.starts_with("1\n") && status.contains(flag),
        "{status:?}"
    );
}

#[test]
fn bad_flags_exit_non_zero_naming_the_flag() {
    fails_naming(&["-bogus", "1"], "-bogus");
    fails_naming(
        &["-host-port", "65536", "-container-port", "80"],
        "-host-port",
    );
    fails_naming(&["-proto", "icmp"], "-proto");
    fails_naming(&["-host-ip", "localhost"], "-host-ip");
    fails_naming(&["-host-port", "1"], "-container-port");
    fails_naming(&["-container-port"], "-container-port");
}

#[test]
fn sctp_works_or_is_refused_clearly() {
    let protocols = std::fs::read_to_string("/proc/net/protocols").unwrap();
    let port = free_tcp_port().to_string();
    let mut proxy = Proxy::spawn(&[
        "-proto",
        "sctp",
        "-host-ip",
        "127.0.0.1",
        "-host-port",
        &port,
        "-container-ip",
        "127.0.0.1",
        "-container-port",
        "9",
    ]);
    let status = proxy.status();
    if protocols.lines().any(|l| l.starts_with("SCTP ")) {
        assert_eq!(status, "0\n");
    } else {
        assert_eq!(status, "1\nsctp is not available in this kernel");
    }
}

#[test]
fn passed_listener_on_fd_4_is_used() {
    let container = TcpListener::bind("127.0.0.1:0").unwrap();
    let cport = container.local_addr().unwrap().port().to_string();
    let args = [
        "-proto",
        "tcp",
        "-container-ip",
        "127.0.0.1",
        "-container-port",
        &cport,
    ];
    let Some((mut proxy, port)) = Proxy::spawn_with_listener(&args) else {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "python3 is needed"
        );
        eprintln!("skipping passed_listener_on_fd_4_is_used: no python3 to pass fd 4");
        return;
    };
    assert_eq!(proxy.status(), "0\n");
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut upstream, _) = container.accept().unwrap();
    use std::io::{Read, Write};
    conn.write_all(b"through fd 4").unwrap();
    conn.shutdown(std::net::Shutdown::Write).unwrap();
    let mut got = String::new();
    upstream.read_to_string(&mut got).unwrap();
    assert_eq!(got, "through fd 4");
}
