//! One cell of the benchmark: wrk against a URL at one concurrency for one duration, with the CPU
//! the forwarding processes used meanwhile.
//!
//! Theory of operation: wrk runs `-t C -c C -d Ns --latency` (one thread per connection, as seed
//! 000 ran it), in the client's namespace when there is one; its report gives requests/s, the
//! request count and the latency distribution (p50, p99). Forwarder CPU is read from /proc
//! around the run: utime+stime of every process in the forwarders' trees (a process's stat sums
//! all its threads; children found through their parent pid, plus cutime/cstime for children
//! already reaped), in clock ticks. CPU % of a core = CPU seconds / wall seconds × 100; µs per
//! request = CPU µs / requests. Kernel paths (NAT, eBPF, direct) have no forwarding process:
//! their cost lands in softirq of whichever task is running, which /proc does not attribute;
//! the report says so.
//!
//! The running wrk's pid is kept in [`RUNNING`] so Ctrl-C can stop it at once.
//!
//! Privileges: root for `ip netns exec`. Parsing has unit tests below.
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The pid of the wrk now running (0: none).
pub static RUNNING: AtomicI32 = AtomicI32::new(0);

/// What one wrk run measured.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Sample {
    pub requests_per_s: f64,
    pub requests: u64,
    /// wrk's read, write and timeout errors.
    pub errors: u64,
    pub p50_us: f64,
    pub p99_us: f64,
    /// Forwarder CPU as % of one core (0 when the row has no forwarding process).
    pub cpu_percent: f64,
    /// Forwarder CPU per request, µs.
    pub cpu_us_per_request: f64,
}

/// One wrk invocation.
#[derive(Debug)]
pub struct Load<'a> {
    pub wrk: &'a Path,
    pub netns: Option<&'a str>,
    /// CPUs to pin the client to (`taskset -c`); None: not pinned.
    pub cpuset: Option<&'a str>,
    pub url: &'a str,
    pub connections: u32,
    pub duration: Duration,
}

