//! The lab the publish-engine tests run in, and the client process they measure with.
//!
//! Theory of operation: every lab is three kinds of anonymous network namespaces: a "host"
//! with a bridge `pier-test-br` (198.18.2.1/24) to two "containers" (c1 198.18.2.2, c2
//! 198.18.2.3, each running TCP and UDP echo servers on port 80), a second bridge
//! `pier-test-br2` (198.18.3.1/24) to a container on another network (c3 198.18.3.2), and a
//! veth `pier-test-r` (198.18.1.1/24 and 198.18.1.5/24) to a "remote" client (198.18.1.2).
//! With the ebpf programs loaded, the containers are registered as clients on their own
//! networks (as the engine's run does), and unregistered after the removal. The engine runs on one
//! thread inside the host namespace for the whole publish (its proxy children die with that
//! thread), with a private bpffs for its pins and a `pier-test-` cgroup2 directory for its
//! programs. Clients are processes: this test binary re-run with `PIER_TEST_CLIENT` set,
//! started from a thread inside the client's namespace and moved into the test cgroup before
//! it may start — the remote client too: in production the programs sit on the cgroup2 root,
//! so a neighbour namespace on the same host (a benchmark's client, another runtime's
//! container) runs them, and they must leave its sockets alone. The servers tell each client the peer address they saw
//! (`PEER a:p` first), so the client can report it. Everything is freed on drop, also when an
//! assertion fails: entries removed, pins unpinned, bpffs unmounted, cgroup removed; the
//! namespaces vanish with their last fd.
//!
//! Needs root, cgroup2 at /sys/fs/cgroup/unified, nft, and the pier binary (for the proxy
//! engine: `PIER_BINARY` or target/debug/pier next to this test's deps directory).
//! The bpffs and cgroup: bpf_home.rs (shared with examples/publish_scale.rs).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recv, send, MsgFlags};
use pier_net::netns::NetNs;
use pier_net::{Netlink, Route};
use pier_publish::engine::{
    client_netns, register_client, select, unregister_client, Entry, Mode, Publish, PublishError,
    Published, Settings, Target,
};
use pier_publish::PortMapping;

mod bpf_home;
pub use bpf_home::{BpfHome, CGROUP2};

pub const HOST_ADDR: &str = "198.18.1.1";
pub const OTHER_HOST_ADDR: &str = "198.18.1.5";
pub const REMOTE_ADDR: &str = "198.18.1.2";
pub const HOST_ADDR6: &str = "2001:2:0:1::1";
pub const REMOTE_ADDR6: &str = "2001:2:0:1::2";
pub const C1_6: &str = "2001:2:0:2::2";
pub const C2_6: &str = "2001:2:0:2::3";
pub const C1: &str = "198.18.2.2";
pub const C2: &str = "198.18.2.3";
/// The container on another network (bridge `pier-test-br2`).
pub const C3: &str = "198.18.3.2";
pub const C3_6: &str = "2001:2:0:3::2";
/// How long a client waits for a connection or a datagram before calling it unreachable.
pub const TIMEOUT: Duration = Duration::from_secs(2);
/// Bytes echoed over TCP.
pub const ECHO_BYTES: usize = 1 << 20;

/// True when the test may run; prints why it skips, and fails under CI=true.
pub fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() && Path::new(CGROUP2).join("cgroup.procs").exists() {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "{test} needs root and cgroup2 under CI"
    );
    eprintln!("skipping: {test} needs root and cgroup2 at {CGROUP2}");
    false
}

/// The pier binary the proxy engine runs, if built.
pub fn pier_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("PIER_BINARY") {
        return Some(p.into());
    }
    let exe = std::env::current_exe().ok()?;
    let candidate = exe.parent()?.parent()?.join("pier");
    candidate.is_file().then_some(candidate)
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn index(nl: &mut Netlink, name: &str) -> u32 {
    nl.link_index(name)
        .unwrap()
        .unwrap_or_else(|| panic!("no link {name}"))
}

