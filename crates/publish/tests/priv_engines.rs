//! The matrix of issue 5 against the real kernel: engine (ebpf, nat, proxy, auto) × protocol
//! (tcp, udp) × client (host 127.0.0.1, host ::1, host address over IPv4 and IPv6, remote
//! client over IPv4 and IPv6, a container to its own published port, another container on its
//! network to it, a container on another network to it) × publish address (wildcard,
//! 127.0.0.1, a specific host address). The container has an IPv4 and an IPv6 address, so the
//! nat engine's IPv6 maps are exercised too.
//!
//! Theory: one lab per engine (see priv_engines_support), the six publishes of that engine made
//! at once (each its own plan and apply), then every cell run as a client process, eight at a
//! time. A reached cell has echoed 1 MiB (TCP, checksum compared) after a half-close and
//! delivered one urgent byte as urgent, or echoed 16 datagrams (UDP); the kernel engines show
//! the server the remote client's own address, and the ebpf programs (ebpf, auto) show it a
//! container client's own address (no hairpin masquerade). Cells that must not reach (a `127.0.0.1:`
//! publish from the remote client, a kernel engine's missing front) must time out or be
//! refused. The nat engine refuses a loopback publish at plan time, as expected.
//!
//! Needs root, cgroup2, nft and (for the proxy engine) the pier binary.
mod priv_engines_support;

use std::net::IpAddr;

use pier_publish::engine::Mode;
use pier_publish::PortMapping;
use priv_engines_support::{
    privileged, run_client, with_engine, Client, Lab, Report, C1, C2, HOST_ADDR, REMOTE_ADDR,
    REMOTE_ADDR6,
};