/// Runs the load and measures the forwarders (`roots`: process ids of their tree roots).
pub fn measure(load: &Load, roots: &[i32]) -> Result<Sample, String> {
    let mut command = client_command(load.netns, load.cpuset, load.wrk.as_os_str());
    let c = load.connections.to_string();
    let secs = format!("{}s", load.duration.as_secs().max(1));
    command
        .args(["-t", &c, "-c", &c, "-d", &secs, "--latency", load.url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let before = tree_ticks(roots);
    let started = Instant::now();
    let child = command
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", load.wrk.display()))?;
    RUNNING.store(child.id() as i32, Ordering::SeqCst);
    let output = child.wait_with_output();
    RUNNING.store(0, Ordering::SeqCst);
    let wall = started.elapsed();
    let ticks = tree_ticks(roots).saturating_sub(before);
    let output = output.map_err(|e| format!("waiting for wrk: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        let err = String::from_utf8_lossy(&output.stderr);
        return Err(format!("wrk {}: {}", output.status, err.trim()));
    }
    let report = parse(&text)?;
    let cpu_s = ticks as f64 / clock_ticks_per_s();
    Ok(Sample {
        requests_per_s: report.requests_per_s,
        requests: report.requests,
        errors: report.errors,
        p50_us: report.p50_us,
        p99_us: report.p99_us,
        cpu_percent: cpu_s / wall.as_secs_f64() * 100.0,
        cpu_us_per_request: cpu_s * 1e6 / report.requests.max(1) as f64,
    })
}

/// `program` as the client runs it: `[taskset -c CPUSET] [ip netns exec NETNS] program`.
pub fn client_command(
    netns: Option<&str>,
    cpuset: Option<&str>,
    program: &std::ffi::OsStr,
) -> Command {
    let mut words: Vec<&std::ffi::OsStr> = Vec::new();
    if let Some(cpus) = cpuset {
        words.extend(["taskset", "-c", cpus].map(std::ffi::OsStr::new));
    }
    if let Some(ns) = netns {
        words.extend(["ip", "netns", "exec", ns].map(std::ffi::OsStr::new));
    }
    words.push(program);
    let mut command = Command::new(words[0]);
    command.args(&words[1..]);
    command
}

/// The figures of a wrk report.
#[derive(Debug, PartialEq)]
struct Report {
    requests_per_s: f64,
    requests: u64,
    errors: u64,
    p50_us: f64,
    p99_us: f64,
}

/// Parses wrk's report. A cell where no request completed, or where connections could not be
/// made, is a failure; read, write and timeout errors are figures (a loaded machine stalls a
/// request now and then) counted in `errors`.
fn parse(text: &str) -> Result<Report, String> {
    let field = |prefix: &str| {
        text.lines()
            .map(str::trim)
            .find_map(|l| l.strip_prefix(prefix))
            .map(str::trim)
    };
    let errors = field("Socket errors:").map_or(Ok(0), socket_errors)?;
    if let Some(bad) = field("Non-2xx or 3xx responses:") {
        return Err(format!("{bad} responses were not 200 OK"));
    }
    let requests_per_s = field("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("no Requests/sec in wrk's output: {}", text.trim()))?;
    let requests = text
        .lines()
        .find_map(|l| l.trim().split_once(" requests in "))
        .and_then(|(n, _)| n.parse().ok())
        .ok_or("no request count in wrk's output")?;
    if requests == 0 {
        return Err("no request completed".into());
    }
    let latency = |p: &str| {
        field(p)
            .and_then(duration_us)
            .ok_or_else(|| format!("no {p} latency in wrk's output"))
    };
    Ok(Report {
        requests_per_s,
        requests,
        errors,
        p50_us: latency("50%")?,
        p99_us: latency("99%")?,
    })
}

/// `connect 0, read 0, write 0, timeout 1`: the sum, or an error when connects failed.
fn socket_errors(text: &str) -> Result<u64, String> {
    let mut total = 0;
    for part in text.split(',') {
        let (kind, count) = part.trim().split_once(' ').unwrap_or(("", "0"));
        let count: u64 = count.trim().parse().unwrap_or(0);
        if kind == "connect" && count > 0 {
            return Err(format!("wrk could not connect ({text})"));
        }
        total += count;
    }
    Ok(total)
}

/// wrk's durations: `28.00us`, `1.32ms`, `2.01s`, `1.00m`.
fn duration_us(text: &str) -> Option<f64> {
    let split = text.find(|c: char| c.is_ascii_alphabetic())?;
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().ok()?;
    let scale = match unit {
        "us" => 1.0,
        "ms" => 1e3,
        "s" => 1e6,
        "m" => 60e6,
        _ => return None,
    };
    Some(value * scale)
}

/// CPU clock ticks used so far by every process in the trees rooted at `roots`.
pub fn tree_ticks(roots: &[i32]) -> u64 {
    if roots.is_empty() {
        return 0;
    }
    let stats = all_stats();
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, stat) in &stats {
        children.entry(stat.ppid).or_default().push(pid);
    }
    let mut total = 0;
    let mut queue: Vec<i32> = roots.to_vec();
    while let Some(pid) = queue.pop() {
        if let Some(stat) = stats.get(&pid) {
            total += stat.ticks;
        }
        queue.extend(children.get(&pid).into_iter().flatten());
    }
    total
}

#[derive(Debug)]
struct Stat {
    ppid: i32,
    ticks: u64,
}

fn all_stats() -> HashMap<i32, Stat> {
    let mut stats = HashMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return stats;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let text = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        if let Some(stat) = parse_stat(&text) {
            stats.insert(pid, stat);
        }
    }
    stats
}

/// ppid and utime+stime+cutime+cstime from a /proc/PID/stat line (fields after the `)` that
/// ends the command name, which may itself hold spaces and parentheses).
fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // rest starts at field 3 (state): ppid is field 4, utime..cstime are fields 14..17.
    let number = |i: usize| fields.get(i - 3)?.parse::<u64>().ok();
    let ticks = number(14)? + number(15)? + number(16)? + number(17)?;
    Some(Stat {
        ppid: fields.get(1)?.parse().ok()?,
        ticks,
    })
}

pub fn clock_ticks_per_s() -> f64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .map_or(100.0, |t| t as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRK: &str = "Running 1s test @ http://127.0.0.1:8080/
  1 threads and 1 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    30.16us   10.28us   1.32ms   96.18%
    Req/Sec    32.01k     1.26k   34.58k    72.28%
  Latency Distribution
     50%   28.00us
     75%   30.00us
     90%   34.00us
     99%    1.64ms
  321663 requests in 10.10s, 26.69MB read
Requests/sec:  31848.46
Transfer/sec:      2.64MB
";

    #[test]
    fn wrk_report_is_parsed() {
        let report = parse(WRK).expect("parse");
        assert_eq!(
            report,
            Report {
                requests_per_s: 31848.46,
                requests: 321663,
                errors: 0,
                p50_us: 28.0,
                p99_us: 1640.0,
            }
        );
    }

    #[test]
    fn connect_errors_fail_the_cell_and_timeouts_are_counted() {
        let text = WRK.replace(
            "Requests/sec",
            "  Socket errors: connect 1, read 0, write 0, timeout 0\nRequests/sec",
        );
        assert!(parse(&text).expect_err("must fail").contains("connect 1"));
        let text = WRK.replace(
            "Requests/sec",
            "  Socket errors: connect 0, read 1, write 0, timeout 2\nRequests/sec",
        );
        assert_eq!(parse(&text).expect("counted").errors, 3);
    }

    #[test]
    fn units_convert_to_microseconds() {
        assert_eq!(duration_us("2.50ms"), Some(2500.0));
        assert_eq!(duration_us("1.00s"), Some(1e6));
        assert_eq!(duration_us("7.00us"), Some(7.0));
        assert_eq!(duration_us("7.00xs"), None);
    }

    #[test]
    fn stat_with_odd_command_name() {
        let line = "42 (a) b (c)) S 7 42 42 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0";
        let stat = parse_stat(line).expect("stat");
        assert_eq!(stat.ppid, 7);
        assert_eq!(stat.ticks, 11 + 22 + 33 + 44);
    }

    #[test]
    fn own_process_uses_cpu() {
        let me = std::process::id() as i32;
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            x = x.wrapping_add(1);
        }
        assert!(x > 0);
        assert!(tree_ticks(&[me]) > 0);
    }
}
