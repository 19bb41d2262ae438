//! Remote clients of the auto engine with `remote_tc` (PIER_REMOTE_TC=1) take the tc fast path
//! (crates/bpf/src/bpf/remote.bpf.c), never conntrack, and the programs leave every interface
//! when the last port goes; without it they are nat's: the same publishes and remote clients
//! under nat and under auto, in labs of their own (see priv_engines_support), with the host
//! namespace's conntrack table read after the clients ran.
//!
//! Theory: nat's DNAT must leave conntrack entries from the remote client's address (the
//! control: it shows the check can fail); auto must leave none, while its tc programs count
//! translated packets both ways and one flow per connection or UDP exchange, and the programs
//! stay attached after removal until gc's detach_idle_remote takes them off. Every client
//! still gets the full check of the matrix (1 MiB echo with checksum after a half-close, an
//! urgent byte, 16 datagrams) and the server sees the remote client's own address, over IPv4
//! to the wildcard and to a specific host address, and over IPv6. After removal the remote map
//! is empty.
//!
//! Needs root, cgroup2, nft, and /proc/<tid>/net/nf_conntrack (CONFIG_NF_CONNTRACK_PROCFS).
mod priv_engines_support;

use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;

use pier_publish::engine::Mode;
use pier_publish::PortMapping;
use priv_engines_support::{
    privileged, run_client, with_engine, Client, Lab, Report, HOST_ADDR, REMOTE_ADDR, REMOTE_ADDR6,
};

/// Not a test: the body of the client processes (does nothing otherwise).
#[test]
fn client_process() {
    if let Ok(spec) = std::env::var("PIER_TEST_CLIENT") {
        priv_engines_support::client_main(&spec);
    }
}

/// What one mode did: each client's report, the conntrack entries of the remote client, and
/// the tc programs attached while the ports were published.
struct Outcome {
    reports: Vec<(String, Report)>,
    conntrack: Vec<String>,
    attached: Vec<pier_bpf::Hook>,
}

fn mappings(base: u16) -> Vec<PortMapping> {
    [
        format!("{base}:80/tcp"),
        format!("{}:80/udp", base + 1),
        format!("{HOST_ADDR}:{}:80/tcp", base + 2),
    ]
    .iter()
    .map(|m| m.parse().unwrap())
    .collect()
}

/// The conntrack entries of the host namespace naming the remote client's addresses.
fn remote_conntrack(lab: &Lab) -> Vec<String> {
    lab.host
        .run(|| std::fs::read_to_string("/proc/thread-self/net/nf_conntrack").unwrap())
        .unwrap()
        .lines()
        .filter(|l| {
            l.contains(&format!("src={REMOTE_ADDR} "))
                || l.contains(&format!("src={} ", expand6(REMOTE_ADDR6)))
        })
        .map(str::to_string)
        .collect()
}

/// nf_conntrack prints IPv6 addresses in full, zero-padded groups.
fn expand6(ip: &str) -> String {
    let IpAddr::V6(v6) = ip.parse().unwrap() else {
        unreachable!()
    };
    v6.segments()
        .iter()
        .map(|s| format!("{s:04x}"))
        .collect::<Vec<_>>()
        .join(":")
}

fn run(lab: &Lab, mode: Mode, base: u16) -> Outcome {
    let host = |port: u16| SocketAddr::new(HOST_ADDR.parse().unwrap(), port);
    let cells = [
        (Client::Remote, "tcp", host(base)),
        (Client::Remote, "udp", host(base + 1)),
        (Client::Remote, "tcp", host(base + 2)),
        (Client::Remote6, "tcp", Client::Remote6.dial(base)),
        (Client::Remote6, "udp", Client::Remote6.dial(base + 1)),
    ];
    with_engine(lab, mode, &mappings(base), |outcomes| {
        for outcome in outcomes {
            assert!(outcome.is_ok(), "{mode:?} publish: {outcome:?}");
        }
        let reports = cells
            .iter()
            .map(|&(client, proto, to)| {
                let cell = format!("{mode:?} {client:?} {proto} -> {to}");
                (cell, run_client(lab, client, proto, to))
            })
            .collect();
        Outcome {
            reports,
            conntrack: remote_conntrack(lab),
            attached: pier_bpf::attached_remote(&lab.settings.bpf_pin_dir)
                .into_iter()
                .map(|(hook, _)| hook)
                .collect(),
        }
    })
}

fn assert_reached(outcome: &Outcome) {
    for (cell, report) in &outcome.reports {
        let want: IpAddr = match cell.contains("Remote6") {
            true => REMOTE_ADDR6.parse().unwrap(),
            false => REMOTE_ADDR.parse().unwrap(),
        };
        assert_eq!(report, &Report::Ok { seen: want }, "{cell}");
    }
}

