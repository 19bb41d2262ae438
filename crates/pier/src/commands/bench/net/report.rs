//! The report of `pier bench net`: per row and concurrency the median and min–max over rounds of
//! requests/s, the medians of p50/p99 latency and of forwarder CPU (% of a core, µs per request),
//! and the paired ratio of the row's requests/s to the reference row's; as terminal tables laid
//! out like seed 000's summary (rows down, `wrk -cN` across, a cell "CPU% req/s") and as JSON.
//!
//! The paired ratio: for each round in which both cells (this row and the reference row at the
//! same concurrency) were measured, this row's requests/s over the reference's; then the median
//! and min–max of those per-round ratios. The two cells of a pair run back to back (see the
//! schedule in `mod.rs`), so the machine's drift between rounds cancels out of each ratio, which
//! a ratio of the two medians (kept as `ratio_to_direct`) does not do. A round in which either
//! cell failed or did not run is left out of that pair; `rounds` counts the pairs used. A
//! forwarder's CPU per request is paired the same way to docker-proxy's (the goal for
//! the proxy engine is a ratio to it), when that row was measured.
//!
//! JSON shape: `{"benchmark":"net","workload":"http","client","duration_s","rounds","concurrency":[..],
//! "server","cpuset","client_cpuset","machine":{"cores","kernel","cpu","versions":{..}},
//! "rows":[{"row","label","command","status":"ok"|"failed","reason","cells":[{"connections",
//! "samples":[{"round","requests_per_s","requests","errors","p50_us","p99_us","cpu_percent",
//! "cpu_us_per_request"}], "requests_per_s":{"median","min","max"},"p50_us","p99_us","cpu_percent",
//! "cpu_us_per_request","ratio_to_direct","ratio_paired":{"median","min","max","rounds"},
//! "cpu_paired_to_docker_proxy":{..}|null}]}],
//! "skipped":[{"row","reason"}], "notes":[..], "interrupted","ratio_base"}`. Both ratios are
//! against `ratio_base`: the direct row (for every client: the benchmark's network is routed, so
//! the remote client reaches the container's address too), or the host row when direct was not
//! measured (left out with `--rows`, or failed before its first cell). `ratio_to_direct` is the
//! ratio of the two medians over rounds; `ratio_paired` the paired ratio above (`round` counts
//! from 0).
//!
//! Pure code apart from reading the machine's facts; unit tests below.
use super::load::Sample;
use super::peers::RowKind;
use super::topo::Server;
use super::{Args, Client, Row};
use crate::commands::bench::table::{Align, Table};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};

#[derive(Debug, Serialize)]
pub struct NetReport {
    pub benchmark: &'static str,
    pub workload: super::Workload,
    pub client: Client,
    pub duration_s: u64,
    pub rounds: u32,
    pub concurrency: Vec<u32>,
    pub server: String,
    pub cpuset: String,
    /// The client's pin (`taskset -c`), null when not pinned.
    pub client_cpuset: Option<String>,
    pub machine: Machine,
    pub rows: Vec<RowOut>,
    pub skipped: Vec<SkippedOut>,
    pub notes: Vec<String>,
    pub interrupted: bool,
    /// The row ratios are taken against: direct, or the host row when direct was not measured.
    pub ratio_base: Option<RowKind>,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub kernel: String,
    pub cpu: String,
    pub versions: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct RowOut {
    pub row: RowKind,
    pub label: &'static str,
    pub command: String,
    pub status: &'static str,
    pub reason: Option<String>,
    pub cells: Vec<CellOut>,
}

#[derive(Debug, Serialize)]
pub struct CellOut {
    pub connections: u32,
    pub samples: Vec<RoundSample>,
    pub requests_per_s: Option<Spread>,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub cpu_percent: Option<f64>,
    pub cpu_us_per_request: Option<f64>,
    pub ratio_to_direct: Option<f64>,
    pub ratio_paired: Option<Paired>,
    /// Forwarder CPU per request, paired to docker-proxy's (rows with a forwarding process).
    pub cpu_paired_to_docker_proxy: Option<Paired>,
}

/// One cell's sample with the round it was taken in.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct RoundSample {
    pub round: u32,
    #[serde(flatten)]
    pub sample: Sample,
}