/// The namespaces, the test cgroup and the bpffs of one lab.
pub struct Lab {
    /// First: the pins, the bpffs and the cgroup go before the namespaces.
    pub bpf: BpfHome,
    pub host: NetNs,
    pub c1: NetNs,
    pub c2: NetNs,
    pub c3: NetNs,
    pub remote: NetNs,
    pub settings: Settings,
}

impl Lab {
    pub fn new(name: &str) -> Lab {
        let bpf = BpfHome::new(name);
        let settings = bpf.settings(pier_binary().unwrap_or_else(|| "pier".into()));
        let lab = Lab {
            bpf,
            host: NetNs::new_anonymous().unwrap(),
            c1: NetNs::new_anonymous().unwrap(),
            c2: NetNs::new_anonymous().unwrap(),
            c3: NetNs::new_anonymous().unwrap(),
            remote: NetNs::new_anonymous().unwrap(),
            settings,
        };
        for ns in [&lab.host, &lab.c1, &lab.c2, &lab.c3, &lab.remote] {
            ns.run(no_dad).unwrap();
        }
        lab.host.run(|| wire_host(&lab)).unwrap();
        lab.c1
            .run(|| inside([C1, C1_6], ["198.18.2.1", "2001:2:0:2::1"]))
            .unwrap();
        lab.c2
            .run(|| inside([C2, C2_6], ["198.18.2.1", "2001:2:0:2::1"]))
            .unwrap();
        lab.c3
            .run(|| inside([C3, C3_6], ["198.18.3.1", "2001:2:0:3::1"]))
            .unwrap();
        lab.remote
            .run(|| inside([REMOTE_ADDR, REMOTE_ADDR6], [HOST_ADDR, HOST_ADDR6]))
            .unwrap();
        for ns in [&lab.c1, &lab.c2, &lab.c3] {
            // Dual-stack: IPv4 clients arrive as v4-mapped peers.
            let (tcp, udp) = ns
                .run(|| {
                    (
                        TcpListener::bind("[::]:80").unwrap(),
                        UdpSocket::bind("[::]:80").unwrap(),
                    )
                })
                .unwrap();
            serve_tcp(tcp);
            serve_udp(udp);
        }
        lab
    }

    /// Runs `work` on a thread in the host namespace with the engine of `mode` made there.
    pub fn with_engine<T: Send>(
        &self,
        mode: Mode,
        work: impl FnOnce(&dyn Publish) -> T + Send,
    ) -> T {
        self.host
            .run(|| work(select(mode, &self.settings).unwrap().as_ref()))
            .unwrap()
    }

    pub fn target(&self) -> Target {
        Target {
            container_id: "pier-test-c1".into(),
            addresses: vec![ip(C1), ip(C1_6)],
            bridge: Some("pier-test-br".into()),
        }
    }
}

fn wire_host(lab: &Lab) {
    let mut nl = Netlink::open().unwrap();
    wire_bridge(&mut nl, "pier-test-br", ["198.18.2.1", "2001:2:0:2::1"]);
    wire_bridge(&mut nl, "pier-test-br2", ["198.18.3.1", "2001:2:0:3::1"]);
    for (port, ns, bridge) in [
        ("pier-test-c1", &lab.c1, "pier-test-br"),
        ("pier-test-c2", &lab.c2, "pier-test-br"),
        ("pier-test-c3", &lab.c3, "pier-test-br2"),
    ] {
        nl.create_veth(port, "eth0", Some(ns.fd())).unwrap();
        let veth = index(&mut nl, port);
        let bridge = index(&mut nl, bridge);
        nl.set_master(veth, bridge).unwrap();
        nl.set_up(veth, true).unwrap();
        let args = [
            "link",
            "set",
            "dev",
            port,
            "type",
            "bridge_slave",
            "hairpin",
            "on",
        ];
        assert!(Command::new("ip").args(args).status().unwrap().success());
    }
    nl.create_veth("pier-test-r", "eth0", Some(lab.remote.fd()))
        .unwrap();
    let uplink = index(&mut nl, "pier-test-r");
    nl.add_address(uplink, ip(HOST_ADDR), 24).unwrap();
    nl.add_address(uplink, ip(OTHER_HOST_ADDR), 24).unwrap();
    nl.add_address(uplink, ip(HOST_ADDR6), 64).unwrap();
    nl.set_up(uplink, true).unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1\n").unwrap();
    std::fs::write("/proc/sys/net/ipv6/conf/all/forwarding", "1\n").unwrap();
}