/// Not a test: the body of the client processes the matrix starts (does nothing otherwise).
#[test]
fn client_process() {
    if let Ok(spec) = std::env::var("PIER_TEST_CLIENT") {
        priv_engines_support::client_main(&spec);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Front {
    Wildcard,
    Loopback,
    HostAddr,
}

const FRONTS: [Front; 3] = [Front::Wildcard, Front::Loopback, Front::HostAddr];

fn spec(front: Front, proto: &str, port: u16) -> PortMapping {
    let text = match front {
        Front::Wildcard => format!("{port}:80/{proto}"),
        Front::Loopback => format!("127.0.0.1:{port}:80/{proto}"),
        Front::HostAddr => format!("{HOST_ADDR}:{port}:80/{proto}"),
    };
    text.parse().unwrap()
}

/// Whether `client` reaches a `front` publish of `mode` over `proto` (None: the publish itself
/// is refused). The specific front is an IPv4 address, so IPv6 clients reach only wildcards.
fn expected(mode: Mode, proto: &str, client: Client, front: Front) -> Option<bool> {
    use Client::*;
    let remote = matches!(client, Remote | Remote6);
    let container = matches!(client, Own | Other | Foreign);
    Some(match (front, mode) {
        (Front::Loopback, Mode::Nat) => return None,
        // A container's 127.0.0.1 is its own: it dials the host address, which is not published.
        (Front::Loopback, _) => client == Host127,
        // The programs serve the host and registered containers on the target's network; a
        // container on another network (Foreign) is left to nat (auto), unreachable in ebpf.
        (Front::Wildcard, Mode::Ebpf) => !remote && client != Foreign,
        (Front::Wildcard, Mode::Nat) => !matches!(client, Host127 | Host6),
        // pier proxy's known limit, shared with docker-proxy: a wildcard UDP listener answers
        // from the kernel's route choice (the bridge's address towards a container), not the
        // address the container sent to, so a container's connected socket drops the reply.
        (Front::Wildcard, Mode::Proxy) => proto == "tcp" || !container,
        (Front::Wildcard, _) => true,
        (Front::HostAddr, Mode::Ebpf) => matches!(client, HostAddr | Own | Other),
        (Front::HostAddr, _) => matches!(client, HostAddr | Remote) || container,
    })
}

/// The address the server must see for a reached `client` (None: not checked). Remote clients
/// keep theirs in the kernel engines; containers on the target's network keep theirs where
/// the programs redirect them (ebpf, auto), while nat masquerades that hairpin.
fn must_see(mode: Mode, client: Client) -> Option<IpAddr> {
    let ip = |text: &str| Some(text.parse().unwrap());
    let programs = matches!(mode, Mode::Ebpf | Mode::Auto);
    match client {
        Client::Remote if keeps_source(mode) => ip(REMOTE_ADDR),
        Client::Remote6 if keeps_source(mode) => ip(REMOTE_ADDR6),
        Client::Own if programs => ip(C1),
        Client::Other if programs => ip(C2),
        _ => None,
    }
}

/// Whether the server must see the remote client's own address.
fn keeps_source(mode: Mode) -> bool {
    mode != Mode::Proxy
}

fn matrix(mode: Mode, base_port: u16) {
    let lab = Lab::new(mode.as_str());
    let mut mappings = Vec::new();
    let mut cells = Vec::new();
    for (i, front) in FRONTS.into_iter().enumerate() {
        for (j, proto) in ["tcp", "udp"].into_iter().enumerate() {
            let port = base_port + (i * 2 + j) as u16;
            mappings.push(spec(front, proto, port));
            for client in Client::ALL {
                cells.push((mappings.len() - 1, front, proto, port, client));
            }
        }
    }
    with_engine(&lab, mode, &mappings, |outcomes| {
        let mut failures = Vec::new();
        for (k, outcome) in outcomes.iter().enumerate() {
            let front = FRONTS[k / 2];
            let refused = expected(mode, "tcp", Client::Host127, front).is_none();
            if outcome.is_err() != refused {
                failures.push(format!("{mode:?} publish {}: {outcome:?}", mappings[k]));
            }
        }
        let reports: Vec<_> = std::thread::scope(|s| {
            let chunks: Vec<_> = cells.chunks(cells.len().div_ceil(8)).collect();
            let handles: Vec<_> = chunks
                .into_iter()
                .map(|chunk| {
                    let lab = &lab;
                    s.spawn(move || {
                        chunk
                            .iter()
                            .filter(|(m, ..)| outcomes[*m].is_ok())
                            .map(|&(_, front, proto, port, client)| {
                                (
                                    front,
                                    proto,
                                    client,
                                    run_client(lab, client, proto, client.dial(port)),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        for (front, proto, client, report) in reports {
            let want = expected(mode, proto, client, front).unwrap();
            let cell = format!("{mode:?} {proto} {client:?} -> {front:?}");
            match (&report, want) {
                (Report::Ok { seen }, true) => {
                    if let Some(want) = must_see(mode, client).filter(|w| w != seen) {
                        failures.push(format!("{cell}: server saw {seen}, not {want}"));
                    }
                }
                (Report::Unreachable, false) => {}
                _ => failures.push(format!("{cell}: expected reachable={want}, got {report:?}")),
            }
        }
        assert!(
            failures.is_empty(),
            "{} cell(s) failed:\n{}",
            failures.len(),
            failures.join("\n")
        );
    });
}

#[test]
fn ebpf_matrix() {
    if privileged("ebpf_matrix") {
        matrix(Mode::Ebpf, 41000);
    }
}

#[test]
fn nat_matrix() {
    if privileged("nat_matrix") {
        matrix(Mode::Nat, 42000);
    }
}

#[test]
fn proxy_matrix() {
    if !privileged("proxy_matrix") {
        return;
    }
    if priv_engines_support::pier_binary().is_none() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "proxy_matrix needs the pier binary under CI"
        );
        eprintln!(
            "skipping: proxy_matrix needs the pier binary (cargo build -p pier, or PIER_BINARY)"
        );
        return;
    }
    matrix(Mode::Proxy, 43000);
}

#[test]
fn auto_matrix() {
    if privileged("auto_matrix") {
        matrix(Mode::Auto, 44000);
    }
}
