//! What a container's network costs on the `pier run` start path: `plan` + `attach` on the
//! default bridge, against `loopback_up` alone (all `--network none` does), and `detach`.
//!
//! Runs everything inside a new anonymous network namespace standing in for the host (bridge,
//! veths, nftables table and the namespace vanish when it ends) with a temporary state
//! directory; each round makes a fresh "container" namespace outside the timed section.
//! Prints the median and 90th percentile of each step in microseconds.
//! Usage (root): `cargo run --release -p pier-engine --example network_attach [ROUNDS]`.
use std::time::{Duration, Instant};

use pier_engine::network::{loopback_up, Networks, POOL_ENV};
use pier_engine::Paths;
use pier_net::netns::NetNs;

#[derive(Default)]
struct Samples {
    lo: Vec<Duration>,
    plan: Vec<Duration>,
    attach: Vec<Duration>,
    detach: Vec<Duration>,
    release: Vec<Duration>,
}

fn timed<T>(samples: &mut Vec<Duration>, work: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let result = work();
    samples.push(start.elapsed());
    result
}

fn round(nets: &Networks, i: usize, samples: &mut Samples) {
    let none = NetNs::new_anonymous().expect("netns");
    timed(&mut samples.lo, || loopback_up(none.fd())).expect("loopback up");
    let container = NetNs::new_anonymous().expect("netns");
    let network = nets.get("bridge").expect("default network");
    let id = format!("{i:08x}bench");
    let plan = timed(&mut samples.plan, || nets.plan(&network, &id, None, None)).expect("plan");
    timed(&mut samples.attach, || nets.attach(&plan, container.fd())).expect("attach");
    timed(&mut samples.detach, || nets.detach(&plan)).expect("detach");
    let plan = nets.plan(&network, &id, None, None).expect("plan");
    let container = NetNs::new_anonymous().expect("netns");
    nets.attach(&plan, container.fd()).expect("attach");
    drop(container);
    timed(&mut samples.release, || nets.release(&plan)).expect("release");
}

fn report(step: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q) as usize].as_micros();
    println!(
        "{step:>28}: median {:>6} us   p90 {:>6} us",
        at(0.5),
        at(0.9)
    );
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .map_or(200, |n| n.parse().expect("ROUNDS"));
    assert!(
        nix::unistd::geteuid().is_root(),
        "needs root (namespaces, links, nftables)"
    );
    std::env::set_var(POOL_ENV, "198.18.0.0/15:24");
    let state = tempfile::tempdir().expect("state dir");
    let paths = Paths {
        state_dir: state.path().to_path_buf(),
    };
    let host = NetNs::new_anonymous().expect("host netns");
    let mut samples = host
        .run(|| {
            let nets = Networks::new(&paths);
            let mut samples = Samples::default();
            (0..rounds).for_each(|i| round(&nets, i, &mut samples));
            samples
        })
        .expect("enter the host netns");
    let mut bridge: Vec<Duration> = (0..rounds)
        .map(|i| samples.plan[i] + samples.attach[i])
        .collect();
    println!("{rounds} rounds");
    report("loopback_up (--network none)", &mut samples.lo);
    report("plan", &mut samples.plan);
    report("attach", &mut samples.attach);
    report("plan + attach (bridge)", &mut bridge);
    report("detach (netns alive)", &mut samples.detach);
    report("release (netns gone)", &mut samples.release);
}