/// A bridge `name` with an IPv4 /24 and an IPv6 /64, up.
fn wire_bridge(nl: &mut Netlink, name: &str, addrs: [&str; 2]) {
    nl.create_bridge(name).unwrap();
    let bridge = index(nl, name);
    nl.add_address(bridge, ip(addrs[0]), 24).unwrap();
    nl.add_address(bridge, ip(addrs[1]), 64).unwrap();
    nl.set_up(bridge, true).unwrap();
}

/// IPv6 addresses usable at once (no duplicate address detection) in this namespace's links.
fn no_dad() {
    for conf in ["all", "default"] {
        std::fs::write(format!("/proc/sys/net/ipv6/conf/{conf}/accept_dad"), "0\n").unwrap();
    }
}

/// `eth0` with an IPv4 /24 and an IPv6 /64, and default routes via the gateways.
fn inside(addrs: [&str; 2], gateways: [&str; 2]) {
    let mut nl = Netlink::open().unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    let eth0 = index(&mut nl, "eth0");
    nl.add_address(eth0, ip(addrs[0]), 24).unwrap();
    nl.add_address(eth0, ip(addrs[1]), 64).unwrap();
    nl.set_up(eth0, true).unwrap();
    for gateway in gateways {
        nl.add_route(&Route::default_via(ip(gateway))).unwrap();
    }
}

/// TCP echo: `PEER a:p\n`, then by the client's first byte: `E` echoes until EOF and sends
/// `BYE\n` after it (half-close), `U` waits for one urgent byte and answers `URG x\n`.
fn serve_tcp(listener: TcpListener) {
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let _ = handle_tcp(conn);
            });
        }
    });
}

fn handle_tcp(mut conn: TcpStream) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    let peer = conn.peer_addr()?;
    conn.write_all(format!("PEER {peer}\n").as_bytes())?;
    let mut mode = [0u8; 1];
    conn.read_exact(&mut mode)?;
    match mode[0] {
        b'U' => {
            let mut fds = [PollFd::new(conn.as_fd(), PollFlags::POLLPRI)];
            poll(&mut fds, PollTimeout::from(5000u16))?;
            let mut byte = [0u8; 1];
            let n = recv(conn.as_raw_fd(), &mut byte, MsgFlags::MSG_OOB)?;
            let text = if n == 1 {
                format!("URG {}\n", byte[0] as char)
            } else {
                "URG none\n".into()
            };
            conn.write_all(text.as_bytes())
        }
        _ => {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = conn.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                conn.write_all(&buf[..n])?;
            }
            conn.write_all(b"BYE\n")
        }
    }
}

/// UDP echo: each datagram back, prefixed with `PEER a:p\n`.
fn serve_udp(sock: UdpSocket) {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, peer)) = sock.recv_from(&mut buf) {
            let mut reply = format!("PEER {peer}\n").into_bytes();
            reply.extend_from_slice(&buf[..n]);
            let _ = sock.send_to(&reply, peer);
        }
    });
}

