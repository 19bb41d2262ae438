//! `pier bench net --workload pg`: seed 001's experiment. PostgreSQL from Debian in a pier
//! container, and `pgbench -S -M prepared` (select-only, prepared statements) through each row.
//!
//! Theory of operation: a data dir is made in the run's work dir by Debian's `initdb` as the
//! `postgres` user (trust authentication, plus a `host all all all trust` line so clients off
//! the container's loopback get in), and PostgreSQL runs in a container on the benchmark's routed
//! network (engine.rs): `pier run -d -u postgres -v DATA:/tmp/pgdata -p PORT:5432 --publish-mode auto host taskset -c SET
//! postgres -D /tmp/pgdata -c listen_addresses=* -c fsync=off` — the container itself is the
//! `pier auto` row (the other pier rows would each need a database of their own, so `pier nat`
//! and the engine's proxy are not rows here; `pier proxy` runs as dockerd would run it). The
//! database is filled once with `pgbench -i -s 5` through the container's address. A cell is
//! `pgbench -c C -j 1 -T D -S -M prepared -n -l`: transactions/s from its report, and p50/p99
//! from its per-transaction log (latency in µs, third field); forwarder CPU as for wrk.
//!
//! Privileges: root (runuser, pier run). Exercised by hand; the parsers have unit tests below.
use super::engine::{network, run_detached, Detached};
use super::host::{cmd, Cleanup};
use super::load::{clock_ticks_per_s, tree_ticks, Sample, RUNNING};
use super::report::median;
use super::topo::Server;
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

const PG_PORT: u16 = 5432;
const INSIDE: &str = "/tmp/pgdata";

/// The newest Debian PostgreSQL's bin directory (`/usr/lib/postgresql/N/bin`).
fn bin_dir() -> anyhow::Result<PathBuf> {
    let base = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<u32> = std::fs::read_dir(base)
        .context("PostgreSQL is not installed (/usr/lib/postgresql): apt install postgresql")?
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
        .collect();
    versions.sort_unstable();
    let newest = versions
        .last()
        .context("no PostgreSQL version under /usr/lib/postgresql")?;
    Ok(base.join(newest.to_string()).join("bin"))
}

/// Starts PostgreSQL in a container published on `auto_port` (mode auto) and fills it.
pub fn server(
    cleanup: &mut Cleanup,
    pier: &Path,
    work: &Path,
    cpuset: &str,
    cpus: &str,
    auto_port: u16,
) -> anyhow::Result<Server> {
    let bin = bin_dir()?;
    let pgbench = super::host::which("pgbench")
        .context("pgbench is not installed: apt install postgresql-contrib")?;
    let data = work.join("pgdata");
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let user = nix::unistd::User::from_name("postgres")?.context("no postgres user")?;
    nix::unistd::chown(&data, Some(user.uid), Some(user.gid)).context("chown of the data dir")?;
    let initdb = bin.join("initdb").display().to_string();
    let data_text = data.display().to_string();
    let init = [
        "-u",
        "postgres",
        "--",
        &initdb,
        "-D",
        &data_text,
        "--auth=trust",
        "-U",
        "postgres",
    ];
    cmd("runuser", &init).context("initdb")?;
    let hba = data.join("pg_hba.conf");
    let mut rules = std::fs::read_to_string(&hba).context("reading pg_hba.conf")?;
    rules.push_str("host all all all trust\n");
    std::fs::write(&hba, rules).context("writing pg_hba.conf")?;
    let postgres = bin.join("postgres").display().to_string();
    let name = format!("pier-bench-{}-pg", std::process::id());
    let (volume, publish) = (
        format!("{data_text}:{INSIDE}"),
        format!("{auto_port}:{PG_PORT}"),
    );
    let flags = [
        "-u",
        "postgres",
        "-v",
        &volume,
        "-p",
        &publish,
        "--publish-mode",
        "auto",
    ];
    let command = [
        &postgres,
        "-D",
        INSIDE,
        "-k",
        "/tmp",
        "-c",
        "listen_addresses=*",
        "-c",
        "fsync=off",
    ];
    let detached = Detached {
        name: &name,
        cpuset,
        cpus,
        flags: &flags,
        command: &command,
        port: PG_PORT,
    };
    let bridge = network(cleanup, pier)?;
    let (addr, addr6) = run_detached(cleanup, pier, &detached)?;
    let host = addr.to_string();
    let fill = [
        "-i", "-s", "5", "-q", "-h", &host, "-U", "postgres", "postgres",
    ];
    cmd(&pgbench.display().to_string(), &fill).context("pgbench -i")?;
    Ok(Server {
        addr,
        addr6,
        port: PG_PORT,
        iface: bridge,
        how: format!(
            "pier run -d -u postgres --cpus {cpus} -p {publish} --publish-mode auto host taskset -c \
             {cpuset} postgres (Debian, fsync=off, pgbench -i -s 5)"
        ),
    })
}

