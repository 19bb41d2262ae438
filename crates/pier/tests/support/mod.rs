//! Shared support of the black-box tests of the pier binary (`tests/cli_*.rs`).
//!
//! Theory of operation: every test gets its own `--root` (a `pier-test-` temp dir) through
//! [`Pier`], and its own bundle through [`Bundle`]: a temp dir with a rootfs holding the static
//! busybox of Debian's busybox-static and a config.json written by `pier spec` and edited by the
//! test. Container ids are unique per test run ([`unique_id`]). Dropping a `Pier` force-deletes
//! every container left under its root and removes the root, so a failing test leaves nothing
//! behind. [`assert_no_trace`] checks the promise of issue 2's "Bad input": nothing under
//! `--root`, no mount under the bundle, no process and no cgroup carrying the id.
//!
//! Privileges: tests that start containers call [`require_root`] first: without root they print
//! why and return, except under `CI=true`, where they fail.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use serde_json::Value;
use std::fs;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// The pier binary under test.
pub const PIER: &str = env!("CARGO_BIN_EXE_pier");

/// Busybox applets linked into every test rootfs.
const APPLETS: &[&str] = &[
    "sh", "true", "false", "sleep", "cat", "echo", "ps", "id", "env", "pwd", "hostname", "ls",
    "kill", "test", "grep", "head", "wc", "tty",
];

/// True when the test may go on; false (after printing why) when it must skip. Under `CI=true`
/// a missing privilege fails the test instead.
pub fn require_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{test} needs root, and CI=true forbids skipping it");
    }
    eprintln!("skipping {test}: needs root");
    false
}

/// A container id no other test (or run) uses: `pier-test-<tag>-<pid>-<n>`.
pub fn unique_id(tag: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("pier-test-{tag}-{}-{n}", std::process::id())
}

/// A `pier-test-` temp dir.
pub fn temp_dir() -> TempDir {
    tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .expect("creating a temp dir")
}

/// The pier binary with a private `--root`, cleaned up on drop.
#[derive(Debug)]
pub struct Pier {
    root: TempDir,
}

impl Pier {
    pub fn new() -> Self {
        Pier { root: temp_dir() }
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// `pier --root ROOT ARGS...`, stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(PIER);
        cmd.arg("--root").arg(self.root()).args(args);
        cmd.stdin(Stdio::null());
        cmd
    }

    /// Runs pier to the end and returns what it printed. Output goes through files, not pipes:
    /// a detached container inherits pier's stdout and stderr and would hold a pipe open.
    pub fn run(&self, args: &[&str]) -> Output {
        finish(&mut self.command(args))
    }

