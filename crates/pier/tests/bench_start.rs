//! Black-box test of `pier bench start`: it runs, writes JSON of the documented shape (see
//! commands/bench/report.rs), and leaves no work dir behind. Never asserts a timing.
//!
//! The benchmark runs inside a network namespace of the test's own (entered with `nsenter --net`,
//! which keeps /sys and so the cgroup mounts), with its own engine state dir and the test subnet
//! pool, so the bridge the engine rows make lives and dies with the namespace.
//!
//! Needs root (skips with a reason otherwise, fails under `CI=true`) and busybox-static.
use serde_json::Value;
use std::process::Command;

const PIER: &str = env!("CARGO_BIN_EXE_pier");

fn pier_bench_dirs() -> Vec<String> {
    let entries = std::fs::read_dir(std::env::temp_dir()).expect("read temp dir");
    let names = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned());
    names
        .filter(|n| {
            n.strip_prefix("pier-bench-")
                .is_some_and(|pid| pid.bytes().all(|b| b.is_ascii_digit()))
        })
        .collect()
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
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "bench_start needs root under CI=true"
        );
        eprintln!("skipped: pier bench start needs root");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pier-test-bench-")
        .tempdir()
        .expect("tempdir");
    let json = dir.path().join("start.json");
    let before = pier_bench_dirs();
    let netns = format!("pier-test-bench-start-{}", std::process::id());
    let added = Command::new("ip").args(["netns", "add", &netns]).status();
    assert!(added.is_ok_and(|s| s.success()), "ip netns add {netns}");
    let lo = Command::new("ip")
        .args(["netns", "exec", &netns, "ip", "link", "set", "lo", "up"])
        .status();
    assert!(lo.is_ok_and(|s| s.success()), "lo up in {netns}");
    let state = dir.path().join("engine-state");
    let output = Command::new("nsenter")
        .arg(format!("--net=/run/netns/{netns}"))
        .arg(PIER)
        .args(["bench", "start", "--runs", "2", "--warmup", "0", "--json"])
        .arg(&json)
        .env("PIER_STATE_DIR", &state)
        .env("PIER_SUBNET_POOL", "198.18.0.0/15:24")
        .output();
    let _ = Command::new("ip").args(["netns", "del", &netns]).status();
    let output = output.expect("run pier bench start");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("pier ÷ row"), "{stdout}");
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
