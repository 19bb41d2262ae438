//! `pier bench scale`: does the cost of reaching a published port grow with the number of
//! published ports? Connect latency and requests/s with 1, 100 and 1,000 ports, for pier's
//! engines and for Docker-style iptables rules (one DNAT rule per port).
//!
//! Theory of operation: the pong server and client side are those of `pier bench net`. For each
//! port count N and each row, alone on the host: the row publishes N host ports (PORT…PORT+N-1)
//! to the server's port 8080 — pier rows as one container with N `-p` flags and the row's
//! `--publish-mode`, the Docker row as N DNAT rules in a chain, in order — and the measured port
//! is the LAST one (the worst case for a linear rule list; a map lookup does not care). Each
//! round takes the median of 200 sequential TCP connects (connect + close, timed from the
//! client's namespace) and one wrk -c1 cell. The row's ports are removed before the next row
//! publishes: rows are NOT interleaved here, because Docker's rules sit in PREROUTING and OUTPUT
//! in front of every other row's traffic and would charge their cost to it. The report gives per row and N the medians over
//! rounds, and the 1,000-to-1 ratio of connect latency (issue 5's goal: ≤ 1.05).
//!
//! Privileges: root. Black-box test: tests/bench_scale.rs (never timing asserts).
use super::interrupt;
use super::net::{engine, host, load, peers, report::median, topo, Client};
use anyhow::Context;
use serde::Serialize;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Flags of `pier bench scale`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Published-port counts, comma-separated
    #[arg(long, value_delimiter = ',', default_values_t = [1, 100, 1000])]
    ports: Vec<u16>,
    /// Rows, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = ScaleRow::ALL)]
    rows: Vec<ScaleRow>,
    /// Where the client runs: local (127.0.0.1) or remote (a netns joined by veth)
    #[arg(long, value_enum, default_value_t = Client::Local)]
    client: Client,
    /// Rounds per port count
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    rounds: u32,
    /// Seconds of wrk -c1 per cell
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    duration: u64,
    /// First host port; N ports are PORT … PORT+N-1
    #[arg(long, default_value_t = 20000)]
    port: u16,
    /// Also write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
    /// Also draw the connect latency of every row and port count as an SVG bar chart to FILE
    #[arg(long, value_name = "FILE")]
    svg: Option<std::path::PathBuf>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum ScaleRow {
    PierAuto,
    PierNat,
    DockerIptables,
}

impl ScaleRow {
    const ALL: [ScaleRow; 3] = [
        ScaleRow::PierAuto,
        ScaleRow::PierNat,
        ScaleRow::DockerIptables,
    ];

    fn label(self) -> &'static str {
        match self {
            ScaleRow::PierAuto => "pier auto",
            ScaleRow::PierNat => "pier nat",
            ScaleRow::DockerIptables => "Docker iptables (rule per port)",
        }
    }
}

/// Connects per connect-latency sample.
const CONNECTS: usize = 200;

#[derive(Debug, Serialize)]
struct Cell {
    ports: u16,
    connect_us: Vec<f64>,
    requests_per_s: Vec<f64>,
    connect_us_median: Option<f64>,
    requests_per_s_median: Option<f64>,
    failure: Option<String>,
}