    /// Runs pier, asserts it succeeded, returns its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "pier {args:?} failed: {}",
            describe(&out)
        );
        String::from_utf8(out.stdout).expect("stdout is UTF-8")
    }

    /// Runs pier, asserts it failed with exit code 1 and nothing on stdout, returns its stderr.
    pub fn fails(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(1),
            "pier {args:?}: {}",
            describe(&out)
        );
        let quiet = out.stdout.is_empty();
        assert!(
            quiet,
            "pier {args:?} failed but printed: {}",
            describe(&out)
        );
        String::from_utf8(out.stderr).expect("stderr is UTF-8")
    }

    /// `pier state ID` parsed.
    pub fn state(&self, id: &str) -> Value {
        serde_json::from_str(&self.ok(&["state", id])).expect("state prints JSON")
    }

    /// Waits (bounded, not timed) until the container exists and reaches `status`.
    pub fn wait_status(&self, id: &str, status: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = self.run(&["state", id]);
            let state: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            if state["status"] == status {
                return;
            }
            let late = Instant::now() >= deadline;
            assert!(!late, "{id} never became {status}: {}", describe(&out));
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Entries left under `--root`.
    pub fn root_entries(&self) -> Vec<PathBuf> {
        match fs::read_dir(self.root()) {
            Ok(dir) => dir.map(|e| e.expect("reading --root").path()).collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Pier {
    fn drop(&mut self) {
        for entry in self.root_entries() {
            if let Some(id) = entry.file_name().and_then(|n| n.to_str()) {
                let _ = self.command(&["delete", "--force", id]).output();
            }
        }
    }
}

/// Runs `cmd` with stdout and stderr in temp files until it exits, and returns them.
pub fn finish(cmd: &mut Command) -> Output {
    let mut stdout = tempfile::tempfile().expect("creating a temp file");
    let mut stderr = tempfile::tempfile().expect("creating a temp file");
    let status = cmd
        .stdout(stdout.try_clone().expect("cloning a file"))
        .stderr(stderr.try_clone().expect("cloning a file"))
        .status()
        .expect("running pier");
    Output {
        status,
        stdout: read_all(&mut stdout),
        stderr: read_all(&mut stderr),
    }
}

fn read_all(file: &mut fs::File) -> Vec<u8> {
    let mut bytes = Vec::new();
    file.seek(SeekFrom::Start(0))
        .expect("rewinding a temp file");
    file.read_to_end(&mut bytes).expect("reading a temp file");
    bytes
}

/// "exit status, stdout, stderr" of a finished pier, for assertion messages.
pub fn describe(out: &Output) -> String {
    format!(
        "{}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// An OCI bundle in a temp dir: busybox rootfs and a config.json from `pier spec`.
#[derive(Debug)]
pub struct Bundle {
    dir: TempDir,
}

impl Bundle {
    /// A bundle whose process runs `args` without a terminal.
    pub fn busybox(args: &[&str]) -> Self {
        let bundle = Self::without_config();
        let out = Command::new(PIER)
            .args(["spec", "--bundle"])
            .arg(bundle.path())
            .output()
            .expect("running pier spec");
        assert!(out.status.success(), "pier spec: {}", describe(&out));
        bundle.edit_config(|config| {
            config["process"]["args"] = args.iter().map(|a| Value::from(*a)).collect();
            config["process"]["terminal"] = Value::Bool(false);
        });
        bundle
    }

    /// A bundle directory with the busybox rootfs and no config.json.
    pub fn without_config() -> Self {
        let bundle = Bundle { dir: temp_dir() };
        let bin = bundle.rootfs().join("bin");
        fs::create_dir_all(&bin).expect("creating rootfs/bin");
        fs::copy("/bin/busybox", bin.join("busybox"))
            .expect("copying /bin/busybox (apt install busybox-static)");
        for applet in APPLETS {
            std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("linking an applet");
        }
        for dir in ["proc", "sys", "dev", "tmp", "etc"] {
            fs::create_dir_all(bundle.rootfs().join(dir)).expect("creating a rootfs dir");
        }
        bundle
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn rootfs(&self) -> PathBuf {
        self.path().join("rootfs")
    }

    pub fn config_path(&self) -> PathBuf {
        self.path().join("config.json")
    }

    /// Reads config.json, lets `edit` change it, writes it back.
    pub fn edit_config(&self, edit: impl FnOnce(&mut Value)) {
        let text = fs::read_to_string(self.config_path()).expect("reading config.json");
        let mut config: Value = serde_json::from_str(&text).expect("config.json is JSON");
        edit(&mut config);
        fs::write(self.config_path(), config.to_string()).expect("writing config.json");
    }
}

/// Asserts that nothing of container `id` is left: no entry under `--root`, no mount under the
/// bundle, no process carrying the id on its command line or rooted in the rootfs, no cgroup
/// named after it.
pub fn assert_no_trace(pier: &Pier, bundle: &Bundle, id: &str) {
    assert_eq!(
        pier.root_entries(),
        Vec::<PathBuf>::new(),
        "--root is not empty"
    );
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("reading mountinfo");
    let bundle_path = bundle.path().to_string_lossy();
    assert!(
        !mountinfo.contains(bundle_path.as_ref()),
        "a mount under {bundle_path} is left:\n{mountinfo}"
    );
    let leftovers = processes_of(id, &bundle.rootfs());
    assert!(
        leftovers.is_empty(),
        "processes of {id} are left: {leftovers:?}"
    );
    let cgroups = cgroups_named(id);
    assert!(cgroups.is_empty(), "cgroups of {id} are left: {cgroups:?}");
}

/// Pids (other than this test's) whose command line holds `id` or whose root is `rootfs`.
pub fn processes_of(id: &str, rootfs: &Path) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(proc) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me)
        .filter(|pid| {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let root = fs::read_link(format!("/proc/{pid}/root")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(id) || root == rootfs
        })
        .collect()
}

/// Directories under /sys/fs/cgroup (four levels deep) whose name holds `id`.
pub fn cgroups_named(id: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut level = vec![PathBuf::from("/sys/fs/cgroup")];
    for _ in 0..5 {
        let mut next = Vec::new();
        for dir in &level {
            let Ok(entries) = fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                    continue;
                }
                if entry.file_name().to_string_lossy().contains(id) {
                    found.push(path);
                } else {
                    next.push(path);
                }
            }
        }
        level = next;
    }
    found
}

/// The container's cgroup directory of v1 `controller`, from /proc/PID/cgroup.
pub fn cgroup_v1_dir(pid: i64, controller: &str) -> PathBuf {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("reading /proc/PID/cgroup");
    let line = text
        .lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == controller))
        })
        .unwrap_or_else(|| panic!("pid {pid} has no {controller} cgroup:\n{text}"));
    let path = line.splitn(3, ':').nth(2).unwrap_or("/");
    Path::new("/sys/fs/cgroup")
        .join(controller)
        .join(path.trim_start_matches('/'))
}
