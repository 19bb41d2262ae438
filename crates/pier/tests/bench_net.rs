//! Black-box tests of `pier bench net`: with tiny durations every installed row starts, produces
//! numbers and is cleaned up; bad input (unknown row or workload, wrk missing, a port in use)
//! gives a clear message. Never asserts a timing.
//!
//! Each run happens inside a network namespace of the test's own (`pier-test-bench-<pid>-<n>`,
//! removed by a guard), so the benchmark's veths, iptables rules, sysctls and listening ports
//! live and die there; its server runs with `--server netns` (the benchmark's own namespaces, which
//! the test checks are gone afterwards).
//!
//! With PIER_BPF_PIN_DIR unset the benchmark pins in /sys/fs/bpf/pier-bench-<pid> of its own:
//! that test checks the dir is gone afterwards and that /sys/fs/bpf/pier was not made (it never
//! removes a /sys/fs/bpf/pier that existed before it).
//!
//! Needs root (skips with a reason otherwise, fails under `CI=true`), wrk and iproute2.
use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// A state directory of the test's own for the pier runs of a benchmark.
fn state_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pier-test-bench-state-")
        .tempdir()
        .expect("state dir")
}

/// The root tests run one at a time: each checks that no benchmark namespace or work dir exists
/// afterwards that did not exist before, which another running benchmark would upset.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

const PIER: &str = env!("CARGO_BIN_EXE_pier");

/// Skips `test` for a missing facility, with the reason; under `CI=true` (where
/// scripts/setup.sh installed everything) a skip is a failure.
fn skip(test: &str, why: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} cannot run under CI=true: {why}"
    );
    eprintln!("skipped {test}: {why}");
}

fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs root under CI=true"
    );
    eprintln!("skipped {test}: needs root");
    false
}

/// A network namespace of the test's own with loopback up; deleted on drop.
struct TestNs(String);

impl TestNs {
    fn new() -> TestNs {
        static N: AtomicUsize = AtomicUsize::new(0);
        let n = N.fetch_add(1, Ordering::SeqCst);
        let name = format!("pier-test-bench-{}-{n}", std::process::id());
        run_ok("ip", &["netns", "add", &name]);
        let ns = TestNs(name);
        run_ok(
            "ip",
            &["netns", "exec", &ns.0, "ip", "link", "set", "lo", "up"],
        );
        ns
    }

    /// `ip netns exec NS PIER args…`
    fn pier(&self, args: &[&str]) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.0, PIER]).args(args);
        command.env("PIER_BPF_PIN_DIR", format!("/sys/fs/bpf/{}", self.0));
        command.stdin(Stdio::null());
        command
    }

    /// Waits (up to 10 s) until something listens on TCP `port` in the namespace.
    fn wait_listening(&self, port: u16) {
        let needle = format!(":{port} ");
        for _ in 0..500 {
            let out = Command::new("ip")
                .args(["netns", "exec", &self.0, "ss", "-Hltn"])
                .output()
                .expect("ss");
            if String::from_utf8_lossy(&out.stdout).contains(&needle) {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("nothing listens on port {port} in {}", self.0);
    }

    /// `nsenter --net=… PIER args…`: unlike `ip netns exec` it keeps /sys (and so the cgroup
    /// mounts `pier run` needs) as they are.
    fn pier_engine(&self, args: &[&str], state: &Path) -> Command {
        let mut command = Command::new("nsenter");
        command
            .arg(format!("--net=/run/netns/{}", self.0))
            .arg(PIER)
            .args(args);
        command.env("PIER_STATE_DIR", state);
        command.env("PIER_SUBNET_POOL", "198.18.0.0/15:24");
        command.env("PIER_BPF_PIN_DIR", format!("/sys/fs/bpf/{}", self.0));
        command.stdin(Stdio::null());
        command
    }

    fn iptables_rules(&self) -> String {
        let mut text = String::new();
        for table in ["nat", "filter"] {
            let out = Command::new("ip")
                .args(["netns", "exec", &self.0, "iptables", "-t", table, "-S"])
                .output()
                .expect("iptables -S");
            text.push_str(&String::from_utf8_lossy(&out.stdout));
        }
        text
    }
}

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        // The eBPF pins pier made for this namespace (PIER_BPF_PIN_DIR): unpinning detaches.
        let _ = std::fs::remove_dir_all(format!("/sys/fs/bpf/{}", self.0));
    }
}

