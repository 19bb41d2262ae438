//! Black-box test of `pier bench start`: it runs, writes JSON of the documented shape (see
//! commands/bench/report.rs), and leaves no work dir behind. Never asserts a timing.
//!
//! The benchmark runs inside a network namespace of the test's own (entered with `nsenter --net`,
//! which keeps /sys and so the cgroup mounts), with its own engine state dir and the test subnet
//! pool, so the bridge the engine rows make lives and dies with the namespace.
//!
//! The docker and podman rows get a smoke run of their own (2 rounds) that proves numbers come out
//! and that nothing is left: no process of the private dockerd/containerd/conmon, no network
//! namespace, no change in the host's iptables, no /dev/shm/libpod_lock or other host path the
//! daemons create, no cgroup, no work dir. The benchmark runs are serialized (one lock), since two
//! podmans would share /dev/shm/libpod_lock and the leftover checks look at the whole host.
//!
//! Needs root (skips with a reason otherwise, fails under `CI=true`) and busybox-static; the
//! docker and podman rows need docker.io and podman (skipped when missing, required under CI).
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Mutex;

const PIER: &str = env!("CARGO_BIN_EXE_pier");

/// Serializes the benchmark runs of this file.
static SERIAL: Mutex<()> = Mutex::new(());

/// Skips (true) without root, except under CI=true, where that fails.
fn skip_without_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "bench_start needs root under CI=true"
    );
    eprintln!("skipped: pier bench start needs root");
    true
}

/// A network namespace of the test's own, removed on drop.
struct TestNetns(String);

impl TestNetns {
    fn new(name: &str) -> TestNetns {
        let netns = format!("pier-test-{name}-{}", std::process::id());
        let added = Command::new("ip").args(["netns", "add", &netns]).status();
        assert!(added.is_ok_and(|s| s.success()), "ip netns add {netns}");
        let guard = TestNetns(netns);
        let lo = Command::new("ip")
            .args(["-n", &guard.0, "link", "set", "lo", "up"])
            .status();
        assert!(lo.is_ok_and(|s| s.success()), "lo up in {}", guard.0);
        guard
    }

    /// `pier bench start ARGS` inside the namespace, with the engine state in `dir`.
    fn bench(&self, dir: &Path, args: &[&str]) -> Output {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.0))
            .arg(PIER)
            .args(["bench", "start"])
            .args(args)
            .env("PIER_STATE_DIR", dir.join("engine-state"))
            .env("PIER_SUBNET_POOL", "198.18.0.0/15:24")
            .env("PIER_BPF_PIN_DIR", format!("/sys/fs/bpf/{}", self.0))
            .current_dir(dir)
            .output()
            .expect("run pier bench start")
    }
}

impl Drop for TestNetns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        // The eBPF pins pier made for this namespace (PIER_BPF_PIN_DIR): unpinning detaches.
        let _ = std::fs::remove_dir_all(format!("/sys/fs/bpf/{}", self.0));
    }
}

/// The benchmarks' work dirs (`pier-bench-<pid>`) in /dev/shm and the temp dir.
fn pier_bench_dirs() -> Vec<String> {
    let bases = [std::path::PathBuf::from("/dev/shm"), std::env::temp_dir()];
    let entries = bases
        .iter()
        .filter_map(|base| std::fs::read_dir(base).ok())
        .flat_map(|dir| dir.flatten());
    let mut names: Vec<String> = entries
        .map(|e| e.path().to_string_lossy().into_owned())
        .filter(|n| {
            n.rsplit('/')
                .next()
                .and_then(|name| name.strip_prefix("pier-bench-"))
                .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect();
    names.sort();
    names
}

#[test]
fn unknown_row_is_refused_by_name() {
    let output = Command::new(PIER)
        .args(["bench", "start", "--rows", "pier,nosuch"])
        .output()
        .expect("run pier");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("nosuch"));
}

#[test]
fn start_writes_json_of_the_documented_shape() {
    if skip_without_root() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix("pier-test-bench-")
        .tempdir()
        .expect("tempdir");
    let json = dir.path().join("start.json");
    let before = pier_bench_dirs();
    let netns = TestNetns::new("bench-start");
    let svg = dir.path().join("start.svg");
    // Relative paths, from the directory pier runs in: entering crun's mount namespace must
    // not move where they land.
    let output = netns.bench(
        dir.path(),
        &[
            "--runs",
            "2",
            "--warmup",
            "0",
            "--json",
            "start.json",
            "--svg",
            "start.svg",
        ],
    );
    drop(netns);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("pier ÷ row"), "{stdout}");
    let chart = std::fs::read_to_string(&svg).expect("the --svg file");
    assert!(
        chart.starts_with("<svg") && chart.contains("pier run --network bridge -p 8080"),
        "{chart}"
    );
    assert!(
        stdout.contains("pier run --network bridge -p 8080"),
        "{stdout}"
    );
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    check_shape(&report);
    assert_eq!(
        pier_bench_dirs(),
        before,
        "a pier-bench work dir was left behind"
    );
}

