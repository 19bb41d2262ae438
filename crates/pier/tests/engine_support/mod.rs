//! Shared support of the engine's black-box tests (`tests/engine_*.rs`).
//!
//! Theory of operation: every test makes its own "host": a network namespace
//! `pier-test-<tag>-<pid>-<n>` ([`Netns`]) and a state directory in a `pier-test-` temp dir
//! ([`Host`]). pier runs inside that namespace through `nsenter --net` (only the network
//! namespace: overlay mounts, cgroups and processes stay visible to the test, so it can check
//! they are gone), with `PIER_STATE_DIR` and `PIER_SUBNET_POOL=198.18.0.0/15:24`, so bridge
//! `pier0`, the `inet pier` table, veths and leases all live in the test's namespace and state
//! directory and vanish with them. Dropping a `Host` force-removes every container, runs
//! `pier gc`, then deletes the namespace; a failing test leaves nothing behind.
//! [`Snapshot`] records everything a container may leave behind (links, nft ruleset, leases,
//! container, runtime and network records, mounts under the state dir) for before/after checks.
//!
//! Privileges: root ([`require_root`]: skip with a printed reason, fail under `CI=true`).
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use tempfile::TempDir;

// What every black-box test of the binary needs (the binary, root or skip, temp dirs, unique
// names, commands run to the end through files) lives in the support of tests/cli_*.rs.
#[path = "../support/mod.rs"]
mod cli;
pub use cli::{describe, finish, require_root, temp_dir, unique_id as unique, PIER};

/// Docker's exit code for pier's own failures.
pub const ENGINE_FAILED: i32 = 125;