fn run_ok(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().expect("run");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        describe(&out)
    );
}

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Names of the benchmark's namespaces and work dirs that exist now.
fn bench_traces() -> Vec<String> {
    let mut found = Vec::new();
    for dir in [Path::new("/run/netns"), &std::env::temp_dir()] {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        found.extend(
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_bench_name(n)),
        );
    }
    found.sort();
    found
}

/// `pier-bench-<pid>`, `pier-bench-<pid>-c` (namespaces), `pier-bench-net-<pid>` (work dir).
fn is_bench_name(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("pier-bench-") else {
        return false;
    };
    let pid = rest.strip_prefix("net-").unwrap_or(rest);
    let pid = pid.strip_suffix("-c").unwrap_or(pid);
    !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())
}

fn bench(ns: &TestNs, args: &[&str]) -> (Output, Value) {
    bench_with(ns, args, None)
}

/// Runs the benchmark in `ns` (through `pier run` when `state` is given, else `--server netns`).
fn bench_with(ns: &TestNs, args: &[&str], state: Option<&Path>) -> (Output, Value) {
    bench_pins(ns, args, state, true)
}

/// [`bench_with`], with the test's own PIER_BPF_PIN_DIR (`test_pins`) or with none set.
fn bench_pins(
    ns: &TestNs,
    args: &[&str],
    state: Option<&Path>,
    test_pins: bool,
) -> (Output, Value) {
    let dir = tempfile::Builder::new()
        .prefix("pier-test-bench-net-")
        .tempdir()
        .expect("tempdir");
    let json = dir.path().join("net.json");
    let svg = dir.path().join("net.svg");
    let server = if state.is_some() { "pier" } else { "netns" };
    let mut full = vec!["bench", "net", "--server", server, "--duration", "1"];
    full.extend_from_slice(&["--rounds", "1", "--conc", "1,2", "--port", "28080"]);
    full.extend_from_slice(args);
    let json_text = json.to_string_lossy().into_owned();
    let svg_text = svg.to_string_lossy().into_owned();
    full.extend_from_slice(&["--json", &json_text, "--svg", &svg_text]);
    let mut command = match state {
        Some(state) => ns.pier_engine(&full, state),
        None => ns.pier(&full),
    };
    if !test_pins {
        command.env_remove("PIER_BPF_PIN_DIR");
    }
    let out = command.output().expect("run pier bench net");
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report = serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
        .expect("valid JSON");
    let svg = std::fs::read_to_string(&svg).expect("svg written");
    assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    (out, report)
}

/// Every row is ok with a positive median at every concurrency, or skipped with a reason.
fn check_rows(report: &Value, wanted: &[&str]) {
    let rows = report["rows"].as_array().expect("rows");
    let skipped = report["skipped"].as_array().expect("skipped");
    for name in wanted {
        if let Some(skip) = skipped.iter().find(|s| s["row"] == *name) {
            assert!(skip["reason"].as_str().is_some_and(|r| !r.is_empty()));
            continue;
        }
        let row = rows
            .iter()
            .find(|r| r["row"] == *name)
            .unwrap_or_else(|| panic!("row {name} neither measured nor skipped: {report:#}"));
        assert_eq!(row["status"], "ok", "{row:#}");
        let cells = row["cells"].as_array().expect("cells");
        assert_eq!(cells.len(), 2);
        for cell in cells {
            assert!(cell["requests_per_s"]["median"]
                .as_f64()
                .is_some_and(|v| v > 0.0));
            assert!(cell["p99_us"].as_f64().is_some_and(|v| v > 0.0));
            assert!(cell["cpu_us_per_request"]
                .as_f64()
                .is_some_and(|v| v >= 0.0));
            assert!(cell["ratio_to_direct"].as_f64().is_some());
            assert!(
                cell["ratio_paired"]["median"].as_f64().is_some(),
                "{cell:#}"
            );
            assert_eq!(cell["ratio_paired"]["rounds"], 1, "{cell:#}");
            assert_eq!(cell["samples"][0]["round"], 0, "{cell:#}");
        }
    }
}