#[derive(Debug, Serialize)]
struct RowOut {
    row: ScaleRow,
    label: &'static str,
    cells: Vec<Cell>,
    /// Connect latency with the most ports over that with the fewest.
    connect_ratio: Option<f64>,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let wrk =
        host::which("wrk").context("wrk is not installed (or not in PATH): apt install wrk")?;
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "pier bench scale needs root"
    );
    anyhow::ensure!(
        args.client != Client::Ipv6,
        "pier bench scale measures IPv4 clients only"
    );
    let pier = std::env::current_exe().context("locating the pier binary")?;
    interrupt::install(&load::RUNNING)?;
    topo::sweep_stale();
    let cpuset = (std::thread::available_parallelism().map_or(1, |n| n.get()) - 1).to_string();
    let mut cleanup = host::Cleanup::default();
    let server = engine::server(&mut cleanup, &pier, &cpuset, "1")
        .context("starting the pong server with pier run")?;
    let client = match args.client {
        Client::Remote => topo::remote_client(&mut cleanup, &server)?,
        _ => topo::ClientSide {
            netns: None,
            host_addr: Ipv4Addr::LOCALHOST.into(),
        },
    };
    let local = client.netns.is_none();
    if local && args.rows.contains(&ScaleRow::PierNat) {
        eprintln!(
            "pier bench scale: skipped pier nat: it serves remote clients (use --client remote)"
        );
    }
    let rows: Vec<ScaleRow> = ScaleRow::ALL
        .into_iter()
        .filter(|r| args.rows.contains(r) && !(local && *r == ScaleRow::PierNat))
        .collect();
    let mut out: Vec<RowOut> = rows
        .iter()
        .map(|&row| RowOut {
            row,
            label: row.label(),
            cells: Vec::new(),
            connect_ratio: None,
        })
        .collect();
    let ctx = Ctx {
        pier: &pier,
        server: &server,
        cpuset: &cpuset,
        client: &client,
        wrk: &wrk,
    };
    for &count in &args.ports {
        for row in out.iter_mut() {
            if interrupt::stopped() {
                break;
            }
            eprintln!(
                "pier bench scale: {} with {count} published port(s)",
                row.label
            );
            row.cells.push(measure_cell(&args, &ctx, row.row, count));
        }
    }
    let failures = cleanup.run();
    for row in &mut out {
        let first = row.cells.first().and_then(|c| c.connect_us_median);
        let last = row.cells.last().and_then(|c| c.connect_us_median);
        row.connect_ratio = first.zip(last).map(|(f, l)| l / f);
    }
    print!("{}", render(&args, &server.how, &out, &failures));
    if let Some(path) = &args.json {
        let json = serde_json::json!({
            "benchmark": "scale", "client": args.client, "rounds": args.rounds,
            "duration_s": args.duration, "server": server.how, "rows": out, "notes": failures,
        });
        std::fs::write(path, serde_json::to_string_pretty(&json)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, chart(&args, &out))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(if interrupt::stopped() { 130 } else { 0 })
}

/// One bar per (row, port count): the median connect latency, whiskers over the rounds.
fn chart(args: &Args, rows: &[RowOut]) -> String {
    let bars: Vec<super::bars::Bar> = rows
        .iter()
        .flat_map(|row| {
            row.cells.iter().map(|cell| {
                let min = cell
                    .connect_us
                    .iter()
                    .copied()
                    .fold(f64::INFINITY, f64::min);
                let max = cell.connect_us.iter().copied().fold(0.0, f64::max);
                super::bars::Bar {
                    label: format!("{}, {} port(s)", row.label, cell.ports),
                    value: match (cell.connect_us_median, &cell.failure) {
                        (Some(median), None) => Ok((median, min, max)),
                        (_, Some(why)) => Err(why.clone()),
                        (None, None) => Err("no sample".to_string()),
                    },
                }
            })
        })
        .collect();
    let title = format!(
        "pier bench scale: connect latency to the last published port ({:?} client)",
        args.client
    );
    super::bars::render(&title, "µs", &bars)
}

/// What every cell needs.
#[derive(Debug)]
struct Ctx<'a> {
    pier: &'a Path,
    server: &'a topo::Server,
    cpuset: &'a str,
    client: &'a topo::ClientSide,
    wrk: &'a Path,
}

/// Publishes `count` ports for `row`, measures them, and removes them again.
fn measure_cell(args: &Args, ctx: &Ctx, row: ScaleRow, count: u16) -> Cell {
    let mut cleanup = host::Cleanup::default();
    let first = args.port;
    let ports: Vec<u16> = (first..first.saturating_add(count)).collect();
    let mut cell = Cell {
        ports: count,
        connect_us: Vec::new(),
        requests_per_s: Vec::new(),
        connect_us_median: None,
        requests_per_s_median: None,
        failure: publish(row, &ports, ctx, &mut cleanup)
            .err()
            .map(|e| format!("{e:#}")),
    };
    let target = SocketAddr::new(ctx.client.host_addr, *ports.last().unwrap_or(&first));
    for _ in 0..args.rounds {
        if cell.failure.is_some() || interrupt::stopped() {
            break;
        }
        match sample(args, ctx, target) {
            Ok((connect, rps)) => {
                cell.connect_us.push(connect);
                cell.requests_per_s.push(rps);
            }
            Err(e) => cell.failure = Some(e),
        }
    }
    for failure in cleanup.run() {
        eprintln!("pier bench scale: cleanup: {failure}");
    }
    cell.connect_us_median = median(&cell.connect_us);
    cell.requests_per_s_median = median(&cell.requests_per_s);
    cell
}

