//! `pier bench start`: container start time of pier against crun, runc and the bare namespace
//! floor, and of the engine's `pier run` with no network, a bridge, and a bridge with a published
//! port; without seccomp and with Docker's default profile.
//!
//! Theory of operation: the benchmark builds its bundles in a work dir of its own
//! (`/dev/shm/pier-bench-<pid>`, tmpfs as runtime state is in production; `$TMPDIR` when
//! /dev/shm is not tmpfs), plans the rows (skipping programs that are not installed), then
//! runs the interleaved schedule of `stats::interleave`: warm-up rounds, then `--runs` rounds, each
//! round starting one container per row, in row order. A run is timed by `runner::time_one`; a row
//! whose run fails is marked failed with the reason and not run again, the others go on. At the end
//! it force-deletes any container a runtime left behind, removes the work dir, prints the table and
//! writes `--json`. Work dirs of earlier benchmarks that were killed (their pid is gone) are swept
//! the same way first. A progress line on stderr shows the round and the row. The docker and
//! podman rows' daemon and setup are started before the schedule and torn down with the work dir
//! (peers_engine.rs). SIGINT, SIGTERM and SIGHUP stop the schedule after the running sample; the
//! cleanup and the table of what was measured follow as on a normal end. The engine rows' eBPF
//! objects are pinned in a dir of the run's own, removed with the work dir (`net/pins.rs`).
//!
//! Privileges: root. Black-box test: tests/bench_start.rs (JSON shape only, never timings).
use super::bars;
use super::bundle::{Bundles, Seccomp};
use super::interrupt;
use super::net::pins;
use super::peers_engine::{self, EnginePeers};
use super::report::{self, Machine, Report, RowReport};
use super::rows::{self, Row, Runtime};
use super::runner::{self, CrunNamespace};
use super::stats::{interleave, Step};
use anyhow::Context;
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// Flags of `pier bench start`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Measured runs per row
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Unmeasured runs per row before the measured ones
    #[arg(long, default_value_t = 3)]
    warmup: u32,
    /// Runtimes to measure, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = Runtime::ALL)]
    rows: Vec<Runtime>,
    /// Seccomp modes to measure, comma-separated
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Seccomp::None, Seccomp::Docker])]
    seccomp: Vec<Seccomp>,
    /// Also write the results as JSON to FILE
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Also draw the medians (min–max whiskers) as an SVG bar chart to FILE
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
}

/// The benchmark's work dir, its rows and crun's namespace. Dropping it deletes leftover
/// containers and removes the work dir, also when the benchmark stops on an error.
#[derive(Debug)]
struct Bench {
    work: PathBuf,
    rows: Vec<Row>,
    crun_ns: Option<CrunNamespace>,
    /// dockerd and podman's setup for their rows, when those are measured.
    peers: Option<EnginePeers>,
    /// The run's private eBPF pin dir (None when the user set PIER_BPF_PIN_DIR).
    pins: Option<PathBuf>,
}

impl Drop for Bench {
    fn drop(&mut self) {
        for note in rows::sweep(&self.rows, self.crun_ns.as_ref()) {
            eprintln!("pier bench: {note}");
        }
        drop(self.peers.take());
        if let Err(e) = std::fs::remove_dir_all(&self.work) {
            eprintln!("pier bench: cannot remove {}: {e}", self.work.display());
        }
        if let Some(dir) = &self.pins {
            if let Err(e) = pins::remove(dir) {
                eprintln!(
                    "pier bench: cannot remove the eBPF pins in {}: {e}",
                    dir.display()
                );
            }
        }
    }
}

