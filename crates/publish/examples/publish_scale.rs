//! Connect latency through each publish engine with 1 and with 1,000 published ports (issue 5:
//! the ratio should stay ≤ 1.05, because a publish is a hash-map entry or an nft map element,
//! never a rule or a program per port).
//!
//! Theory: an anonymous "host" network namespace with a bridge (198.18.2.1, and the published front
//! 198.18.1.1) to a "container" namespace whose server accepts and closes; this process moves into a `pier-test-` cgroup2 directory so its
//! connects run the ebpf engine's programs (the pins go to a private bpffs). Per engine, port
//! 30000 is published; then rounds alternate between 1 port and 1,000 (999 more published on
//! 30001-30999, or removed again); each round times `ROUNDS_CONNECTS` connects from the host to
//! 198.18.1.1:30000 and keeps the median. The figures are the medians of the round medians.
//! Everything is undone on exit (entries, pins, mount, cgroup; the namespaces vanish).
//!
//! Run: `cargo run --release -p pier-publish --example publish_scale` as root
//! (`PIER_BINARY=target/release/pier` adds the proxy engine).
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use pier_net::netns::NetNs;
use pier_net::{Netlink, Route};
use pier_publish::engine::{select, Entry, Mode, Publish, Settings, Target};
use pier_publish::PortMapping;

#[path = "../tests/priv_engines_support/bpf_home.rs"]
mod bpf_home;
use bpf_home::{BpfHome, CGROUP2};

const ROUNDS: usize = 11;
const ROUND_CONNECTS: usize = 400;
const FRONT: &str = "198.18.1.1";

fn main() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("publish_scale needs root (namespaces, cgroup BPF, nft)");
        std::process::exit(2);
    }
    let bench = Bench::new();
    let mut modes = vec![Mode::Ebpf, Mode::Nat];
    if std::env::var_os("PIER_BINARY").is_some() {
        modes.push(Mode::Proxy);
    }
    println!("engine  1 port (µs)  1,000 ports (µs)  ratio");
    for mode in modes {
        let (one, thousand) = bench.host.run(|| measure(&bench, mode)).unwrap();
        println!(
            "{:<6}  {:>11.1}  {:>16.1}  {:>5.3}",
            mode.as_str(),
            one,
            thousand,
            thousand / one
        );
    }
}

struct Bench {
    host: NetNs,
    _container: NetNs,
    /// Dropped after `Bench::drop` has moved this process back to `home`.
    _bpf: BpfHome,
    home: PathBuf,
    settings: Settings,
}

impl Bench {
    fn new() -> Bench {
        let bpf = BpfHome::new("bench");
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let rel = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or("/")
            .trim_start_matches('/');
        let home = Path::new(CGROUP2).join(rel);
        std::fs::write(
            bpf.cgroup.join("cgroup.procs"),
            std::process::id().to_string(),
        )
        .unwrap();
        let settings = bpf.settings(
            std::env::var_os("PIER_BINARY")
                .unwrap_or("pier".into())
                .into(),
        );
        let bench = Bench {
            host: NetNs::new_anonymous().unwrap(),
            _container: NetNs::new_anonymous().unwrap(),
            _bpf: bpf,
            home,
            settings,
        };
        bench.host.run(|| wire(&bench._container)).unwrap();
        let server = bench
            ._container
            .run(|| {
                inside();
                TcpListener::bind("0.0.0.0:80").unwrap()
            })
            .unwrap();
        std::thread::spawn(move || {
            for conn in server.incoming() {
                drop(conn)
            }
        });
        bench
    }

    fn target(&self) -> Target {
        Target {
            container_id: "pier-test-bench".into(),
            addresses: vec!["198.18.2.2".parse().unwrap()],
            bridge: Some("pier-test-br".into()),
        }
    }
}

impl Drop for Bench {
    fn drop(&mut self) {
        let _ = std::fs::write(
            self.home.join("cgroup.procs"),
            std::process::id().to_string(),
        );
    }
}

fn index(nl: &mut Netlink, name: &str) -> u32 {
    nl.link_index(name).unwrap().unwrap()
}

fn wire(container: &NetNs) {
    let mut nl = Netlink::open().unwrap();
    nl.create_bridge("pier-test-br").unwrap();
    let br = index(&mut nl, "pier-test-br");
    nl.add_address(br, "198.18.2.1".parse().unwrap(), 24)
        .unwrap();
    nl.set_up(br, true).unwrap();
    nl.create_veth("pier-test-c", "eth0", Some(container.fd()))
        .unwrap();
    let veth = index(&mut nl, "pier-test-c");
    nl.set_master(veth, br).unwrap();
    nl.set_up(veth, true).unwrap();
    nl.add_address(br, FRONT.parse().unwrap(), 24).unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1\n").unwrap();
}

fn inside() {
    let mut nl = Netlink::open().unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    let eth0 = index(&mut nl, "eth0");
    nl.add_address(eth0, "198.18.2.2".parse().unwrap(), 24)
        .unwrap();
    nl.set_up(eth0, true).unwrap();
    nl.add_route(&Route::default_via("198.18.2.1".parse().unwrap()))
        .unwrap();
}

fn publish(engine: &dyn Publish, target: &Target, spec: &str) -> Vec<Entry> {
    let mapping: PortMapping = spec.parse().unwrap();
    let (_, entries) = engine.plan(target, &[mapping]).unwrap();
    engine.apply_recorded(target, &entries).unwrap()
}

/// Median connect time in µs over one round.
fn round() -> f64 {
    let to: SocketAddr = format!("{FRONT}:30000").parse().unwrap();
    let mut times: Vec<Duration> = (0..ROUND_CONNECTS)
        .map(|_| {
            let start = Instant::now();
            let conn = TcpStream::connect(to).unwrap();
            let took = start.elapsed();
            drop(conn);
            took
        })
        .collect();
    times.sort();
    times[times.len() / 2].as_secs_f64() * 1e6
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// (1 port, 1,000 ports) medians for `mode`, rounds interleaved.
fn measure(bench: &Bench, mode: Mode) -> (f64, f64) {
    let engine = select(mode, &bench.settings).unwrap();
    let target = bench.target();
    let first = publish(engine.as_ref(), &target, &format!("{FRONT}:30000:80"));
    round();
    let (mut one, mut thousand) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        one.push(round());
        let more = publish(
            engine.as_ref(),
            &target,
            &format!("{FRONT}:30001-30999:1001-1999"),
        );
        thousand.push(round());
        engine.remove(&more).unwrap();
    }
    engine.remove(&first).unwrap();
    (median(one), median(thousand))
}