/// The paired ratio: median and min–max of the per-round ratios, over `rounds` pairs.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Paired {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub rounds: usize,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

#[derive(Debug, Serialize)]
pub struct SkippedOut {
    pub row: RowKind,
    pub reason: String,
}

/// Median of `values` (mean of the middle two for an even count); None when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => Some(sorted[mid]),
        _ => Some((sorted[mid - 1] + sorted[mid]) / 2.0),
    }
}

fn spread(values: &[f64]) -> Option<Spread> {
    let median = median(values)?;
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    Some(Spread { median, min, max })
}

/// The paired ratio of `row` to `base`, both keyed by round: the per-round ratios over the
/// rounds present in both (with a positive base), summarised; None when no round pairs up.
pub fn paired(row: &BTreeMap<u32, f64>, base: &BTreeMap<u32, f64>) -> Option<Paired> {
    let ratios: Vec<f64> = row
        .iter()
        .filter_map(|(round, value)| base.get(round).filter(|b| **b > 0.0).map(|b| value / b))
        .collect();
    let s = spread(&ratios)?;
    Some(Paired {
        median: s.median,
        min: s.min,
        max: s.max,
        rounds: ratios.len(),
    })
}

/// One figure of every sample, by round.
fn by_round(samples: &BTreeMap<u32, Sample>, f: fn(&Sample) -> f64) -> BTreeMap<u32, f64> {
    samples.iter().map(|(&round, s)| (round, f(s))).collect()
}

/// Requests/s by round.
fn rps_by_round(samples: &BTreeMap<u32, Sample>) -> BTreeMap<u32, f64> {
    by_round(samples, |s| s.requests_per_s)
}

/// The paired ratio of a forwarder's CPU per request to docker-proxy's (`None` for rows
/// without a forwarding process, whose CPU is 0 by construction).
fn cpu_paired(
    samples: &BTreeMap<u32, Sample>,
    docker_proxy: Option<&BTreeMap<u32, Sample>>,
) -> Option<Paired> {
    let cpu = |s: &Sample| s.cpu_us_per_request;
    if samples.values().all(|s| cpu(s) == 0.0) {
        return None;
    }
    paired(&by_round(samples, cpu), &by_round(docker_proxy?, cpu))
}

/// One cell's figures; `base`: the reference row's samples at the same concurrency,
/// `docker_proxy`: docker-proxy's there.
fn cell(
    connections: u32,
    samples: &BTreeMap<u32, Sample>,
    base: Option<&BTreeMap<u32, Sample>>,
    docker_proxy: Option<&BTreeMap<u32, Sample>>,
) -> CellOut {
    let of = |f: fn(&Sample) -> f64| median(&samples.values().map(f).collect::<Vec<_>>());
    let rps = spread(
        &samples
            .values()
            .map(|s| s.requests_per_s)
            .collect::<Vec<_>>(),
    );
    let row_rps = rps_by_round(samples);
    let base_rps = base.map(rps_by_round).unwrap_or_default();
    let base_median = median(&base_rps.values().copied().collect::<Vec<_>>());
    CellOut {
        connections,
        samples: samples
            .iter()
            .map(|(&round, &sample)| RoundSample { round, sample })
            .collect(),
        requests_per_s: rps,
        p50_us: of(|s| s.p50_us),
        p99_us: of(|s| s.p99_us),
        cpu_percent: of(|s| s.cpu_percent),
        cpu_us_per_request: of(|s| s.cpu_us_per_request),
        ratio_to_direct: rps.zip(base_median).map(|(r, d)| r.median / d),
        ratio_paired: paired(&row_rps, &base_rps),
        cpu_paired_to_docker_proxy: cpu_paired(samples, docker_proxy),
    }
}

/// Where the server and the client ran (cpuset lists; client None: not pinned).
#[derive(Debug, Clone, Copy)]
pub struct Placement<'a> {
    pub server: &'a str,
    pub client: Option<&'a str>,
}