pub fn run(mut args: Args) -> anyhow::Result<i32> {
    anyhow::ensure!(
        nix::unistd::geteuid().is_root(),
        "pier bench start needs root: it creates namespaces, mounts and cgroups"
    );
    // Entering crun's mount namespace (and coming back) resets the working directory to its
    // root: resolve the output paths against the directory the user ran pier in, now.
    for path in [&mut args.json, &mut args.svg].into_iter().flatten() {
        *path =
            std::path::absolute(&*path).with_context(|| format!("resolving {}", path.display()))?;
    }
    let private_pins = pins::use_private();
    let stop = interrupt::catch_without_thread()?;
    pins::sweep_stale();
    let (temp, on_tmpfs) = work_base();
    let (crun_ns, crun_problem) = crun_namespace(args.rows.contains(&Runtime::Crun));
    sweep_stale(&temp, crun_ns.as_ref());
    let work = temp.join(format!("pier-bench-{}", std::process::id()));
    std::fs::create_dir_all(&work).with_context(|| format!("creating {}", work.display()))?;
    let mut bench = Bench {
        work: work.clone(),
        rows: Vec::new(),
        crun_ns,
        peers: None,
        pins: private_pins,
    };
    let bundles = Bundles::build(&work)?;
    let (planned, skipped) = rows::plan(&args.rows, &args.seccomp, &work, &bundles);
    anyhow::ensure!(
        !planned.is_empty(),
        "nothing to measure: every row was skipped"
    );
    bench.rows = planned;
    for row in bench.rows.iter_mut().filter(|r| r.runtime == Runtime::Crun) {
        row.failure.clone_from(&crun_problem);
    }
    start_peers(&mut bench);
    measure(&mut bench, args.warmup as usize, args.runs as usize, &stop);
    let notes = rows::sweep(&bench.rows, bench.crun_ns.as_ref());
    let report = Report {
        benchmark: "start",
        runs: args.runs as usize,
        warmup: args.warmup as usize,
        machine: machine(&bench.rows),
        rows: bench.rows.iter().map(RowReport::of).collect(),
        ratios: report::ratios(&bench.rows),
        skipped,
        notes: with_method_notes(notes, &bench, &temp, on_tmpfs),
    };
    if stop.load(Ordering::SeqCst) {
        eprintln!("pier bench: stopped by a signal; the table holds what was measured");
    }
    publish(&report, args.json.as_deref(), args.svg.as_deref())?;
    Ok(0)
}

/// crun's private mount namespace when crun is measured, or why it cannot be made.
fn crun_namespace(wanted: bool) -> (Option<CrunNamespace>, Option<String>) {
    match wanted.then(CrunNamespace::prepare) {
        Some(Err(e)) => (
            None,
            Some(format!("cannot prepare crun's mount namespace: {e:#}")),
        ),
        Some(Ok(ns)) => (ns, None),
        None => (None, None),
    }
}