/// Runs a host tool, asserting it succeeds; its stdout.
pub fn sh(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        describe(&out)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A network namespace made by `ip netns add`, deleted on drop.
#[derive(Debug)]
pub struct Netns {
    pub name: String,
}

impl Netns {
    pub fn new(tag: &str) -> Netns {
        let netns = Netns { name: unique(tag) };
        sh("ip", &["netns", "add", &netns.name]);
        netns.ip(&["link", "set", "lo", "up"]);
        netns
    }

    pub fn path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.name)
    }

    /// `ip -n NAME ARGS`, asserting success; its stdout.
    pub fn ip(&self, args: &[&str]) -> String {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        sh("ip", &all)
    }

    /// The names of the links in the namespace.
    pub fn links(&self) -> Vec<String> {
        let mut links: Vec<String> = self
            .ip(&["-o", "link", "show"])
            .lines()
            .filter_map(|l| l.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_string())
            .collect();
        links.sort();
        links
    }

    /// Runs `f` on a thread that has entered the namespace (the test's threads never move).
    pub fn within<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = fs::File::open(self.path()).expect("opening the netns file");
        std::thread::scope(|s| {
            s.spawn(move || {
                nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                    .expect("entering the test netns");
                f()
            })
            .join()
            .expect("netns thread panicked")
        })
    }

    /// A link `name` in the namespace with `address` (CIDR) on it, up: one end of a veth pair
    /// whose other end (`name` + "p") is up too (this kernel has no dummy driver).
    pub fn dummy(&self, name: &str, address: &str) {
        let peer = format!("{name}p");
        self.ip(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
        self.ip(&["addr", "add", address, "dev", name]);
        self.ip(&["link", "set", &peer, "up"]);
        self.ip(&["link", "set", name, "up"]);
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

/// A test "host": a network namespace and a state directory pier runs in.
#[derive(Debug)]
pub struct Host {
    pub netns: Netns,
    state: TempDir,
}

impl Host {
    pub fn new(tag: &str) -> Host {
        Host {
            netns: Netns::new(tag),
            state: temp_dir(),
        }
    }

    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// Where pier pins its eBPF programs for this namespace (removed, so detached, on drop).
    pub fn bpf_pins(&self) -> PathBuf {
        Path::new("/sys/fs/bpf").join(&self.netns.name)
    }

    /// The netns cookies in the ebpf client map pinned for this host (bpftool's JSON dump; with the
    /// map's BTF, `formatted.key` is the cookie as a number).
    pub fn client_cookies(&self) -> Vec<u64> {
        let map = self.bpf_pins().join("pier_clients");
        let bpftool = ["/usr/sbin/bpftool", "bpftool"]
            .into_iter()
            .find(|p| !p.starts_with('/') || std::path::Path::new(p).exists())
            .unwrap_or("bpftool");
        let out = std::process::Command::new(bpftool)
            .args(["-j", "map", "dump", "pinned"])
            .arg(&map)
            .output()
            .expect("running bpftool");
        assert!(out.status.success(), "bpftool map dump: {}", describe(&out));
        let entries: Vec<serde_json::Value> =
            serde_json::from_slice(&out.stdout).expect("bpftool's JSON");
        let mut cookies: Vec<u64> = entries
            .iter()
            .map(|e| e["formatted"]["key"].as_u64())
            .map(|key| key.unwrap_or_else(|| panic!("no formatted key: {entries:?}")))
            .collect();
        cookies.sort();
        cookies
    }

    /// `pier ARGS` inside the namespace, over the state directory, stdin closed.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net={}", self.netns.path().display()))
            .arg("--")
            .arg(PIER)
            .args(args)
            .env("PIER_STATE_DIR", self.state_dir())
            .env("PIER_SUBNET_POOL", "198.18.0.0/15:24")
            .env("PIER_BPF_PIN_DIR", self.bpf_pins())
            .env_remove("PIER_CRASH_AT")
            .stdin(Stdio::null());
        cmd
    }

    /// Runs pier to the end; what it printed.
    pub fn run(&self, args: &[&str]) -> Output {
        finish(&mut self.command(args))
    }

    /// Runs pier with `input` on stdin.
    pub fn run_with_input(&self, args: &[&str], input: &str) -> Output {
        let mut file = tempfile::tempfile().expect("stdin file");
        file.write_all(input.as_bytes()).expect("writing stdin");
        file.seek(SeekFrom::Start(0)).expect("rewinding stdin");
        finish(self.command(args).stdin(file))
    }

    /// Runs pier, asserts it succeeded; its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "pier {args:?} failed: {}",
            describe(&out)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs pier, asserts it failed as pier (125) and named `culprit`; its stderr.
    pub fn fails_naming(&self, args: &[&str], culprit: &str) -> String {
        let out = self.run(args);
        assert_eq!(
            out.status.code(),
            Some(ENGINE_FAILED),
            "pier {args:?}: {}",
            describe(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            stderr.contains(culprit),
            "pier {args:?} does not name {culprit:?}: {stderr}"
        );
        stderr
    }

    /// Starts a detached container named `name` running `command` on `host`; its id.
    pub fn start(&self, name: &str, flags: &[&str], command: &[&str]) -> String {
        let mut args = vec!["run", "-d", "--name", name];
        args.extend_from_slice(flags);
        args.push("host");
        args.extend_from_slice(command);
        self.ok(&args).trim().to_string()
    }

    /// The container's IPv4 address on eth0, read inside it with the host's `ip`.
    pub fn address(&self, container: &str) -> String {
        let out = self.ok(&[
            "exec", container, "ip", "-4", "-o", "addr", "show", "dev", "eth0",
        ]);
        let inet = out
            .split_whitespace()
            .skip_while(|w| *w != "inet")
            .nth(1)
            .unwrap_or_else(|| panic!("no inet address on eth0 of {container}: {out}"));
        inet.split('/').next().unwrap_or(inet).to_string()
    }

    /// `pier ps -a --format json`, one object per container.
    pub fn ps_all(&self) -> Vec<serde_json::Value> {
        self.ok(&["ps", "-a", "--format", "json"])
            .lines()
            .map(|l| serde_json::from_str(l).expect("ps --format json line"))
            .collect()
    }

    /// Names of the entries of `<state>/<dir>` (empty when it does not exist).
    pub fn entries(&self, dir: &str) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(self.state_dir().join(dir))
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        names.sort();
        names
    }

    /// Everything that could be left behind, for before/after comparisons.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            links: self.netns.links(),
            nft: self.nft_ruleset(),
            leases: leases_under(&self.state_dir().join("ipam")),
            containers: self.entries("containers"),
            runtime: self.entries("runtime"),
            networks: self.entries("networks"),
            mounts: mounts_under(self.state_dir()),
        }
    }

    /// A snapshot equal to `expected`, or the last one taken after 5 s: a container's veth pair
    /// goes with its network namespace, which the kernel frees asynchronously, a few ms after
    /// the container's last process.
    pub fn snapshot_settled(&self, expected: &Snapshot) -> Snapshot {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let now = self.snapshot();
            if &now == expected || std::time::Instant::now() > deadline {
                return now;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// `nft ARGS` inside the namespace, asserting success; its stdout.
    pub fn nft(&self, args: &[&str]) -> String {
        let mut all = vec!["netns", "exec", &self.netns.name, "nft"];
        all.extend_from_slice(args);
        sh("ip", &all)
    }

    /// The namespace's nftables ruleset with its counters blanked.
    fn nft_ruleset(&self) -> String {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.netns.name, "nft", "list", "ruleset"])
            .output()
            .expect("running nft");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| match l.find("counter packets") {
                Some(at) => &l[..at],
                None => l,
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Processes that carry this host's state directory or `mark` in their environment
    /// (pier, its monitors, and containers started with `-e PIER_TEST_MARK=<mark>`).
    pub fn processes(&self, mark: &str) -> Vec<i32> {
        let state = self.state_dir().to_string_lossy().into_owned();
        processes_with(&[&state, mark])
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if let Ok(out) = self.command(&["ps", "-aq", "--no-trunc"]).output() {
            for id in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = self.command(&["rm", "-f", id]).output();
            }
        }
        let _ = self.command(&["gc"]).output();
        let _ = self.command(&["network", "ls", "-q"]).output().map(|out| {
            for name in String::from_utf8_lossy(&out.stdout).split_whitespace() {
                let _ = self.command(&["network", "rm", name]).output();
            }
        });
        for mount in mounts_under(self.state_dir()).iter().rev() {
            let _ = Command::new("umount").args(["-l", mount]).status();
        }
        let _ = fs::remove_dir_all(self.bpf_pins());
    }
}