/// Assembles the report (a failed row keeps the samples it had, for the record).
pub fn build(
    args: &Args,
    server: &Server,
    placement: Placement,
    rows: &[Row],
    skipped: Vec<(RowKind, String)>,
    notes: Vec<String>,
    wrk: &Path,
) -> NetReport {
    let measured = |kind: RowKind| {
        rows.iter()
            .find(|r| r.kind == kind && r.samples.iter().any(|c| !c.is_empty()))
    };
    let base = measured(RowKind::Direct).or_else(|| measured(RowKind::Host));
    let ratio_base = base.map(|r| r.kind);
    let docker_proxy = measured(RowKind::DockerProxy);
    let rows_out = rows
        .iter()
        .map(|row| RowOut {
            row: row.kind,
            label: row.kind.label(),
            command: row.command.clone(),
            status: if row.failure.is_some() {
                "failed"
            } else {
                "ok"
            },
            reason: row.failure.clone(),
            cells: args
                .conc
                .iter()
                .enumerate()
                .map(|(i, &c)| {
                    cell(
                        c,
                        &row.samples[i],
                        base.map(|b| &b.samples[i]),
                        docker_proxy.map(|d| &d.samples[i]),
                    )
                })
                .collect(),
        })
        .collect();
    let mut notes = notes;
    let errors: u64 = rows
        .iter()
        .flat_map(|r| r.samples.iter().flat_map(BTreeMap::values))
        .map(|s| s.errors)
        .sum();
    if errors > 0 {
        notes.push(format!(
            "wrk counted {errors} read/write/timeout error(s) over the run (a stalled request \
             times out after 2 s); per cell in the JSON"
        ));
    }
    notes.push(
        "forwarder CPU is that of forwarding processes (all threads and children, from /proc); \
         kernel paths (direct, NAT, eBPF) have none: their cost is softirq time /proc does not attribute"
            .to_string(),
    );
    NetReport {
        benchmark: "net",
        workload: args.workload,
        client: args.client,
        duration_s: args.duration,
        rounds: args.rounds,
        concurrency: args.conc.clone(),
        server: server.how.clone(),
        cpuset: placement.server.to_string(),
        client_cpuset: placement.client.map(str::to_string),
        machine: machine(wrk),
        rows: rows_out,
        skipped: skipped
            .into_iter()
            .map(|(row, reason)| SkippedOut { row, reason })
            .collect(),
        notes,
        interrupted: crate::commands::bench::interrupt::stopped(),
        ratio_base,
    }
}

fn machine(wrk: &Path) -> Machine {
    let mut versions = BTreeMap::new();
    versions.insert(
        "pier".to_string(),
        format!("pier version {}", env!("CARGO_PKG_VERSION")),
    );
    let probes: [(&str, &Path, &[&str]); 5] = [
        ("wrk", wrk, &["-v"]),
        ("nginx", Path::new("nginx"), &["-v"]),
        ("haproxy", Path::new("haproxy"), &["-v"]),
        ("iptables", Path::new("iptables"), &["-V"]),
        (
            "docker-proxy (docker.io)",
            Path::new("dockerd"),
            &["--version"],
        ),
    ];
    for (name, program, args) in probes {
        if let Some(line) = first_line(program, args) {
            versions.insert(name.to_string(), line);
        }
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string());
    Machine {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        cpu: cpu.unwrap_or_else(|| "unknown cpu".into()),
        versions,
    }
}

/// The first non-empty line a version probe prints (stdout or stderr; exit status ignored, since
/// wrk -v exits 1).
fn first_line(program: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = [output.stdout, output.stderr].concat();
    String::from_utf8_lossy(&text)
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_string)
}

/// How one table shows a cell.
type CellText = fn(&CellOut) -> Option<String>;