#[test]
fn auto_without_remote_tc_leaves_remote_clients_to_nat() {
    if !privileged("auto_without_remote_tc_leaves_remote_clients_to_nat") {
        return;
    }
    let mut lab = Lab::new("remote-auto-nat");
    lab.settings.remote_tc = false;
    let outcome = run(&lab, Mode::Auto, 45200);
    assert_reached(&outcome);
    assert!(
        outcome.conntrack.len() >= outcome.reports.len(),
        "auto without PIER_REMOTE_TC: remote clients are nat's, {:?}",
        outcome.conntrack
    );
    assert!(!pier_bpf::remote_loaded(&lab.settings.bpf_pin_dir));
}

#[test]
fn nat_remote_clients_go_through_conntrack() {
    if !privileged("nat_remote_clients_go_through_conntrack") {
        return;
    }
    let lab = Lab::new("remote-nat");
    let outcome = run(&lab, Mode::Nat, 45000);
    assert_reached(&outcome);
    assert!(
        outcome.conntrack.len() >= outcome.reports.len(),
        "nat: expected a conntrack entry per client, got {:?}",
        outcome.conntrack
    );
}

#[test]
fn auto_remote_clients_bypass_conntrack() {
    if !privileged("auto_remote_clients_bypass_conntrack") {
        return;
    }
    let mut lab = Lab::new("remote-auto");
    lab.settings.remote_tc = true;
    let outcome = run(&lab, Mode::Auto, 45100);
    assert_reached(&outcome);
    assert_eq!(
        outcome.conntrack,
        Vec::<String>::new(),
        "auto: remote clients must not reach conntrack"
    );
    let pin_dir = &lab.settings.bpf_pin_dir;
    let stats = pier_bpf::remote_stats(pin_dir).unwrap();
    // Two TCP connections per TCP cell (the echo and the urgent byte), one flow per UDP cell.
    assert!(stats.flows >= 8, "{stats:?}");
    // 1 MiB each way and 16 datagrams per UDP cell (TCP segments arrive GSO-merged).
    assert!(
        stats.translated_in > 50 && stats.translated_out > 50,
        "{stats:?}"
    );
    use pier_bpf::Hook;
    assert!(
        outcome.attached.contains(&Hook::Uplink) && outcome.attached.contains(&Hook::Bridge),
        "while published, the uplink and the bridge have their programs: {:?}",
        outcome.attached
    );
    let remote = pier_bpf::RemotePublisher::open(pin_dir).unwrap();
    assert!(remote.is_empty(), "the remote map is emptied on removal");
    // The programs stay attached (a tcx attach costs an RCU grace period) until gc detaches them.
    let attached = pier_bpf::attached_remote(pin_dir).len();
    assert_eq!(
        attached,
        outcome.attached.len(),
        "still attached after removal"
    );
    let detached = lab
        .host
        .run(|| pier_publish::engine::detach_idle_remote(&lab.settings).unwrap())
        .unwrap();
    assert_eq!(detached, attached);
    assert_eq!(
        pier_bpf::attached_remote(pin_dir),
        Vec::new(),
        "with nothing published, gc leaves no interface a tc program"
    );
}

/// A UDP socket connected to `front` from the calling thread's namespace, reads bounded by
/// `wait`.
fn connected_udp(front: SocketAddr, wait: std::time::Duration) -> std::net::UdpSocket {
    let any: SocketAddr = match front {
        SocketAddr::V4(_) => "0.0.0.0:0".parse().unwrap(),
        SocketAddr::V6(_) => "[::]:0".parse().unwrap(),
    };
    let sock = std::net::UdpSocket::bind(any).unwrap();
    sock.set_read_timeout(Some(wait)).unwrap();
    sock.connect(front).unwrap();
    sock
}

/// A UDP socket of the remote client connected to `front`, after one echo went through.
fn udp_flow(lab: &Lab, front: SocketAddr) -> std::net::UdpSocket {
    lab.remote
        .run(|| {
            let sock = connected_udp(front, std::time::Duration::from_secs(2));
            sock.send(b"hello").unwrap();
            let mut buf = [0u8; 256];
            let n = sock.recv(&mut buf).expect("the echo through the front");
            assert!(buf[..n].ends_with(b"hello"));
            sock
        })
        .unwrap()
}

