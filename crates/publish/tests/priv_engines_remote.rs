//! Remote clients of the auto engine with `remote_tc` (PIER_REMOTE_TC=1) take the tc fast path
//! (crates/bpf/src/bpf/remote.bpf.c), never conntrack, and the programs leave every interface
//! when the last port goes; without it they are nat's: the same publishes and remote clients
//! under nat and under auto, in labs of their own (see priv_engines_support), with the host
//! namespace's conntrack table read after the clients ran.
//!
//! Theory: nat's DNAT must leave conntrack entries from the remote client's address (the
//! control: it shows the check can fail); auto must leave none, while its tc programs count
//! translated packets both ways and one flow per connection or UDP exchange. Every client
//! still gets the full check of the matrix (1 MiB echo with checksum after a half-close, an
//! urgent byte, 16 datagrams) and the server sees the remote client's own address, over IPv4
//! to the wildcard and to a specific host address, and over IPv6. After removal the remote map
//! is empty.
//!
//! Needs root, cgroup2, nft, and /proc/<tid>/net/nf_conntrack (CONFIG_NF_CONNTRACK_PROCFS).
mod priv_engines_support;

use std::net::{IpAddr, SocketAddr};

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
    assert_eq!(
        pier_bpf::attached_remote(pin_dir),
        Vec::new(),
        "with nothing published, no interface keeps a tc program"
    );
}