#[test]
fn local_client_rows_start_measure_and_clean_up() {
    if !require_root("local_client_rows_start_measure_and_clean_up") {
        return;
    }
    let _serial = serial();
    let ns = TestNs::new();
    let before = bench_traces();
    let rows = [
        "host",
        "direct",
        "pier-proxy",
        "docker-proxy",
        "kernel-nat",
        "nginx",
        "haproxy",
    ];
    let (out, report) = bench(&ns, &["--rows", &rows.join(",")]);
    check_rows(&report, &rows);
    assert_eq!(report["client"], "local");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("wrk -c2"), "{stdout}");
    assert!(stdout.contains("direct container IP"), "{stdout}");
    assert_eq!(
        bench_traces(),
        before,
        "the benchmark left a namespace or work dir"
    );
    assert!(
        !ns.iptables_rules().contains("PIER-BENCH"),
        "iptables rules left"
    );
}

#[test]
fn server_started_by_pier_run_and_removed() {
    if !require_root("server_started_by_pier_run_and_removed") {
        return;
    }
    let _serial = serial();
    let ns = TestNs::new();
    let state = state_dir();
    let rows = ["direct", "pier-proxy", "docker-proxy", "pier-auto"];
    let (_, report) = bench_with(&ns, &["--rows", &rows.join(",")], Some(state.path()));
    assert!(
        report["server"]
            .as_str()
            .is_some_and(|s| s.starts_with("pier run")),
        "{report:#}"
    );
    check_rows(&report, &rows[..3]);
    // pier auto's eBPF programs are pinned host-wide for the namespace that first loaded them,
    // so in a test namespace the row may fail; it must then say why.
    let auto = report["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["row"] == "pier-auto"));
    let auto = auto.expect("pier-auto row");
    assert!(auto["status"] == "ok" || auto["reason"].as_str().is_some_and(|r| !r.is_empty()));
    let ps = ns
        .pier_engine(&["ps", "-a", "-q"], state.path())
        .output()
        .expect("pier ps");
    assert!(ps.status.success(), "{}", describe(&ps));
    assert!(
        ps.stdout.trim_ascii().is_empty(),
        "containers left: {}",
        describe(&ps)
    );
}

/// Names in /sys/fs/bpf of private pin dirs of benchmarks (`pier-bench-<pid>`).
fn bench_pin_dirs() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/sys/fs/bpf") else {
        return Vec::new();
    };
    let mut found: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| is_bench_name(n) && !n.starts_with("pier-bench-net-"))
        .collect();
    found.sort();
    found
}

/// Removes /sys/fs/bpf/pier on drop when it did not exist when the guard was made, so a failing
/// test leaves the host as it found it (and never touches a pin dir that was there before).
struct ProductionPins {
    existed: bool,
}

impl ProductionPins {
    const DIR: &'static str = "/sys/fs/bpf/pier";

    fn note() -> ProductionPins {
        ProductionPins {
            existed: Path::new(Self::DIR).exists(),
        }
    }
}

impl Drop for ProductionPins {
    fn drop(&mut self) {
        if !self.existed {
            let _ = std::fs::remove_dir_all(Self::DIR);
        }
    }
}

/// A pin dir made to look like a killed benchmark's; removed on drop if the benchmark did not.
struct StaleDir(String);

impl Drop for StaleDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