fn publish(
    row: ScaleRow,
    ports: &[u16],
    ctx: &Ctx,
    cleanup: &mut host::Cleanup,
) -> anyhow::Result<()> {
    if row == ScaleRow::DockerIptables {
        return peers::docker_rules(ports, ctx.server, cleanup).map(drop);
    }
    let mode = if row == ScaleRow::PierAuto {
        "auto"
    } else {
        "nat"
    };
    let flags: Vec<String> = ports
        .iter()
        .map(|p| format!("{p}:{}", topo::SERVER_PORT))
        .collect();
    let mut extra: Vec<&str> = Vec::new();
    for flag in &flags {
        extra.extend(["-p", flag.as_str()]);
    }
    extra.extend(["--publish-mode", mode]);
    let name = format!(
        "pier-bench-{}-scale-{mode}-{}",
        std::process::id(),
        ports.len()
    );
    engine::run_pong(cleanup, ctx.pier, &name, ctx.cpuset, "1", &extra).map(drop)
}

/// Median connect latency (µs) and one wrk -c1 cell's requests/s.
fn sample(args: &Args, ctx: &Ctx, target: SocketAddr) -> Result<(f64, f64), String> {
    let connects = in_client_ns(ctx.client.netns.as_deref(), move || connect_times(target))?;
    let connect = median(&connects?).ok_or("no connect succeeded")?;
    let url = format!("http://{target}/ping");
    let load = load::Load {
        wrk: ctx.wrk,
        netns: ctx.client.netns.as_deref(),
        url: &url,
        connections: 1,
        duration: Duration::from_secs(args.duration),
    };
    let sample = load::measure(&load, &[])?;
    Ok((connect, sample.requests_per_s))
}

/// Times `CONNECTS` sequential connects to `target` (each closed at once), in µs.
fn connect_times(target: SocketAddr) -> Result<Vec<f64>, String> {
    (0..CONNECTS)
        .map(|_| {
            let started = Instant::now();
            let stream = TcpStream::connect_timeout(&target, Duration::from_secs(2))
                .map_err(|e| format!("connect to {target}: {e}"))?;
            let elapsed = started.elapsed().as_secs_f64() * 1e6;
            drop(stream);
            Ok(elapsed)
        })
        .collect()
}

/// Runs `body` on a thread of its own in network namespace `netns` (or here when None).
fn in_client_ns<T: Send + 'static>(
    netns: Option<&str>,
    body: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    let path = netns.map(|ns| format!("/run/netns/{ns}"));
    std::thread::spawn(move || {
        if let Some(path) = path {
            let file = std::fs::File::open(&path).map_err(|e| format!("opening {path}: {e}"))?;
            nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns into {path}: {e}"))?;
        }
        Ok(body())
    })
    .join()
    .map_err(|_| "the client thread panicked".to_string())?
}

fn render(args: &Args, server: &str, rows: &[RowOut], notes: &[String]) -> String {
    use super::table::{Align, Table};
    let client = match args.client {
        Client::Remote => "remote (netns via veth)",
        _ => "local (127.0.0.1)",
    };
    let mut out = format!(
        "pier bench scale: client {client}, {} round(s), connect = median of {CONNECTS} connects, \
         wrk -c1 {} s; measured port = the last one published\nserver: {server}\n\n",
        args.rounds, args.duration
    );
    let headers: Vec<String> = args.ports.iter().map(|n| format!("{n} port(s)")).collect();
    let mut columns = vec![("row", Align::Left)];
    columns.extend(headers.iter().map(|h| (h.as_str(), Align::Right)));
    columns.push(("connect last ÷ first", Align::Right));
    let mut table = Table::new(&columns);
    for row in rows {
        let mut cells = vec![row.label.to_string()];
        for cell in &row.cells {
            cells.push(
                match (
                    cell.connect_us_median,
                    cell.requests_per_s_median,
                    &cell.failure,
                ) {
                    (Some(c), Some(r), None) => format!("{c:.0} µs {r:.0}/s"),
                    _ => "failed".to_string(),
                },
            );
        }
        cells.push(row.connect_ratio.map_or("–".into(), |r| format!("{r:.2}")));
        table.row(cells);
    }
    out.push_str(&table.render());
    for row in rows {
        for cell in row.cells.iter().filter(|c| c.failure.is_some()) {
            let reason = cell.failure.as_deref().unwrap_or("");
            out.push_str(&format!(
                "failed: {} with {} ports: {reason}\n",
                row.label, cell.ports
            ));
        }
    }
    for note in notes {
        out.push_str(&format!("note: cleanup: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connects_to_a_listener_are_timed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let target = listener.local_addr().expect("addr");
        std::thread::spawn(move || listener.incoming().take(CONNECTS).for_each(drop));
        let times = in_client_ns(None, move || connect_times(target)).expect("thread");
        assert_eq!(times.expect("connects").len(), CONNECTS);
    }
}