/// The ones' complement sum of `data` (RFC 1071), folded and inverted.
fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = data
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// What a router between the host and the client sends when a reply of `flow` (front ->
/// client) does not fit its next hop: ICMP "fragmentation needed" / ICMPv6 "packet too big"
/// with MTU 1280 to the front, the start of the reply embedded; sent from the remote namespace.
fn send_too_big(lab: &Lab, front: SocketAddr, client: SocketAddr) {
    use nix::sys::socket::{sendto, socket, AddressFamily, MsgFlags, SockFlag, SockType};
    use nix::sys::socket::{SockProtocol, SockaddrIn, SockaddrIn6};
    let udp = |sport: u16, dport: u16| {
        let mut h = Vec::new();
        h.extend(sport.to_be_bytes());
        h.extend(dport.to_be_bytes());
        h.extend(1380u16.to_be_bytes());
        h.extend([0, 0]);
        h
    };
    lab.remote
        .run(|| match (front, client) {
            (SocketAddr::V4(f), SocketAddr::V4(c)) => {
                let mut ip = vec![0x45, 0, 0x05, 0x78, 0, 1, 0x40, 0, 64, 17, 0, 0];
                ip.extend(f.ip().octets());
                ip.extend(c.ip().octets());
                let check = inet_checksum(&ip);
                ip[10..12].copy_from_slice(&check.to_be_bytes());
                let mut icmp = vec![3, 4, 0, 0, 0, 0];
                icmp.extend(1280u16.to_be_bytes());
                icmp.extend(ip);
                icmp.extend(udp(f.port(), c.port()));
                let check = inet_checksum(&icmp);
                icmp[2..4].copy_from_slice(&check.to_be_bytes());
                let raw = socket(
                    AddressFamily::Inet,
                    SockType::Raw,
                    SockFlag::empty(),
                    SockProtocol::Icmp,
                );
                let to = SockaddrIn::from(std::net::SocketAddrV4::new(*f.ip(), 0));
                sendto(raw.unwrap().as_raw_fd(), &icmp, &to, MsgFlags::empty()).unwrap();
            }
            (SocketAddr::V6(f), SocketAddr::V6(c)) => {
                let mut icmp = vec![2, 0, 0, 0];
                icmp.extend(1280u32.to_be_bytes());
                icmp.extend([0x60, 0, 0, 0]);
                icmp.extend(1380u16.to_be_bytes());
                icmp.extend([17, 64]);
                icmp.extend(f.ip().octets());
                icmp.extend(c.ip().octets());
                icmp.extend(udp(f.port(), c.port()));
                // The kernel sums ICMPv6 (with its pseudo-header) for raw sockets.
                let raw = socket(
                    AddressFamily::Inet6,
                    SockType::Raw,
                    SockFlag::empty(),
                    SockProtocol::IcmpV6,
                );
                let to = SockaddrIn6::from(std::net::SocketAddrV6::new(*f.ip(), 0, 0, 0));
                sendto(raw.unwrap().as_raw_fd(), &icmp, &to, MsgFlags::empty()).unwrap();
            }
            _ => unreachable!("one family"),
        })
        .unwrap();
}

/// The path MTU c1's kernel has learned towards `client`, if any (`ip route get`'s cache line).
fn learned_mtu(lab: &Lab, client: IpAddr) -> Option<u32> {
    let out = lab
        .c1
        .run(|| {
            std::process::Command::new("ip")
                .args(["route", "get", &client.to_string()])
                .output()
                .unwrap()
        })
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut words = text.split_whitespace();
    words.find(|w| *w == "mtu")?;
    words.next()?.parse().ok()
}