#[test]
fn pins_go_to_a_private_dir_that_is_removed() {
    if !require_root("pins_go_to_a_private_dir_that_is_removed") {
        return;
    }
    if !Path::new("/sys/fs/bpf").is_dir() {
        skip(
            "pins_go_to_a_private_dir_that_is_removed",
            "no bpffs at /sys/fs/bpf",
        );
        return;
    }
    let _serial = serial();
    let ns = TestNs::new();
    let state = state_dir();
    let production = ProductionPins::note();
    // The pin dir of a benchmark that was killed: its pid (a reaped child's) is gone.
    let mut child = Command::new("true").spawn().expect("spawn true");
    let dead = child.id();
    child.wait().expect("reap true");
    let stale = StaleDir(format!("/sys/fs/bpf/pier-bench-{dead}"));
    std::fs::create_dir(&stale.0).expect("make a stale pin dir");
    let before = bench_pin_dirs();
    let rows = ["direct", "pier-auto"];
    let (_, report) = bench_pins(&ns, &["--rows", &rows.join(",")], Some(state.path()), false);
    check_rows(&report, &rows[..1]);
    let notes = report["notes"].as_array().expect("notes");
    let named = notes.iter().filter_map(Value::as_str).find_map(|n| {
        n.split_whitespace()
            .find(|w| w.starts_with("/sys/fs/bpf/pier-bench-"))
    });
    let private = named.unwrap_or_else(|| panic!("no note names the private pin dir: {report:#}"));
    assert!(!Path::new(private).exists(), "{private} left behind");
    assert!(!Path::new(&stale.0).exists(), "stale {} not swept", stale.0);
    let left: Vec<String> = bench_pin_dirs()
        .into_iter()
        .filter(|d| !before.contains(d))
        .collect();
    assert_eq!(left, Vec::<String>::new(), "private pin dirs left");
    if production.existed {
        eprintln!(
            "note: {} existed before the test: not checked",
            ProductionPins::DIR
        );
    } else {
        assert!(
            !Path::new(ProductionPins::DIR).exists(),
            "the benchmark made {}",
            ProductionPins::DIR
        );
    }
    let auto = report["rows"]
        .as_array()
        .and_then(|rows| rows.iter().find(|r| r["row"] == "pier-auto"))
        .expect("pier-auto row");
    assert_eq!(
        auto["status"], "ok",
        "a fresh pin dir serves this namespace: {auto:#}"
    );
}

#[test]
fn pg_workload_runs_pgbench_through_the_rows() {
    if !require_root("pg_workload_runs_pgbench_through_the_rows") {
        return;
    }
    if !Path::new("/usr/lib/postgresql").is_dir() {
        skip(
            "pg_workload_runs_pgbench_through_the_rows",
            "PostgreSQL is not installed",
        );
        return;
    }
    let _serial = serial();
    let ns = TestNs::new();
    let state = state_dir();
    let args = [
        "--workload",
        "pg",
        "--rows",
        "direct,docker-proxy,pier-auto,host",
    ];
    let (_, report) = bench_with(&ns, &args, Some(state.path()));
    assert_eq!(report["workload"], "pg");
    check_rows(&report, &["direct", "docker-proxy"]);
    let skipped = report["skipped"].as_array().expect("skipped");
    assert!(skipped.iter().any(|s| s["row"] == "host"), "{report:#}");
    let ps = ns
        .pier_engine(&["ps", "-a", "-q"], state.path())
        .output()
        .expect("pier ps");
    assert!(
        ps.stdout.trim_ascii().is_empty(),
        "containers left: {}",
        describe(&ps)
    );
}

#[test]
fn remote_and_ipv6_clients_measure() {
    if !require_root("remote_and_ipv6_clients_measure") {
        return;
    }
    let _serial = serial();
    let before = bench_traces();
    let ns = TestNs::new();
    let (_, report) = bench(&ns, &["--client", "remote", "--rows", "direct,kernel-nat"]);
    check_rows(&report, &["direct", "kernel-nat"]);
    // The client runs where the server (on the last core) does not.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let expected = match cores {
        1 => Value::Null,
        2 => "0".into(),
        n => format!("0-{}", n - 2).into(),
    };
    assert_eq!(report["client_cpuset"], expected, "{report:#}");
    assert!(
        !ns.iptables_rules().contains("-i pbc"),
        "FORWARD rules left"
    );
    let (_, report) = bench(&ns, &["--client", "ipv6", "--rows", "direct,kernel-nat"]);
    check_rows(&report, &["direct"]);
    assert_eq!(report["client_cpuset"], expected, "{report:#}");
    let skipped = report["skipped"].as_array().expect("skipped");
    assert!(
        skipped.iter().any(|s| s["row"] == "kernel-nat"),
        "{report:#}"
    );
    assert_eq!(bench_traces(), before);
}