/// What a container may leave behind, as seen from the test.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub links: Vec<String>,
    pub nft: String,
    pub leases: BTreeMap<String, String>,
    pub containers: Vec<String>,
    pub runtime: Vec<String>,
    pub networks: Vec<String>,
    pub mounts: Vec<String>,
}

/// Every file under `dir` with its contents (leases are small files).
fn files_under(dir: &Path) -> BTreeMap<String, String> {
    let mut files = BTreeMap::new();
    let Ok(entries) = fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.filter_map(Result::ok) {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            let text = fs::read_to_string(&path).unwrap_or_default();
            files.insert(path.display().to_string(), text);
        }
    }
    files
}

/// The allocations of every IPAM file under `dir` (the allocator's search cursor, which moves
/// with every allocation, is not something left behind).
fn leases_under(dir: &Path) -> BTreeMap<String, String> {
    let mut leases = files_under(dir);
    for text in leases.values_mut() {
        if let Ok(json) = serde_json::from_str::<serde_json::Value>(text) {
            *text = json["allocations"].to_string();
        }
    }
    leases
}

/// Mount points under `dir`, in mount order.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.to_string_lossy().into_owned();
    fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|point| point.starts_with(&prefix))
        .map(String::from)
        .collect()
}

/// Pids whose environment contains any of `needles`.
pub fn processes_with(needles: &[&str]) -> Vec<i32> {
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    for entry in fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
    {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let environ = fs::read(entry.path().join("environ")).unwrap_or_default();
        let environ = String::from_utf8_lossy(&environ);
        if pid != me && needles.iter().any(|n| !n.is_empty() && environ.contains(n)) {
            pids.push(pid);
        }
    }
    pids
}

/// The pid of the one process whose environment holds `mark`.
pub fn pid_with(mark: &str) -> i32 {
    let pids = processes_with(&[mark]);
    assert_eq!(pids.len(), 1, "processes carrying {mark}: {pids:?}");
    pids[0]
}

/// cgroup directories (any hierarchy, any depth ≤ 5) whose name contains one of `needles`.
pub fn cgroups_named(needles: &[String]) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: u32, needles: &[String], found: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            if !entry.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if needles.iter().any(|n| name.contains(n.as_str())) {
                found.push(path.clone());
            }
            if depth < 5 {
                walk(&path, depth + 1, needles, found);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new("/sys/fs/cgroup"), 0, needles, &mut found);
    found
}

/// The value of a cgroup v1 file of `pid`'s `controller` (as named in /proc/PID/cgroup).
pub fn cgroup_v1_file(pid: i32, controller: &str, file: &str) -> String {
    let table =
        fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("reading /proc/PID/cgroup");
    let line = table
        .lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == controller))
        })
        .unwrap_or_else(|| panic!("{pid} has no {controller} cgroup: {table}"));
    let (controllers, path) = line
        .split_once(':')
        .and_then(|(_, rest)| rest.split_once(':'))
        .expect("cgroup line");
    let file = Path::new("/sys/fs/cgroup")
        .join(controllers)
        .join(path.trim_start_matches('/'))
        .join(file);
    fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("reading {}: {e}", file.display()))
        .trim()
        .to_string()
}

/// stdout of a finished command as text.
pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A directory root made from the host's static busybox: `/bin/<applet>` links for `applets`.
pub fn busybox_root(applets: &[&str]) -> TempDir {
    let root = temp_dir();
    let bin = root.path().join("bin");
    fs::create_dir_all(&bin).expect("creating bin");
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("busybox on the host");
    fs::copy(busybox, bin.join("busybox")).expect("copying busybox");
    for applet in applets {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).expect("linking an applet");
    }
    for dir in ["etc", "tmp", "proc", "sys", "dev"] {
        fs::create_dir_all(root.path().join(dir)).expect("creating a root dir");
    }
    root
}