/// Runs `work` while `mode` publishes each of `mappings` (one plan and apply per mapping) for
/// c1; then removes everything and checks removal twice (idempotent).
pub fn with_engine<R>(
    lab: &Lab,
    mode: Mode,
    mappings: &[PortMapping],
    work: impl FnOnce(&[Result<(Vec<Published>, Vec<Entry>), String>]) -> R,
) -> R {
    let (out_tx, out_rx) = mpsc::channel();
    let (down_tx, down_rx) = mpsc::channel::<()>();
    let (done_tx, done_rx) = mpsc::channel();
    let target = lab.target();
    std::thread::scope(|scope| {
        scope.spawn(move || {
            lab.host
                .run(move || {
                    let engine = match select(mode, &lab.settings) {
                        Ok(e) => e,
                        Err(e) => {
                            let _ =
                                out_tx.send(mappings.iter().map(|_| Err(e.to_string())).collect());
                            let _ = done_tx.send(Ok(()));
                            return;
                        }
                    };
                    if matches!(mode, Mode::Nat | Mode::Auto) {
                        other_network();
                    }
                    // Registered exactly when programs serving this namespace are loaded.
                    let loaded = pier_bpf::layout(&lab.settings.bpf_pin_dir);
                    let registered = register_clients(lab);
                    assert_eq!(registered, loaded == pier_bpf::Layout::Current, "{mode:?}");
                    assert!(
                        registered || mode != Mode::Ebpf,
                        "ebpf: containers registered"
                    );
                    let outcomes: Vec<_> = mappings
                        .iter()
                        .map(|m| {
                            let (published, entries) = engine
                                .plan(&target, std::slice::from_ref(m))
                                .map_err(|e| e.to_string())?;
                            let made = engine
                                .apply_recorded(&target, &entries)
                                .map_err(|e| e.to_string())?;
                            Ok((published, made))
                        })
                        .collect();
                    let all: Vec<Entry> = outcomes
                        .iter()
                        .flatten()
                        .flat_map(|(_, e)| e.clone())
                        .collect();
                    let _ = out_tx.send(outcomes);
                    let _ = down_rx.recv();
                    let removed = engine
                        .remove(&all)
                        .and_then(|()| engine.remove(&all))
                        .and_then(|()| unregister_clients(lab))
                        .map_err(|e| e.to_string());
                    let _ = done_tx.send(removed);
                })
                .unwrap();
        });
        let outcomes = out_rx.recv().unwrap();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&outcomes)));
        let _ = down_tx.send(());
        let removed = done_rx.recv().unwrap();
        let result = result.unwrap_or_else(|p| std::panic::resume_unwind(p));
        removed.expect("remove, twice");
        result
    })
}

/// c3's bridge as a pier network of the nat engine (as `pier network create` makes it), so c3 is
/// a container of another pier network, not a stranger on a foreign interface.
fn other_network() {
    let subnet = "198.18.3.0/24".parse().unwrap();
    pier_net::nft::Table.ensure().unwrap();
    pier_net::nft::Table
        .add_network(subnet, "pier-test-br2")
        .unwrap();
}

/// The container namespaces with their networks: c1 and c2 on the first bridge, c3 on the other.
fn client_namespaces(lab: &Lab) -> [(&NetNs, [(IpAddr, u8); 2]); 3] {
    let net = [(ip("198.18.2.0"), 24), (ip("2001:2:0:2::"), 64)];
    let other = [(ip("198.18.3.0"), 24), (ip("2001:2:0:3::"), 64)];
    [(&lab.c1, net), (&lab.c2, net), (&lab.c3, other)]
}

/// Registers the containers as the engine's run does (on the host's thread); whether the
/// programs took them (only when loaded: ebpf, auto).
fn register_clients(lab: &Lab) -> bool {
    let mut taken = Vec::new();
    for (ns, subnets) in client_namespaces(lab) {
        let netns = client_netns(ns.fd()).unwrap();
        taken.push(register_client(&lab.settings, netns, &subnets).unwrap());
    }
    assert!(taken.iter().all(|t| *t == taken[0]), "{taken:?}");
    taken[0]
}

fn unregister_clients(lab: &Lab) -> Result<(), PublishError> {
    for (ns, _) in client_namespaces(lab) {
        unregister_client(&lab.settings, client_netns(ns.fd())?.cookie)?;
    }
    Ok(())
}

