//! `pier bench net`: requests/s, latency and forwarder CPU of every way to reach a container's
//! port, side by side (issue 6; seed 000's experiment as one command).
//!
//! Theory of operation: start the pong server (a `pier run` container, or a namespace of the
//! benchmark's own with `--server netns`), pinned to `--cpuset` and limited to `--cpus`; make
//! the client side (`local` 127.0.0.1, `remote` a namespace joined by veth, `ipv6` ::1); set every
//! row up once (`peers.rs`; rows whose program is missing are skipped, rows whose setup fails are
//! marked failed with the reason); then run the schedule: for each round, for each concurrency,
//! for each row, one wrk cell (`load.rs`), the row order rotated one place each round (as
//! `pier bench scale` does). So the cells compared with each other (every row at one
//! concurrency in one round) run back to back: this 2-core VM drifts between a fast and a slow
//! state (one cell's rounds spread ±10–20%), and drift between the direct cell and the auto
//! cell would land in their ratio. The report gives the median and min–max over rounds and the
//! paired ratio to the reference row: the median over rounds of the per-round ratio of the two
//! cells (`report.rs`, `svg.rs`). A cell that fails marks its row failed and the run goes on. Everything the run
//! changed is on a cleanup stack (`host.rs`) unwound at the end, on error and on Ctrl-C
//! (`../interrupt.rs`); namespaces of runs that were killed outright are swept at the next start.
//! The `pier run` containers pin their eBPF objects in a dir of the run's own, removed last
//! (`pins.rs`).
//!
//! `pier bench scale` (`../scale.rs`) reuses the server, client, rules and load of this module.
//!
//! Layout: `topo.rs` server and client namespaces, `engine.rs` the `pier run` containers,
//! `peers.rs` the rows, `pins.rs` the private eBPF pin dir, `load.rs` wrk and /proc CPU, `report.rs` tables and JSON, `svg.rs` charts.
//!
//! Privileges: root. Black-box tests: tests/bench_net.rs (never timing asserts).
pub(super) mod engine;
pub(super) mod host;
pub(super) mod load;
pub(super) mod peers;
mod pg;
pub(super) mod pins;
pub(super) mod report;
mod svg;
pub(super) mod topo;

use super::interrupt;
use super::stats::rotated;
use anyhow::Context;
use host::{which, Cleanup};
use peers::{Ready, RowKind, Setup};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;
use topo::{ClientSide, Server};