/// Prints the table and writes the JSON and SVG files when they were asked for.
fn publish(report: &Report, json: Option<&Path>, svg: Option<&Path>) -> anyhow::Result<()> {
    print!("{}", report::render(report));
    if let Some(path) = json {
        let text = serde_json::to_string_pretty(report)?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    if let Some(path) = svg {
        let bars: Vec<bars::Bar> = report
            .rows
            .iter()
            .map(|row| bars::Bar {
                label: format!("{} ({} seccomp)", row.runtime.label(), row.seccomp.label()),
                value: match (row.median_ms, row.min_ms, row.max_ms) {
                    (Some(median), Some(min), Some(max)) => Ok((median, min, max)),
                    _ => Err(row.reason.clone().unwrap_or_else(|| row.status.to_string())),
                },
            })
            .collect();
        let title = format!(
            "pier bench start: container start, median of {} runs",
            report.runs
        );
        std::fs::write(path, bars::render(&title, "ms", &bars))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Starts dockerd and podman's setup when their rows are planned; a setup that fails marks its
/// rows failed with the reason.
fn start_peers(bench: &mut Bench) {
    let docker = bench.rows.iter().any(|r| r.runtime.is_docker());
    let podman = bench.rows.iter().any(|r| r.runtime.is_podman());
    if !(docker || podman) {
        return;
    }
    eprintln!("pier bench: starting a private dockerd / preparing podman");
    let peers = EnginePeers::prepare(&bench.work, docker, podman);
    for row in bench.rows.iter_mut() {
        if row.runtime.is_docker() || row.runtime.is_podman() {
            row.failure = peers.problem(row.runtime);
        }
    }
    bench.peers = Some(peers);
}

/// Runs the interleaved schedule over the rows, until its end or a stop signal.
fn measure(bench: &mut Bench, warmup: usize, runs: usize, stop: &AtomicBool) {
    let mut progress = Progress::new(bench.rows.len() * (warmup + runs));
    for (n, step) in interleave(bench.rows.len(), warmup, runs).enumerate() {
        let row = &bench.rows[step.row];
        if stop.load(Ordering::SeqCst) {
            break;
        }
        if row.failure.is_some() {
            continue;
        }
        progress.show(n, &step, row);
        let invocation = row.invocation(n);
        let timed = match (row.runtime, &bench.crun_ns, &bench.peers) {
            (Runtime::Crun, Some(ns), _) => ns
                .run(|| runner::time_one(&invocation))
                .unwrap_or_else(|e| Err(format!("{e:#}"))),
            (podman, _, Some(peers)) if podman.is_podman() => peers
                .in_netns(|| runner::time_one(&invocation))
                .unwrap_or_else(|e| Err(format!("{e:#}"))),
            _ => runner::time_one(&invocation),
        };
        let row = &mut bench.rows[step.row];
        match timed {
            Ok(elapsed) if !step.warmup => row.samples.push(elapsed),
            Ok(_) => {}
            Err(reason) => row.failure = Some(reason),
        }
    }
    progress.done();
}

/// Where the work dir goes, and whether that is tmpfs. Every runtime keeps its state there, and
/// production hosts keep runtime state on tmpfs (`/run`, where Docker's and containerd's runc
/// roots live), so `/dev/shm` is preferred; a disk-backed state dir adds journal writes to every
/// runtime's start (about 0.8 ms for pier on this project's VM, whose `/run` is on disk).
fn work_base() -> (PathBuf, bool) {
    let shm = PathBuf::from("/dev/shm");
    match nix::sys::statfs::statfs(&shm) {
        Ok(fs) if fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC => (shm, true),
        _ => (std::env::temp_dir(), false),
    }
}

/// Sweeps the work dirs of benchmarks whose process is gone.
fn sweep_stale(temp: &Path, crun_ns: Option<&CrunNamespace>) {
    let Ok(entries) = std::fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("pier-bench-") else {
            continue;
        };
        if !pid.bytes().all(|b| b.is_ascii_digit()) || Path::new("/proc").join(pid).exists() {
            continue;
        }
        let work = entry.path();
        let (stale_rows, _) =
            rows::plan(&Runtime::ALL, &[Seccomp::None], &work, &Bundles::at(&work));
        for note in rows::sweep(&stale_rows, crun_ns) {
            eprintln!("pier bench: from an interrupted benchmark: {note}");
        }
        peers_engine::sweep_stale(&work, pid);
        let _ = std::fs::remove_dir_all(&work);
    }
}

/// Notes on method that the reader of the table needs.
fn with_method_notes(
    mut notes: Vec<String>,
    bench: &Bench,
    base: &Path,
    on_tmpfs: bool,
) -> Vec<String> {
    notes.push(if on_tmpfs {
        format!(
            "bundles and every runtime's state dir on tmpfs ({})",
            base.display()
        )
    } else {
        format!(
            "no tmpfs at /dev/shm: bundles and state dirs in {} (disk writes slow every row)",
            base.display()
        )
    });
    if bench.peers.is_some() {
        notes.push(
            "docker and podman rows: a dockerd started by the benchmark (own data/exec root and \
             containerd, Docker's default iptables rules, docker0 bridge and docker-proxy) and \
             podman with runc, both inside a private network namespace that vanishes with them; \
             same busybox root; podman with --ulimit nofile/nproc=1024 (hard rlimits cannot be \
             raised here)"
                .to_string(),
        );
    }
    if bench.crun_ns.is_some() {
        notes.push(
            "crun 1.8 refuses hybrid cgroups: it runs in a private mount namespace without \
             /sys/fs/cgroup/unified, entered outside the timed region"
                .to_string(),
        );
    }
    notes
}

/// The machine's facts and the measured programs' versions.
fn machine(rows: &[Row]) -> Machine {
    let mut versions = BTreeMap::new();
    versions.insert(
        "pier".to_string(),
        format!("pier version {}", env!("CARGO_PKG_VERSION")),
    );
    for row in rows.iter().filter(|r| r.runtime != Runtime::Pier) {
        let label = match row.runtime {
            docker if docker.is_docker() => "docker",
            podman if podman.is_podman() => "podman",
            other => other.label(),
        };
        if versions.contains_key(label) {
            continue;
        }
        if let Some(version) = runner::version_of(&row.program) {
            versions.insert(label.to_string(), version);
        }
    }
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let cpuinfo = read("/proc/cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']));
    Machine {
        cores: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
        cpu: cpu.unwrap_or("unknown cpu").to_string(),
        cgroups: cgroup_layout().to_string(),
        versions,
    }
}

fn cgroup_layout() -> &'static str {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "v2"
    } else if Path::new("/sys/fs/cgroup/unified/cgroup.controllers").exists() {
        "hybrid"
    } else {
        "v1"
    }
}

/// A one-line progress indicator on stderr: redrawn in place on a terminal, one line per round
/// otherwise.
#[derive(Debug)]
struct Progress {
    total: usize,
    terminal: bool,
    last_round: Option<(bool, usize)>,
}

impl Progress {
    fn new(total: usize) -> Progress {
        Progress {
            total,
            terminal: std::io::stderr().is_terminal(),
            last_round: None,
        }
    }

    fn show(&mut self, n: usize, step: &Step, row: &Row) {
        let phase = if step.warmup { "warm-up" } else { "round" };
        let text = format!(
            "[{}/{}] {phase} {}: {} {}",
            n + 1,
            self.total,
            step.round + 1,
            row.runtime.label(),
            row.seccomp.label()
        );
        let mut err = std::io::stderr();
        if self.terminal {
            let _ = write!(err, "\r\x1b[K{text}");
            let _ = err.flush();
        } else if self.last_round != Some((step.warmup, step.round)) {
            let _ = writeln!(err, "{text}");
        }
        self.last_round = Some((step.warmup, step.round));
    }

    fn done(&self) {
        if self.terminal {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}