/// Where a client runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Host127,
    Host6,
    HostAddr,
    /// The host dialling its IPv6 address.
    HostAddr6,
    Remote,
    /// The remote client over IPv6.
    Remote6,
    /// c1 to its own published port.
    Own,
    /// c2 to c1's published port.
    Other,
    /// c3, on another network, to c1's published port.
    Foreign,
}

impl Client {
    pub const ALL: [Client; 9] = [
        Client::Host127,
        Client::Host6,
        Client::HostAddr,
        Client::HostAddr6,
        Client::Remote,
        Client::Remote6,
        Client::Own,
        Client::Other,
        Client::Foreign,
    ];

    fn netns<'a>(&self, lab: &'a Lab) -> &'a NetNs {
        match self {
            Client::Host127 | Client::Host6 | Client::HostAddr | Client::HostAddr6 => &lab.host,
            Client::Remote | Client::Remote6 => &lab.remote,
            Client::Own => &lab.c1,
            Client::Other => &lab.c2,
            Client::Foreign => &lab.c3,
        }
    }

    /// The address this client dials for host port `port`.
    pub fn dial(&self, port: u16) -> SocketAddr {
        match self {
            Client::Host127 => SocketAddr::new(ip("127.0.0.1"), port),
            Client::Host6 => SocketAddr::new(ip("::1"), port),
            Client::HostAddr6 | Client::Remote6 => SocketAddr::new(ip(HOST_ADDR6), port),
            _ => SocketAddr::new(ip(HOST_ADDR), port),
        }
    }
}

/// What a client process reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    Unreachable,
    /// A `bind` client was refused (EPERM): the port is reserved.
    Refused,
    /// Reached: the peer address the server saw.
    Ok {
        seen: IpAddr,
    },
    Failed(String),
}

/// Runs a client process for `proto` (`tcp`/`udp`, or `bind` to try binding `to`) to `to` in
/// `client`'s namespace.
pub fn run_client(lab: &Lab, client: Client, proto: &str, to: SocketAddr) -> Report {
    let exe = std::env::current_exe().unwrap();
    let mut child = client
        .netns(lab)
        .run(|| {
            Command::new(&exe)
                .args([
                    "--exact",
                    "client_process",
                    "--nocapture",
                    "--test-threads=1",
                ])
                .env("PIER_TEST_CLIENT", format!("{proto} {to}"))
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .unwrap();
    std::fs::write(lab.bpf.cgroup.join("cgroup.procs"), child.id().to_string()).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let output = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once("RESULT ").map(|(_, r)| r))
        .unwrap_or("fail no result");
    match line.split_once(' ').unwrap_or((line, "")) {
        ("unreachable", _) => Report::Unreachable,
        ("refused", _) => Report::Refused,
        ("ok", seen) => Report::Ok {
            seen: seen.parse().unwrap(),
        },
        (_, why) => Report::Failed(why.to_string()),
    }
}

/// The body of the client process (`PIER_TEST_CLIENT="tcp 198.18.1.1:8080"`): waits for `go`
/// on stdin (its cgroup is set by then), runs the checks, prints `RESULT ...`.
pub fn client_main(spec: &str) {
    let mut go = String::new();
    std::io::stdin().lock().read_line(&mut go).unwrap();
    let (proto, to) = spec.split_once(' ').unwrap();
    let to: SocketAddr = to.parse().unwrap();
    let result = match proto {
        "tcp" => tcp_client(to),
        "bind" => {
            match TcpListener::bind(to) {
                Err(e) if e.raw_os_error() == Some(libc::EPERM) => println!("RESULT refused"),
                Err(e) => println!("RESULT fail bind: {e}"),
                Ok(_) => println!("RESULT ok {}", to.ip()),
            }
            return;
        }
        _ => udp_client(to),
    };
    match result {
        Ok(Some(seen)) => println!("RESULT ok {seen}"),
        Ok(None) => println!("RESULT unreachable"),
        Err(e) => println!("RESULT fail {e}"),
    }
}

fn peer_line(reader: &mut impl BufRead) -> Result<IpAddr, String> {
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("reading PEER: {e}"))?;
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("PEER ")
        .and_then(|a| a.parse().ok())
        .ok_or(format!("bad PEER line {line:?}"))?;
    Ok(addr.ip().to_canonical())
}