/// Flags of `pier bench net`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Rows to measure, comma-separated (each only where its program is installed)
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = RowKind::ALL)]
    rows: Vec<RowKind>,
    /// Where the client runs: local (127.0.0.1), remote (a netns joined by veth), ipv6 (::1)
    #[arg(long, value_enum, default_value_t = Client::Local)]
    client: Client,
    /// wrk concurrencies (connections = threads), comma-separated
    #[arg(long, value_delimiter = ',', default_values_t = [1, 2, 4, 8])]
    conc: Vec<u32>,
    /// Seconds per cell
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    duration: u64,
    /// Rounds (every row at every concurrency once per round)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// How the server is started: pier (`pier run`), netns (a namespace of the benchmark's own),
    /// auto (pier, else netns with a printed reason)
    #[arg(long, value_enum, default_value_t = ServerKind::Auto)]
    server: ServerKind,
    /// CPUs the server (and the host row's server) may run on (default: the last core)
    #[arg(long)]
    cpuset: Option<String>,
    /// CPUs the client (wrk, pgbench) may run on, or `all` [default: the CPUs the server's
    /// cpuset leaves, so the client never takes the server's core; all when it leaves none]
    #[arg(long, value_name = "CPUS|all")]
    client_cpuset: Option<String>,
    /// CPU limit of the pier containers (`pier run --cpus`)
    #[arg(long, default_value = "1")]
    cpus: String,
    /// First host port; the Nth row of the full list (host=0 … haproxy=8) listens on PORT+N
    #[arg(long, default_value_t = 18080)]
    port: u16,
    /// What the client does: http (wrk against the pong server), pg (pgbench -S -M prepared
    /// against PostgreSQL in a container, seed 001)
    #[arg(long, value_enum, default_value_t = Workload::Http)]
    workload: Workload,
    /// Also write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also write two SVG charts (requests/s by concurrency, forwarder CPU per request) to FILE
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Client {
    Local,
    Remote,
    Ipv6,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    Http,
    Pg,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum ServerKind {
    Auto,
    Pier,
    Netns,
}

/// A row during the run.
#[derive(Debug)]
pub struct Row {
    pub kind: RowKind,
    pub command: String,
    pub target: Option<SocketAddr>,
    pub forwarders: Vec<i32>,
    pub failure: Option<String>,
    /// Samples per concurrency (in `--conc` order), by round (from 0); a round whose cell failed
    /// or did not run has none.
    pub samples: Vec<BTreeMap<u32, load::Sample>>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let wrk = which("wrk").context("wrk is not installed (or not in PATH): apt install wrk")?;
    if args.workload == Workload::Pg {
        which("pgbench")
            .context("pgbench is not installed (or not in PATH): apt install postgresql-contrib")?;
    }
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "pier bench net needs root: it makes namespaces, veths and iptables rules"
    );
    let pier = std::env::current_exe().context("locating the pier binary")?;
    let private_pins = pins::use_private();
    interrupt::install(&load::RUNNING)?;
    topo::sweep_stale();
    pins::sweep_stale();
    let cpuset = args.cpuset.clone().unwrap_or_else(last_core);
    let client_cpuset = client_cpus(&args, &cpuset)?;
    let work = std::env::temp_dir().join(format!("pier-bench-net-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let mut cleanup = Cleanup::default();
    let mut notes = Vec::new();
    if let Some(dir) = private_pins {
        notes.push(format!(
            "eBPF pins of the run's `pier run` containers (if any): {} (this run's own, removed \
             at the end; set PIER_BPF_PIN_DIR to choose the dir)",
            dir.display()
        ));
        cleanup.push(host::Undo::Pins(dir));
    }
    cleanup.push(host::Undo::Dir(work.clone()));
    let (server, engine) = match args.workload {
        Workload::Http => start_server(&args, &mut cleanup, &pier, &cpuset, &mut notes)?,
        Workload::Pg => (
            pg::server(
                &mut cleanup,
                &pier,
                &work,
                &cpuset,
                &args.cpus,
                auto_port(&args),
            )?,
            true,
        ),
    };
    eprintln!("pier bench net: server: {}", server.how);
    let mut client = client_side(args.client, &server, &mut cleanup)?;
    client.cpuset = client_cpuset;
    let setup = Setup {
        server: &server,
        pier: &pier,
        work: &work,
        cpuset: &cpuset,
        cpus: &args.cpus,
        listen: listen_address(args.client),
        client: args.client,
        engine,
        pg_auto_port: (args.workload == Workload::Pg).then(|| auto_port(&args)),
    };
    let (mut rows, skipped) = prepare_rows(&args, &setup, &client, &mut cleanup);
    measure(&args, &wrk, &client, &mut rows, &work);
    notes.extend(cleanup.run());
    let placement = report::Placement {
        server: &cpuset,
        client: client.cpuset.as_deref(),
    };
    let report = report::build(&args, &server, placement, &rows, skipped, notes, &wrk);
    print!("{}", report::render(&report));
    write_outputs(&args, &report)?;
    Ok(if interrupt::stopped() { 130 } else { 0 })
}

fn write_outputs(args: &Args, report: &report::NetReport) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, svg::render(report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// The host port of the `pier auto` row (its place in the full row list).
fn auto_port(args: &Args) -> u16 {
    let index = RowKind::ALL
        .iter()
        .position(|k| *k == RowKind::PierAuto)
        .unwrap_or(0);
    args.port.saturating_add(index as u16)
}

/// The last CPU this process may run on, as a cpuset (the server's default pin).
fn last_core() -> String {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    (n - 1).to_string()
}

fn start_server(
    args: &Args,
    cleanup: &mut Cleanup,
    pier: &Path,
    cpuset: &str,
    notes: &mut Vec<String>,
) -> anyhow::Result<(Server, bool)> {
    if args.server != ServerKind::Netns {
        match engine::server(cleanup, pier, cpuset, &args.cpus) {
            Ok(server) => return Ok((server, true)),
            Err(e) if args.server == ServerKind::Auto => {
                let note = format!(
                    "`pier run` could not start the server ({e:#}); it runs in a namespace of \
                     the benchmark's own instead, and the pier auto/nat rows are skipped"
                );
                eprintln!("pier bench net: {note}");
                notes.push(note);
            }
            Err(e) => return Err(e.context("starting the server with pier run")),
        }
    }
    Ok((topo::netns_server(cleanup, pier, cpuset)?, false))
}

fn client_side(
    client: Client,
    server: &Server,
    cleanup: &mut Cleanup,
) -> anyhow::Result<ClientSide> {
    Ok(match client {
        Client::Local => ClientSide {
            netns: None,
            host_addr: Ipv4Addr::LOCALHOST.into(),
            cpuset: None,
        },
        Client::Ipv6 => ClientSide {
            netns: None,
            host_addr: Ipv6Addr::LOCALHOST.into(),
            cpuset: None,
        },
        Client::Remote => topo::remote_client(cleanup, server)?,
    })
}

/// The client's pin: `--client-cpuset`, else the CPUs the server leaves
/// ([`topo::client_cpus_left`]); None: not pinned.
fn client_cpus(args: &Args, server_cpuset: &str) -> anyhow::Result<Option<String>> {
    match args.client_cpuset.as_deref() {
        Some("all") => Ok(None),
        Some(list) => topo::usable_cpus(list)
            .map(|()| Some(list.to_string()))
            .map_err(|e| anyhow::anyhow!("--client-cpuset: {e}")),
        None => {
            let all = std::thread::available_parallelism().map_or(1, |n| n.get());
            topo::client_cpus_left(all, server_cpuset).map_err(|e| anyhow::anyhow!("--cpuset: {e}"))
        }
    }
}

fn listen_address(client: Client) -> IpAddr {
    match client {
        Client::Ipv6 => Ipv6Addr::UNSPECIFIED.into(),
        _ => Ipv4Addr::UNSPECIFIED.into(),
    }
}

/// Sets every requested row up (in the canonical order, each once); returns the rows and the
/// skipped ones with why.
fn prepare_rows(
    args: &Args,
    setup: &Setup,
    client: &ClientSide,
    cleanup: &mut Cleanup,
) -> (Vec<Row>, Vec<(RowKind, String)>) {
    let (mut rows, mut skipped) = (Vec::new(), Vec::new());
    let all = RowKind::ALL.into_iter().enumerate();
    for (n, kind) in all.filter(|(_, k)| args.rows.contains(k)) {
        if let Some(reason) = peers::skip_reason(kind, setup) {
            skipped.push((kind, reason));
            continue;
        }
        let port = args.port.saturating_add(n as u16);
        let prepared = peers::prepare(kind, port, setup, cleanup);
        rows.push(row_of(kind, prepared, client, args.conc.len()));
    }
    (rows, skipped)
}

fn row_of(
    kind: RowKind,
    prepared: anyhow::Result<Ready>,
    client: &ClientSide,
    cells: usize,
) -> Row {
    let mut row = Row {
        kind,
        command: String::new(),
        target: None,
        forwarders: Vec::new(),
        failure: None,
        samples: vec![BTreeMap::new(); cells],
    };
    match prepared {
        Ok(ready) => {
            let mut target = ready.target;
            if kind != RowKind::Direct && client.netns.is_some() {
                target.set_ip(client.host_addr);
            }
            row.target = Some(target);
            row.command = ready.command;
            row.forwarders = ready.forwarders;
        }
        Err(e) => row.failure = Some(format!("{e:#}")),
    }
    row
}

/// Runs the interleaved schedule: round, concurrency, then every row in rotated order.
fn measure(args: &Args, wrk: &Path, client: &ClientSide, rows: &mut [Row], work: &Path) {
    let total = args.rounds as usize * rows.len() * args.conc.len();
    let mut progress = Progress::new(total);
    for round in 0..args.rounds {
        for (cell, &conc) in args.conc.iter().enumerate() {
            for at in rotated(rows.len(), round as usize) {
                let row = &mut rows[at];
                progress.step(round, row.kind, conc);
                if interrupt::stopped() {
                    progress.done();
                    return;
                }
                measure_cell(args, wrk, client, row, work, (round, cell, conc));
            }
        }
    }
    progress.done();
}

/// One cell: `row` at `--conc[cell]` = `conc` in `round`; a failure marks the row failed.
fn measure_cell(
    args: &Args,
    wrk: &Path,
    client: &ClientSide,
    row: &mut Row,
    work: &Path,
    (round, cell, conc): (u32, usize, u32),
) {
    let (Some(target), None) = (row.target, &row.failure) else {
        return;
    };
    let url = match target {
        SocketAddr::V6(a) => format!("http://[{}]:{}/ping", a.ip(), a.port()),
        SocketAddr::V4(a) => format!("http://{a}/ping"),
    };
    let load = load::Load {
        wrk,
        netns: client.netns.as_deref(),
        cpuset: client.cpuset.as_deref(),
        url: &url,
        connections: conc,
        duration: Duration::from_secs(args.duration),
    };
    let measured = match args.workload {
        Workload::Http => load::measure(&load, &row.forwarders),
        Workload::Pg => pg::measure(
            &pg::Bench {
                netns: client.netns.as_deref(),
                cpuset: client.cpuset.as_deref(),
                target,
                clients: conc,
                duration: load.duration,
                log_dir: work,
            },
            &row.forwarders,
        ),
    };
    match measured {
        Ok(sample) => {
            row.samples[cell].insert(round, sample);
        }
        Err(_) if interrupt::stopped() => {}
        Err(reason) => row.failure = Some(format!("at -c{conc}: {reason}")),
    }
}

/// The progress bar on stderr: redrawn in place on a terminal, one line per round otherwise.
#[derive(Debug)]
struct Progress {
    total: usize,
    done: usize,
    terminal: bool,
    last_round: Option<u32>,
}

impl Progress {
    fn new(total: usize) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        Progress {
            total,
            done: 0,
            terminal,
            last_round: None,
        }
    }

    fn step(&mut self, round: u32, kind: RowKind, conc: u32) {
        self.done += 1;
        let width = 24;
        let filled = width * self.done / self.total.max(1);
        let bar = format!("{}{}", "#".repeat(filled), ".".repeat(width - filled));
        let text = format!(
            "[{bar}] {}/{} round {}: {} -c{conc}",
            self.done,
            self.total,
            round + 1,
            kind.label()
        );
        let mut err = std::io::stderr();
        if self.terminal {
            let _ = write!(err, "\r\x1b[K{text}");
            let _ = err.flush();
        } else if self.last_round != Some(round) {
            let _ = writeln!(err, "{text}");
        }
        self.last_round = Some(round);
    }

    fn done(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