#[test]
fn icmp_errors_about_a_flow_are_translated_both_ways() {
    if !privileged("icmp_errors_about_a_flow_are_translated_both_ways") {
        return;
    }
    let mut lab = Lab::new("remote-icmp");
    lab.settings.remote_tc = true;
    let base = 45300;
    let mappings: Vec<PortMapping> = [format!("{base}:80/udp"), format!("{}:81/udp", base + 1)]
        .iter()
        .map(|m| m.parse().unwrap())
        .collect();
    with_engine(&lab, Mode::Auto, &mappings, |outcomes| {
        for outcome in outcomes {
            assert!(outcome.is_ok(), "publish: {outcome:?}");
        }
        let pin_dir = &lab.settings.bpf_pin_dir;
        // A router's "too big" about a reply reaches the container, which learns the path MTU.
        for (front, remote) in [
            (
                SocketAddr::new(HOST_ADDR.parse().unwrap(), base),
                REMOTE_ADDR,
            ),
            (Client::Remote6.dial(base), REMOTE_ADDR6),
        ] {
            let remote: IpAddr = remote.parse().unwrap();
            let sock = udp_flow(&lab, front);
            let client = SocketAddr::new(remote, sock.local_addr().unwrap().port());
            assert_eq!(learned_mtu(&lab, remote), None, "before the error");
            let before = pier_bpf::remote_stats(pin_dir).unwrap().icmp;
            send_too_big(&lab, front, client);
            let started = std::time::Instant::now();
            while learned_mtu(&lab, remote) != Some(1280) {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(2),
                    "c1 never learned MTU 1280 towards {remote}: {:?}",
                    pier_bpf::remote_stats(pin_dir)
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            assert!(pier_bpf::remote_stats(pin_dir).unwrap().icmp > before);
        }
        // c1 has nothing on UDP 81: its "port unreachable" reaches the client as the front's,
        // so the client's connected socket sees the refusal.
        for front in [
            SocketAddr::new(HOST_ADDR.parse().unwrap(), base + 1),
            Client::Remote6.dial(base + 1),
        ] {
            let refused = lab
                .remote
                .run(|| {
                    let sock = connected_udp(front, std::time::Duration::from_secs(2));
                    sock.send(b"anyone?").unwrap();
                    sock.recv(&mut [0u8; 64]).map_err(|e| e.kind())
                })
                .unwrap();
            assert_eq!(
                refused,
                Err(std::io::ErrorKind::ConnectionRefused),
                "{front}: {:?}",
                pier_bpf::remote_stats(pin_dir)
            );
        }
        assert_eq!(
            remote_conntrack(&lab),
            Vec::<String>::new(),
            "all on the fast path"
        );
    });
}

/// One datagram from the remote client to `front` with `hops` as its TTL (hop limit) and
/// `size` bytes; what the client's connected socket then receives.
fn datagram(lab: &Lab, front: SocketAddr, hops: u32, size: usize) -> Result<usize, i32> {
    use nix::sys::socket::{setsockopt, sockopt};
    lab.remote
        .run(|| {
            let sock = connected_udp(front, std::time::Duration::from_millis(500));
            match front {
                SocketAddr::V4(_) => sock.set_ttl(hops).unwrap(),
                SocketAddr::V6(_) => setsockopt(&sock, sockopt::Ipv6Ttl, &(hops as i32)).unwrap(),
            }
            sock.send(&vec![b'x'; size]).unwrap();
            sock.recv(&mut vec![0u8; 65536])
                .map_err(|e| e.raw_os_error().unwrap_or(0))
        })
        .unwrap()
}

/// Sets the MTU of the host side of c1's veth (and so of its bridge).
fn set_c1_port_mtu(lab: &Lab, mtu: u32) {
    let status = lab
        .host
        .run(|| {
            std::process::Command::new("ip")
                .args([
                    "link",
                    "set",
                    "dev",
                    "pier-test-c1",
                    "mtu",
                    &mtu.to_string(),
                ])
                .status()
                .unwrap()
        })
        .unwrap();
    assert!(status.success());
}

#[test]
fn the_fast_path_forwards_as_a_router_would() {
    if !privileged("the_fast_path_forwards_as_a_router_would") {
        return;
    }
    let mut lab = Lab::new("remote-router");
    lab.settings.remote_tc = true;
    let base = 45400;
    let mappings = [format!("{base}:80/udp").parse().unwrap()];
    with_engine(&lab, Mode::Auto, &mappings, |outcomes| {
        assert!(outcomes[0].is_ok(), "publish: {outcomes:?}");
        let fronts = [
            SocketAddr::new(HOST_ADDR.parse().unwrap(), base),
            Client::Remote6.dial(base),
        ];
        for front in fronts {
            // The host is one hop: a datagram with one hop left stops there; with two it is
            // echoed (the echo's own TTL is the container's full default).
            assert!(datagram(&lab, front, 2, 16).is_ok(), "{front}, 2 hops");
            assert_eq!(
                datagram(&lab, front, 1, 16),
                Err(libc::EAGAIN),
                "{front}, 1 hop"
            );
        }
        // Larger than the container's link: left to the kernel, which tells the client its
        // path MTU (the connected socket sees EMSGSIZE) instead of the packet vanishing.
        set_c1_port_mtu(&lab, 1300);
        let too_big = datagram(&lab, fronts[0], 64, 1400);
        set_c1_port_mtu(&lab, 1500);
        assert_eq!(
            too_big,
            Err(libc::EMSGSIZE),
            "{:?}",
            pier_bpf::remote_stats(&lab.settings.bpf_pin_dir)
        );
        assert!(datagram(&lab, fronts[0], 64, 1400).is_ok(), "fits again");
    });
}