/// 1 MiB echo with a half-close, the server's `BYE` after it, then one urgent byte.
fn tcp_client(to: SocketAddr) -> Result<Option<IpAddr>, String> {
    let Ok(conn) = TcpStream::connect_timeout(&to, TIMEOUT) else {
        return Ok(None);
    };
    let shown = conn.peer_addr().map_err(|e| e.to_string())?;
    if shown != to {
        return Err(format!("getpeername shows {shown}, dialled {to}"));
    }
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
    let seen = peer_line(&mut reader)?;
    let data: Vec<u8> = (0..ECHO_BYTES).map(|i| (i * 7 + i / 251) as u8).collect();
    let mut writer = conn.try_clone().map_err(|e| e.to_string())?;
    let sent = data.clone();
    let feeder = std::thread::spawn(move || -> std::io::Result<()> {
        writer.write_all(b"E")?;
        writer.write_all(&sent)?;
        writer.shutdown(std::net::Shutdown::Write)
    });
    let mut back = vec![0u8; ECHO_BYTES];
    reader
        .read_exact(&mut back)
        .map_err(|e| format!("echo: {e}"))?;
    feeder.join().unwrap().map_err(|e| format!("send: {e}"))?;
    if checksum(&back) != checksum(&data) {
        return Err("echo checksum differs".into());
    }
    let mut rest = String::new();
    reader
        .read_to_string(&mut rest)
        .map_err(|e| format!("after half-close: {e}"))?;
    if rest != "BYE\n" {
        return Err(format!("after half-close got {rest:?}, not BYE"));
    }
    urgent(to)?;
    Ok(Some(seen))
}

fn urgent(to: SocketAddr) -> Result<(), String> {
    let conn =
        TcpStream::connect_timeout(&to, TIMEOUT).map_err(|e| format!("urgent connect: {e}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(conn.try_clone().map_err(|e| e.to_string())?);
    peer_line(&mut reader)?;
    (&conn).write_all(b"U").map_err(|e| e.to_string())?;
    send(conn.as_raw_fd(), b"!", MsgFlags::MSG_OOB).map_err(|e| format!("send OOB: {e}"))?;
    let mut line = String::new();
    reader
        .read_line(&mut line)
        .map_err(|e| format!("urgent answer: {e}"))?;
    match line.as_str() {
        "URG !\n" => Ok(()),
        other => Err(format!("urgent byte not delivered as urgent: {other:?}")),
    }
}

/// 16 datagrams of 1,000 bytes on a connected socket, each echoed.
fn udp_client(to: SocketAddr) -> Result<Option<IpAddr>, String> {
    let any = if to.is_ipv4() { "0.0.0.0:0" } else { "[::]:0" };
    let sock = UdpSocket::bind(any).map_err(|e| e.to_string())?;
    sock.connect(to).map_err(|e| format!("connect: {e}"))?;
    sock.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut seen = None;
    let mut buf = vec![0u8; 4096];
    for seq in 0..16u8 {
        let data: Vec<u8> = (0..1000).map(|i| (i as u8).wrapping_mul(seq + 1)).collect();
        if sock.send(&data).is_err() {
            return Ok(None);
        }
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(_) if seq == 0 => return Ok(None),
            Err(e) => return Err(format!("datagram {seq}: {e}")),
        };
        let mut reader = &buf[..n];
        let ip = peer_line(&mut reader)?;
        if checksum(reader) != checksum(&data) {
            return Err(format!("datagram {seq}: checksum differs"));
        }
        seen = Some(ip);
    }
    Ok(seen)
}

/// FNV-1a, enough to tell two buffers apart.
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    })
}