/// The terminal tables.
pub fn render(report: &NetReport) -> String {
    let m = &report.machine;
    let mut out = format!(
        "pier bench net: client {}, {} {} s per cell, {} round(s) interleaved, medians over rounds\n\
         machine: {} cores, {}, kernel {}; server: {}; client: {}\n\n",
        client_text(report.client), tool(report), report.duration_s, report.rounds, m.cores, m.cpu, m.kernel, report.server,
        match &report.client_cpuset {
            Some(cpus) => format!("taskset -c {cpus}"),
            None => "not pinned".to_string(),
        }
    );
    let sections: [(&str, CellText); 5] = [
        ("forwarder CPU (% of a core) and requests/s", |c| {
            let rps = c.requests_per_s?;
            Some(format!("{:.0}% {:.0}", c.cpu_percent?, rps.median))
        }),
        ("requests/s min–max over rounds", |c| {
            c.requests_per_s
                .map(|s| format!("{:.0}–{:.0}", s.min, s.max))
        }),
        (
            "paired ratio of requests/s to BASE (median and min–max over rounds of the ratio of \
             the two cells in the same round)",
            |c| {
                c.ratio_paired
                    .map(|p| format!("{:.2}× ({:.2}–{:.2})", p.median, p.min, p.max))
            },
        ),
        ("latency p50 / p99 (µs)", |c| {
            Some(format!("{:.0} / {:.0}", c.p50_us?, c.p99_us?))
        }),
        (
            "forwarder CPU per request (µs), and its paired ratio to docker-proxy's (median over \
             rounds of the ratio of the two cells in the same round)",
            |c| {
                let us = c.cpu_us_per_request?;
                Some(match c.cpu_paired_to_docker_proxy {
                    Some(p) => format!("{us:.1} ({:.2}×)", p.median),
                    None => format!("{us:.1}"),
                })
            },
        ),
    ];
    let base = report
        .ratio_base
        .map_or("nothing (no direct or host row)", RowKind::label);
    let unit = match report.workload {
        super::Workload::Http => "requests/s",
        super::Workload::Pg => "transactions/s (pgbench -S -M prepared)",
    };
    for (title, cell) in sections {
        out.push_str(&title.replace("BASE", base).replacen("requests/s", unit, 1));
        out.push('\n');
        out.push_str(&table(report, cell).render());
        out.push('\n');
    }
    for row in report.rows.iter().filter(|r| r.reason.is_some()) {
        out.push_str(&format!(
            "failed: {}: {}\n",
            row.label,
            row.reason.as_deref().unwrap_or("")
        ));
    }
    for skipped in &report.skipped {
        out.push_str(&format!(
            "skipped: {}: {}\n",
            skipped.row.label(),
            skipped.reason
        ));
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

/// The load generator's name.
fn tool(report: &NetReport) -> &'static str {
    match report.workload {
        super::Workload::Http => "wrk",
        super::Workload::Pg => "pgbench",
    }
}

fn client_text(client: Client) -> &'static str {
    match client {
        Client::Local => "local (127.0.0.1)",
        Client::Remote => "remote (a netns joined by veth, via the host's address)",
        Client::Ipv6 => "ipv6 (::1)",
    }
}

