//! Black-box test of `pier bench scale`: with tiny durations and port counts it publishes, measures
//! and removes every row, writes JSON of the documented shape, and leaves no container or
//! iptables rule behind. Never asserts a timing.
//!
//! The run happens in a network namespace of the test's own, entered with `nsenter --net` (which
//! keeps the cgroup mounts `pier run` needs), with its own engine state dir and the test pool.
//!
//! Needs root (skips with a reason otherwise, fails under `CI=true`), wrk and iptables.
use serde_json::Value;
use std::process::{Command, Output};

const PIER: &str = env!("CARGO_BIN_EXE_pier");

fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A network namespace of the test's own; deleted on drop.
struct TestNs(String);

impl Drop for TestNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        // The eBPF pins pier made for this namespace (PIER_BPF_PIN_DIR): unpinning detaches.
        let _ = std::fs::remove_dir_all(format!("/sys/fs/bpf/{}", self.0));
    }
}

#[test]
fn scale_publishes_measures_and_removes() {
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "bench_scale needs root under CI=true"
        );
        eprintln!("skipped: pier bench scale needs root");
        return;
    }
    let ns = TestNs(format!("pier-test-bench-scale-{}", std::process::id()));
    let added = Command::new("ip").args(["netns", "add", &ns.0]).status();
    assert!(added.is_ok_and(|s| s.success()), "ip netns add {}", ns.0);
    let lo = Command::new("ip")
        .args(["netns", "exec", &ns.0, "ip", "link", "set", "lo", "up"])
        .status();
    assert!(lo.is_ok_and(|s| s.success()), "lo up in {}", ns.0);
    let dir = tempfile::Builder::new()
        .prefix("pier-test-bench-scale-")
        .tempdir()
        .expect("tempdir");
    let json = dir.path().join("scale.json");
    let state = dir.path().join("state");
    let enter = format!("--net=/run/netns/{}", ns.0);
    let pier = |args: &[&str]| {
        let mut command = Command::new("nsenter");
        command.arg(&enter).arg(PIER).args(args);
        command.env("PIER_STATE_DIR", &state);
        command.env("PIER_SUBNET_POOL", "198.18.0.0/15:24");
        command.env("PIER_BPF_PIN_DIR", format!("/sys/fs/bpf/{}", ns.0));
        command.output().expect("run pier")
    };
    let json_text = json.to_string_lossy().into_owned();
    let args = [
        "bench",
        "scale",
        "--ports",
        "1,3",
        "--rounds",
        "1",
        "--duration",
        "1",
    ];
    let out = pier(
        &[
            &args[..],
            &[
                "--rows",
                "docker-iptables,pier-auto",
                "--json",
                &json_text,
                "--svg",
                &format!("{json_text}.svg"),
            ],
        ]
        .concat(),
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("JSON");
    assert_eq!(report["benchmark"], "scale");
    let chart = std::fs::read_to_string(format!("{json_text}.svg")).expect("the --svg file");
    assert!(
        chart.starts_with("<svg") && chart.contains("Docker iptables (rule per port), 3 port(s)"),
        "{chart}"
    );
    let rows = report["rows"].as_array().expect("rows");
    let docker = rows
        .iter()
        .find(|r| r["row"] == "docker-iptables")
        .expect("docker-iptables row");
    let cells = docker["cells"].as_array().expect("cells");
    assert_eq!(cells.len(), 2, "{docker:#}");
    for cell in cells {
        assert!(cell["failure"].is_null(), "{cell:#}");
        assert!(cell["connect_us_median"].as_f64().is_some_and(|v| v > 0.0));
        assert!(cell["requests_per_s_median"]
            .as_f64()
            .is_some_and(|v| v > 0.0));
    }
    let auto = rows
        .iter()
        .find(|r| r["row"] == "pier-auto")
        .expect("pier-auto row");
    for cell in auto["cells"].as_array().expect("cells") {
        let measured = cell["connect_us_median"].as_f64().is_some();
        assert!(measured || cell["failure"].is_string(), "{cell:#}");
    }
    let ps = pier(&["ps", "-a", "-q"]);
    assert!(
        ps.stdout.trim_ascii().is_empty(),
        "containers left: {}",
        describe(&ps)
    );
    let rules = Command::new("nsenter")
        .arg(&enter)
        .args(["iptables", "-t", "nat", "-S"])
        .output()
        .expect("iptables");
    assert!(!String::from_utf8_lossy(&rules.stdout).contains("PIER-BENCH"));
}

#[test]
fn unknown_scale_row_is_refused_by_name() {
    let out = Command::new(PIER)
        .args(["bench", "scale", "--rows", "nosuch"])
        .output()
        .expect("run pier");
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuch"));
}