/// One pgbench cell.
#[derive(Debug)]
pub struct Bench<'a> {
    pub netns: Option<&'a str>,
    /// CPUs to pin pgbench to (`taskset -c`); None: not pinned.
    pub cpuset: Option<&'a str>,
    pub target: std::net::SocketAddr,
    pub clients: u32,
    pub duration: Duration,
    pub log_dir: &'a Path,
}

/// Runs one pgbench cell and measures the forwarders (`roots`).
pub fn measure(bench: &Bench, roots: &[i32]) -> Result<Sample, String> {
    let prefix = bench.log_dir.join(format!("pgbench-{}", bench.clients));
    let mut command = super::load::client_command(bench.netns, bench.cpuset, "pgbench".as_ref());
    let (c, secs) = (
        bench.clients.to_string(),
        bench.duration.as_secs().max(1).to_string(),
    );
    command.args([
        "-h",
        &bench.target.ip().to_string(),
        "-p",
        &bench.target.port().to_string(),
    ]);
    command.args([
        "-U", "postgres", "-c", &c, "-j", "1", "-T", &secs, "-S", "-M", "prepared",
    ]);
    command
        .args(["-n", "-l", "--log-prefix"])
        .arg(&prefix)
        .arg("postgres");
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let before = tree_ticks(roots);
    let started = Instant::now();
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start pgbench: {e}"))?;
    RUNNING.store(child.id() as i32, Ordering::SeqCst);
    let output = child.wait_with_output();
    RUNNING.store(0, Ordering::SeqCst);
    let wall = started.elapsed();
    let ticks = tree_ticks(roots).saturating_sub(before);
    let output = output.map_err(|e| format!("waiting for pgbench: {e}"))?;
    let latencies = read_logs(bench.log_dir, &format!("pgbench-{}", bench.clients));
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(format!("pgbench {}: {}", output.status, err.trim()));
    }
    let (tps, count) = parse(&String::from_utf8_lossy(&output.stdout))?;
    let cpu_s = ticks as f64 / clock_ticks_per_s();
    Ok(Sample {
        requests_per_s: tps,
        requests: count,
        errors: 0,
        p50_us: percentile(&latencies, 0.50).ok_or("empty pgbench log")?,
        p99_us: percentile(&latencies, 0.99).ok_or("empty pgbench log")?,
        cpu_percent: cpu_s / wall.as_secs_f64() * 100.0,
        cpu_us_per_request: cpu_s * 1e6 / count.max(1) as f64,
    })
}

/// tps (without initial connection time) and the transaction count from pgbench's report.
fn parse(text: &str) -> Result<(f64, u64), String> {
    let tps = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("tps = "))
        .find_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("no tps in pgbench's output: {}", text.trim()))?;
    let count = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("number of transactions actually processed: ")
        })
        .and_then(|rest| rest.split('/').next()?.trim().parse().ok())
        .ok_or("no transaction count in pgbench's output")?;
    Ok((tps, count))
}

/// Latencies (µs, third field) of every log file starting with `prefix` in `dir`; the files are
/// removed.
fn read_logs(dir: &Path, prefix: &str) -> Vec<f64> {
    let mut latencies = Vec::new();
    let entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
    for entry in entries.filter(|e| e.file_name().to_string_lossy().starts_with(prefix)) {
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        latencies.extend(
            text.lines()
                .filter_map(|l| l.split(' ').nth(2)?.parse::<f64>().ok()),
        );
        let _ = std::fs::remove_file(entry.path());
    }
    latencies
}

fn percentile(values: &[f64], q: f64) -> Option<f64> {
    if q == 0.5 {
        return median(values);
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let index = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted.get(index).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_report_is_parsed() {
        let text = "transaction type: <builtin: select only>\nscaling factor: 5\n\
            number of transactions actually processed: 52345/52345\n\
            latency average = 0.286 ms\n\
            tps = 17510.332823 (without initial connection time)\n";
        assert_eq!(parse(text), Ok((17510.332823, 52345)));
        assert!(parse("nothing").is_err());
    }

    #[test]
    fn percentiles_of_latencies() {
        let values: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&values, 0.5), Some(50.5));
        assert_eq!(percentile(&values, 0.99), Some(99.0));
        assert_eq!(percentile(&[], 0.99), None);
    }
}