fn table(report: &NetReport, cell: CellText) -> Table {
    let headers: Vec<String> = report
        .concurrency
        .iter()
        .map(|c| format!("{} -c{c}", tool(report)))
        .collect();
    let mut columns = vec![("row", Align::Left)];
    columns.extend(headers.iter().map(|h| (h.as_str(), Align::Right)));
    let mut table = Table::new(&columns);
    for row in &report.rows {
        let mut cells = vec![row.label.to_string()];
        for c in &row.cells {
            let text = cell(c).unwrap_or_else(|| "–".to_string());
            cells.push(if row.status == "failed" && c.requests_per_s.is_none() {
                "failed".into()
            } else {
                text
            });
        }
        table.row(cells);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(rps: f64, cpu: f64) -> Sample {
        Sample {
            requests_per_s: rps,
            requests: (rps * 10.0) as u64,
            errors: 0,
            p50_us: 30.0,
            p99_us: 90.0,
            cpu_percent: cpu,
            cpu_us_per_request: cpu * 1e4 / rps,
        }
    }

    #[test]
    fn medians_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        assert_eq!(
            spread(&[5.0, 1.0, 3.0]),
            Some(Spread {
                median: 3.0,
                min: 1.0,
                max: 5.0
            })
        );
    }

    /// Values keyed by round, a `None` standing for a round whose cell failed.
    fn by_round(values: &[Option<f64>]) -> BTreeMap<u32, f64> {
        (0u32..)
            .zip(values)
            .filter_map(|(round, v)| v.map(|v| (round, v)))
            .collect()
    }

    #[test]
    fn paired_ratio_is_the_median_of_per_round_ratios() {
        let row = by_round(&[Some(90.0), Some(110.0), Some(60.0)]);
        let base = by_round(&[Some(100.0), Some(100.0), Some(50.0)]);
        let p = paired(&row, &base).expect("paired");
        assert_eq!((p.median, p.min, p.max, p.rounds), (1.1, 0.9, 1.2, 3));
        assert_eq!(
            median(&[90.0, 110.0, 60.0])
                .zip(median(&[100.0, 100.0, 50.0]))
                .map(|(a, b)| a / b),
            Some(0.9)
        );
    }

    #[test]
    fn paired_ratio_skips_rounds_where_either_cell_failed() {
        let row = by_round(&[Some(50.0), None, Some(30.0), Some(80.0), Some(70.0)]);
        let base = by_round(&[Some(100.0), Some(100.0), None, Some(100.0), Some(100.0)]);
        let p = paired(&row, &base).expect("paired");
        assert_eq!(p.rounds, 3);
        assert_eq!((p.median, p.min, p.max), (0.7, 0.5, 0.8));
    }

    #[test]
    fn paired_ratio_of_an_even_count_is_the_mean_of_the_middle_two() {
        let row = by_round(&[Some(80.0), Some(100.0), Some(90.0), Some(120.0)]);
        let base = by_round(&[Some(100.0); 4]);
        let p = paired(&row, &base).expect("paired");
        assert_eq!((p.rounds, p.min, p.max), (4, 0.8, 1.2));
        assert!((p.median - 0.95).abs() < 1e-12);
    }

    #[test]
    fn paired_ratio_without_a_common_round_is_none() {
        let row = by_round(&[Some(80.0), None]);
        let base = by_round(&[None, Some(100.0)]);
        assert_eq!(paired(&row, &base), None);
        assert_eq!(paired(&row, &BTreeMap::new()), None);
        assert_eq!(paired(&row, &by_round(&[Some(0.0)])), None);
    }

    #[test]
    fn cell_gives_both_ratios_against_the_base_row() {
        let samples = |rps: &[f64]| -> BTreeMap<u32, Sample> {
            (0u32..)
                .zip(rps)
                .map(|(r, &v)| (r, sample(v, 40.0)))
                .collect()
        };
        let row = samples(&[10_000.0, 12_000.0, 11_000.0]);
        let base = samples(&[20_000.0, 30_000.0, 22_000.0]);
        let c = cell(4, &row, Some(&base), None);
        assert_eq!(c.requests_per_s.map(|s| s.median), Some(11_000.0));
        assert_eq!(c.ratio_to_direct, Some(0.5));
        assert_eq!(c.ratio_paired.map(|p| p.median), Some(0.5));
        assert_eq!(c.ratio_paired.map(|p| p.min), Some(0.4));
        assert_eq!(c.cpu_percent, Some(40.0));
        assert_eq!(c.samples[1].round, 1);
        let json = serde_json::to_value(&c).expect("json");
        assert_eq!(json["samples"][2]["round"], 2);
        assert_eq!(json["samples"][2]["requests_per_s"], 11_000.0);
        assert_eq!(json["ratio_paired"]["rounds"], 3);
        let none = cell(4, &BTreeMap::new(), Some(&base), None);
        assert_eq!((none.ratio_to_direct, none.ratio_paired), (None, None));
        assert_eq!(cell(4, &row, None, None).ratio_paired, None);
        assert_eq!(c.cpu_paired_to_docker_proxy, None, "no docker-proxy row");
    }

    #[test]
    fn forwarder_cpu_is_paired_to_docker_proxys_and_kernel_rows_have_none() {
        let at = |cpu_us: &[f64]| -> BTreeMap<u32, Sample> {
            (0u32..)
                .zip(cpu_us)
                .map(|(r, &us)| {
                    let mut s = sample(10_000.0, 0.0);
                    s.cpu_us_per_request = us;
                    (r, s)
                })
                .collect()
        };
        let docker_proxy = at(&[50.0, 40.0, 60.0]);
        let proxy = cell(1, &at(&[25.0, 30.0, 30.0]), None, Some(&docker_proxy));
        let p = proxy.cpu_paired_to_docker_proxy.expect("paired");
        assert_eq!((p.median, p.min, p.max, p.rounds), (0.5, 0.5, 0.75, 3));
        let kernel = cell(1, &at(&[0.0, 0.0, 0.0]), None, Some(&docker_proxy));
        assert_eq!(kernel.cpu_paired_to_docker_proxy, None);
        let json = serde_json::to_value(&proxy).expect("json");
        assert_eq!(json["cpu_paired_to_docker_proxy"]["median"], 0.5);
    }
}