fn check_shape(report: &Value) {
    assert_eq!(report["benchmark"], "start");
    assert_eq!(report["runs"], 2);
    assert!(report["machine"]["cores"].as_u64().is_some_and(|c| c >= 1));
    assert!(report["machine"]["kernel"].is_string());
    assert!(report["machine"]["versions"]["pier"].is_string());
    let rows = report["rows"].as_array().expect("rows");
    assert!(
        rows.iter()
            .any(|r| r["runtime"] == "pier" && r["seccomp"] == "none"),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|r| r["runtime"] == "pier" && r["seccomp"] == "docker"),
        "{rows:?}"
    );
    for row in rows {
        assert!(row["command"].is_string());
        match row["status"].as_str() {
            Some("ok") => {
                assert_eq!(row["samples_ms"].as_array().map(Vec::len), Some(2), "{row}");
                let (min, median, max) = (
                    row["min_ms"].as_f64(),
                    row["median_ms"].as_f64(),
                    row["max_ms"].as_f64(),
                );
                assert!(min <= median && median <= max && min.is_some(), "{row}");
            }
            Some("failed") => assert!(row["reason"].is_string(), "{row}"),
            other => panic!("unexpected status {other:?} in {row}"),
        }
    }
    for ratio in report["ratios"].as_array().expect("ratios") {
        assert!(
            ratio["pier_over_peer"].as_f64().is_some_and(|r| r > 0.0),
            "{ratio}"
        );
        assert!(
            ratio["peer"].is_string() && ratio["seccomp"].is_string(),
            "{ratio}"
        );
    }
    assert!(report["skipped"].is_array() && report["notes"].is_array());
}

/// What the docker and podman rows could leave on the host.
#[derive(Debug, PartialEq)]
struct HostTraces {
    iptables: String,
    netns: Vec<String>,
    processes: Vec<String>,
    paths: Vec<String>,
    cgroups: Vec<String>,
    work_dirs: Vec<String>,
}

impl HostTraces {
    fn take() -> HostTraces {
        let save = Command::new("iptables-save")
            .output()
            .expect("iptables-save");
        let iptables = String::from_utf8_lossy(&save.stdout)
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(" [").next().unwrap_or(l).to_string() + "\n")
            .collect();
        let listed = |dir: &str| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        let paths = [
            "/run/docker",
            "/run/containerd",
            "/run/containers",
            "/run/libpod",
            "/run/runc",
            "/var/lib/containers",
            "/dev/shm/libpod_lock",
        ];
        HostTraces {
            iptables,
            // Only the benchmark's own: other test binaries add and remove theirs meanwhile.
            netns: listed("/run/netns")
                .into_iter()
                .filter(|n| n.starts_with("pier-bench-"))
                .collect(),
            processes: peer_processes(),
            paths: paths
                .iter()
                .filter(|p| Path::new(p).exists())
                .map(|p| p.to_string())
                .collect(),
            cgroups: listed("/sys/fs/cgroup/unified")
                .into_iter()
                .chain(listed("/sys/fs/cgroup/memory"))
                .filter(|n| n.starts_with("pier-bench-") || n == "libpod_parent")
                .collect(),
            work_dirs: pier_bench_dirs(),
        }
    }
}

/// Command lines of processes started from a benchmark's peers dir (dockerd, containerd, shims,
/// conmon, docker-proxy).
fn peer_processes() -> Vec<String> {
    let entries = std::fs::read_dir("/proc").expect("read /proc");
    entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains("/pier-bench-") && c.contains("/peers/"))
        .collect()
}

/// The docker and podman rows that can run here (all of them under CI=true).
fn peer_rows() -> Vec<&'static str> {
    let installed = |program: &str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {program}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let ci = std::env::var("CI").as_deref() == Ok("true");
    let mut rows = Vec::new();
    if ci
        || (installed("dockerd") || Path::new("/usr/sbin/dockerd").exists()) && installed("docker")
    {
        rows.extend(["docker-run-none", "docker-run-bridge", "docker-run-publish"]);
    } else {
        eprintln!("docker rows not checked: dockerd or docker missing (apt-get install docker.io)");
    }
    if ci || installed("podman") && installed("runc") {
        rows.extend(["podman-run-none", "podman-run-bridge", "podman-run-publish"]);
    } else {
        eprintln!("podman rows not checked: podman or runc missing");
    }
    rows
}

#[test]
fn docker_and_podman_rows_measure_and_leave_nothing_behind() {
    if skip_without_root() {
        return;
    }
    let rows = peer_rows();
    if rows.is_empty() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: scripts/setup.sh installs docker.io and podman, yet neither is here"
        );
        eprintln!("skipped: neither docker nor podman is installed");
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::Builder::new()
        .prefix("pier-test-bench-peers-")
        .tempdir()
        .expect("tempdir");
    let json = dir.path().join("start.json");
    let before = HostTraces::take();
    let netns = TestNetns::new("bench-peers");
    let wanted = format!(
        "pier-run-none,pier-run-bridge,pier-run-publish,{}",
        rows.join(",")
    );
    let json_arg = json.to_string_lossy().into_owned();
    let args = ["--rows", &wanted, "--seccomp", "none", "--runs", "2"];
    let output = netns.bench(
        dir.path(),
        &[&args[..], &["--warmup", "0", "--json", &json_arg]].concat(),
    );
    drop(netns);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "stderr: {stderr}");
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json written"))
            .expect("valid JSON");
    for row in rows {
        let found = report["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .find(|r| r["runtime"] == row);
        let found = found.unwrap_or_else(|| panic!("no row {row} in {report}"));
        assert_eq!(found["status"], "ok", "{found}\nstderr: {stderr}");
        assert_eq!(
            found["samples_ms"].as_array().map(Vec::len),
            Some(2),
            "{found}"
        );
        let ratio = report["ratios"]
            .as_array()
            .expect("ratios")
            .iter()
            .any(|r| r["peer"] == row);
        assert!(ratio, "no ratio for {row}: {report}");
    }
    assert_eq!(
        HostTraces::take(),
        before,
        "the docker/podman rows left something behind"
    );
}
