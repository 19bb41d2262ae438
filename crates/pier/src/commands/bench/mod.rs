//! `pier bench`: scenario benchmarks, reproducible on any machine, side by side with the real peers
//! (issue 6). Each scenario is a subcommand: `start` (container start time, issue 2), `net`
//! (requests/s and forwarder CPU through every way to reach a container's port, issue 5), `scale`
//! (does that cost grow with the number of published ports), and the hidden `pong`, the HTTP
//! server `net` measures through.
//!
//! Layout: `net/` is the network scenario (its own header says how), `scale.rs` reuses it,
//! `pong.rs` is its server, `interrupt.rs` Ctrl-C handling for long runs. `start.rs` runs the
//! start scenario; `bundle.rs` builds its OCI bundles; `rows.rs` says what is measured and how
//! (runtimes and the engine's `pier run` rows); `peers_engine.rs` starts and removes the private
//! dockerd and podman setup of the `docker run`/`podman run` rows; `runner.rs` times one run; `stats.rs` holds the
//! medians and the interleaved schedule; `report.rs` and `table.rs` print the results and write
//! the JSON (`table.rs` serves `net` too).
//!
//! Benchmarks are never timed tests: tests/bench_*.rs check shapes, cleanup and bad input only.
mod bars;
mod bundle;
mod interrupt;
mod net;
mod peers_engine;
mod pong;
mod report;
mod rows;
mod runner;
mod scale;
mod start;
mod stats;
mod table;

/// Flags of `pier bench`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Measure pier against its peers (crun, runc, docker-proxy, nginx, ...) on this machine"
)]
pub struct Args {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(clap::Subcommand, Debug)]
enum Scenario {
    /// Container start time of pier, crun, runc, the bare namespace floor and the engine's
    /// `pier run` (no network, bridge, bridge + published port) against `docker run` (a private
    /// dockerd) and `podman run`, without seccomp and with Docker's default profile
    Start(start::Args),
    /// Requests/s, latency and forwarder CPU through every way to reach a container's port
    /// (host, direct, pier auto/nat/proxy, docker-proxy, kernel NAT, nginx, haproxy)
    Net(net::Args),
    /// Connect latency and requests/s with 1, 100 and 1,000 published ports, per engine and for
    /// Docker-style iptables rules
    Scale(scale::Args),
    /// The HTTP server `bench net` measures through (answers every request with "pong")
    #[command(hide = true)]
    Pong(pong::Args),
}

/// Runs the benchmark; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.scenario {
        Scenario::Start(args) => start::run(args),
        Scenario::Net(args) => net::run(args),
        Scenario::Scale(args) => scale::run(args),
        Scenario::Pong(args) => pong::run(args),
    }
}