#[test]
fn port_in_use_fails_that_row_only() {
    if !require_root("port_in_use_fails_that_row_only") {
        return;
    }
    let _serial = serial();
    let ns = TestNs::new();
    // docker-proxy is row 5 of the full list: it listens on --port + 5.
    let mut blocker: Child = ns
        .pier(&["bench", "pong", "--port", "28085", "--threads", "1"])
        .spawn()
        .expect("start a blocker");
    ns.wait_listening(28085);
    let args = ["--rows", "docker-proxy,direct"];
    let (_, report) = bench(&ns, &args);
    let _ = blocker.kill();
    let _ = blocker.wait();
    let rows = report["rows"].as_array().expect("rows");
    let proxy = rows.iter().find(|r| r["row"] == "docker-proxy");
    if let Some(proxy) = proxy {
        assert_eq!(proxy["status"], "failed");
        let reason = proxy["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("28085") && reason.contains("in use"),
            "{reason}"
        );
    }
    check_rows(&report, &["direct"]);
}

/// Processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let entries = std::fs::read_dir("/proc").expect("read /proc");
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|raw| String::from_utf8_lossy(&raw).replace('\0', " "))
        .filter(|line| line.contains(needle))
        .collect()
}

#[test]
fn ctrl_c_stops_the_run_and_cleans_up() {
    if !require_root("ctrl_c_stops_the_run_and_cleans_up") {
        return;
    }
    let _serial = serial();
    let ns = TestNs::new();
    let before = bench_traces();
    let args = [
        "bench",
        "net",
        "--server",
        "netns",
        "--duration",
        "5",
        "--rounds",
        "5",
    ];
    let rows = ["--rows", "direct,docker-proxy,nginx", "--port", "29080"];
    let mut child = ns
        .pier(&[&args[..], &rows].concat())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start pier bench net");
    let stderr = child.stderr.take().expect("stderr");
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let started = lines
        .by_ref()
        .map_while(Result::ok)
        .any(|l| l.contains("round 1"));
    assert!(started, "the run never reached round 1");
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).expect("SIGINT");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let out = child.wait_with_output().expect("wait");
    assert_eq!(
        out.status.code(),
        Some(130),
        "{}\n{}",
        describe(&out),
        rest.join("\n")
    );
    assert!(
        rest.iter().any(|l| l.contains("stopping and cleaning up")),
        "{rest:?}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("direct container IP"));
    assert_eq!(
        bench_traces(),
        before,
        "the benchmark left a namespace or work dir"
    );
    assert!(
        !ns.iptables_rules().contains("PIER-BENCH"),
        "iptables rules left"
    );
    assert_eq!(processes_with("-host-port 29085"), Vec::<String>::new());
    assert_eq!(processes_with("pier-bench-net-"), Vec::<String>::new());
}

#[test]
fn unknown_row_and_workload_are_refused_by_name() {
    for (flag, value) in [("--rows", "direct,nosuch"), ("--workload", "nosuch")] {
        let out = Command::new(PIER)
            .args(["bench", "net", flag, value])
            .output()
            .expect("run pier");
        assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch"));
    }
}

#[test]
fn a_bad_client_cpuset_is_refused_before_anything_starts() {
    if !require_root("a_bad_client_cpuset_is_refused_before_anything_starts") {
        return;
    }
    let _serial = serial();
    let before = bench_traces();
    let out = Command::new(PIER)
        .args([
            "bench",
            "net",
            "--client",
            "remote",
            "--client-cpuset",
            "3-1",
        ])
        .output()
        .expect("run pier");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--client-cpuset") && stderr.contains("3-1"),
        "{stderr}"
    );
    let out = Command::new(PIER)
        .args(["bench", "net", "--client-cpuset", "4095"])
        .output()
        .expect("run pier");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--client-cpuset: CPU 4095 is not one"),
        "{stderr}"
    );
    assert_eq!(bench_traces(), before);
}

#[test]
fn missing_wrk_is_named() {
    let out = Command::new(PIER)
        .args(["bench", "net"])
        .env("PATH", "/nonexistent-pier-test")
        .output()
        .expect("run pier");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("wrk is not installed"), "{stderr}");
}
