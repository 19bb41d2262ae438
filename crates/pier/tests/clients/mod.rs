//! Shared support for the real-client suites (`clients_docker.rs`, `clients_podman.rs`,
//! `clients_containerd.rs`): the runtime under test, a busybox image source, command running with a
//! deadline, a check list that keeps going past a failure, and the guards that leave the host as found.
//!
//! Theory of operation: each suite starts Debian's real client (dockerd, podman, containerd) with every
//! path it writes pointed into one scratch directory, points it at the runtime under test
//! (`PIER_CLIENT_RUNTIME`, default: the pier binary of this build; set it to `runc` to check the harness
//! itself) and runs the same checks: a command's output and exit code; detached + exec + kill + rm; a
//! terminal; memory and cpu limits. The guards are dropped in reverse order of creation, so a suite
//! declares them as: created host paths, cgroup parents, scratch, daemon. Dropping them stops the daemon,
//! kills any process whose command line names the scratch dir (shims, conmon), detaches mounts under
//! it, removes it, removes the cgroups the client made, and removes the host paths the client created
//! (/run/docker, /run/containerd, ...) that did not exist before.
//!
//! Privileges: root (skips with a printed reason otherwise, fails under `CI=true`).
//! Each test target compiles this module on its own and uses a subset of it, hence `dead_code` is allowed.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use nix::mount::{umount2, MntFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Longest a single client command may take before it is killed and reported as hung.
pub const COMMAND_DEADLINE: Duration = Duration::from_secs(45);

/// The image every suite imports: a busybox rootfs (see [`busybox_rootfs`]).
pub const IMAGE: &str = "pier-test-busybox:latest";

/// Says whether the suite can run here. Prints the reason and returns false when it cannot,
/// except under `CI=true`, where a missing prerequisite is a failure.
pub fn ready(suite: &str, programs: &[&str]) -> bool {
    let mut missing = Vec::new();
    if !nix::unistd::geteuid().is_root() {
        missing.push("root".to_string());
    }
    for program in programs {
        if find_program(program).is_none() {
            missing.push(format!("the program `{program}`"));
        }
    }
    if missing.is_empty() {
        return true;
    }
    let reason = format!("{suite} suite needs {}", missing.join(", "));
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{reason}");
    eprintln!("skipped: {reason}");
    false
}

/// Finds `name` in PATH (or returns it if it is already a path to an existing file).
pub fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Path::new(name).is_file().then(|| PathBuf::from(name));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// The OCI runtime the clients are pointed at: `PIER_CLIENT_RUNTIME` (a path or a name in PATH),
/// default the pier binary built with these tests.
pub fn runtime_under_test() -> PathBuf {
    match std::env::var("PIER_CLIENT_RUNTIME") {
        Ok(name) if !name.is_empty() => find_program(&name)
            .unwrap_or_else(|| panic!("PIER_CLIENT_RUNTIME={name}: no such program")),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_pier")),
    }
}

/// What a finished command left: exit code (None when killed by a signal or hung), output, and the
/// command line for messages.
#[derive(Debug)]
pub struct Outcome {
    pub line: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    /// Ok when the command exited with `code` and its stdout contains every string of `wanted`.
    pub fn expect(&self, code: i32, wanted: &[&str]) -> Result<(), String> {
        let missing: Vec<&&str> = wanted
            .iter()
            .filter(|w| !self.stdout.contains(**w))
            .collect();
        if self.code == Some(code) && missing.is_empty() {
            return Ok(());
        }
        Err(format!(
            "expected exit {code} and stdout containing {wanted:?}; {self}"
        ))
    }

    /// Ok when the command exited with 0; returns its stdout trimmed.
    pub fn ok(&self) -> Result<String, String> {
        self.expect(0, &[])?;
        Ok(self.stdout.trim().to_string())
    }
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "`{}` exited {:?}\n  stdout: {:?}\n  stderr: {:?}",
            self.line, self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `program args` with stdin from /dev/null, capturing output, killed after [`COMMAND_DEADLINE`].
pub fn run<S: AsRef<OsStr>>(program: &Path, args: &[S]) -> Outcome {
    let mut command = Command::new(program);
    command.args(args);
    run_command(&mut command)
}

/// Runs a prepared command like [`run`].
pub fn run_command(command: &mut Command) -> Outcome {
    let line = command_line(command);
    let spawned = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            return Outcome {
                line,
                code: None,
                stdout: String::new(),
                stderr: e.to_string(),
            }
        }
    };
    let stdout = collect(child.stdout.take());
    let stderr = collect(child.stderr.take());
    let (code, hung) = wait_with_deadline(&mut child, COMMAND_DEADLINE);
    let grace = Duration::from_secs(5);
    let mut stderr = stderr.recv_timeout(grace).unwrap_or_default();
    if hung {
        stderr.push_str(&format!("\n[killed: no exit after {COMMAND_DEADLINE:?}]"));
    }
    Outcome {
        line,
        code,
        stdout: stdout.recv_timeout(grace).unwrap_or_default(),
        stderr,
    }
}

fn command_line(command: &Command) -> String {
    let mut line = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        let _ = write!(line, " {}", arg.to_string_lossy());
    }
    line
}

/// Reads a pipe to its end on its own thread (a daemonised grandchild may keep it open: the
/// caller waits for the result with a timeout).
fn collect<R: Read + Send + 'static>(pipe: Option<R>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(mut pipe) = pipe {
        thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
        });
    }
    rx
}

/// Waits for the child until `deadline`; kills it when it is late. Returns (exit code, hung).
fn wait_with_deadline(child: &mut Child, deadline: Duration) -> (Option<i32>, bool) {
    let until = Instant::now() + deadline;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return (status.code(), false),
            Ok(None) if Instant::now() < until => thread::sleep(Duration::from_millis(10)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return (None, true);
            }
        }
    }
}

/// The detached lifecycle both docker and podman speak with the same verbs: `started` is the
/// `run -d --name NAME … sleep 1000` of container `name`; then `exec` with its exit code and
/// output, `kill`, `wait` (137), `rm`, and the container no longer listed. `cli` runs one
/// command of the client; on failure `force_rm` (the client's forced removal) is run.
pub fn detached_lifecycle(
    cli: &dyn Fn(&[&str]) -> Outcome,
    name: &str,
    started: Outcome,
    force_rm: &[&str],
) -> Result<(), String> {
    let result = (|| {
        started.ok()?;
        cli(&["exec", name, "sh", "-c", "echo in-exec; exit 5"]).expect(5, &["in-exec\n"])?;
        cli(&["kill", name]).ok()?;
        cli(&["wait", name]).expect(0, &["137"])?;
        cli(&["rm", name]).ok()?;
        let left = cli(&["ps", "-aq", "--filter", &format!("name={name}")]).ok()?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("container still listed after rm: {left}"))
        }
    })();
    if result.is_err() {
        cli(force_rm);
    }
    result
}

/// Polls `probe` until it succeeds or `deadline` passes; returns the last error on timeout.
pub fn wait_until<T>(
    deadline: Duration,
    mut probe: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let until = Instant::now() + deadline;
    loop {
        match probe() {
            Ok(value) => return Ok(value),
            Err(e) if Instant::now() >= until => {
                return Err(format!("gave up after {deadline:?}: {e}"))
            }
            Err(_) => thread::sleep(Duration::from_millis(100)),
        }
    }
}

/// A list of named checks that all run; the suite fails at the end listing every failure.
#[derive(Debug)]
pub struct Checks {
    suite: String,
    failures: Vec<String>,
}

impl Checks {
    pub fn new(suite: &str, runtime: &Path) -> Self {
        eprintln!("{suite}: runtime under test {}", runtime.display());
        Checks {
            suite: suite.to_string(),
            failures: Vec::new(),
        }
    }

    pub fn check(&mut self, name: &str, body: impl FnOnce() -> Result<(), String>) {
        match body() {
            Ok(()) => eprintln!("ok   {}: {name}", self.suite),
            Err(e) => {
                eprintln!("FAIL {}: {name}: {e}", self.suite);
                self.failures.push(format!("{name}: {e}"));
            }
        }
    }

    /// True while no check has failed.
    pub fn is_clean(&self) -> bool {
        self.failures.is_empty()
    }

    pub fn finish(self) {
        assert!(
            self.failures.is_empty(),
            "{} failed checks:\n{}",
            self.suite,
            self.failures.join("\n")
        );
    }
}

/// The limits the resource checks ask for (`--memory 64m --cpus 0.5`) as the container's cgroup
/// files show them: "<memory bytes>\n<cfs quota> <cfs period>".
pub const EXPECTED_LIMITS: &str = "67108864\n50000 100000";

/// A shell script run inside the container printing its limits in [`EXPECTED_LIMITS`]'s format,
/// from cgroup v1 files (hybrid or v1 host) or from cgroup v2 files.
pub fn limits_script() -> &'static str {
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/cpu.max"
    } else {
        "cat /sys/fs/cgroup/memory/memory.limit_in_bytes; \
         echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
    }
}

/// Reads the limits of process `pid` from the host's cgroup files, in [`EXPECTED_LIMITS`]'s format.
pub fn host_limits(pid: &str) -> Result<String, String> {
    let table = read(&format!("/proc/{pid}/cgroup"))?;
    let path_of = |controller: &str| {
        table.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, list, path) = (fields.next()?, fields.next()?, fields.next()?);
            list.split(',')
                .any(|c| c == controller)
                .then(|| path.to_string())
        })
    };
    if Path::new("/sys/fs/cgroup/cgroup.controllers").exists() {
        let dir = format!("/sys/fs/cgroup{}", path_of("").ok_or("no cgroup2 entry")?);
        return Ok(format!(
            "{}\n{}",
            read(&format!("{dir}/memory.max"))?,
            read(&format!("{dir}/cpu.max"))?
        ));
    }
    let memory = format!(
        "/sys/fs/cgroup/memory{}",
        path_of("memory").ok_or("no memory cgroup")?
    );
    let cpu = format!(
        "/sys/fs/cgroup/cpu{}",
        path_of("cpu").ok_or("no cpu cgroup")?
    );
    Ok(format!(
        "{}\n{} {}",
        read(&format!("{memory}/memory.limit_in_bytes"))?,
        read(&format!("{cpu}/cpu.cfs_quota_us"))?,
        read(&format!("{cpu}/cpu.cfs_period_us"))?
    ))
}

fn read(path: &str) -> Result<String, String> {
    fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("read {path}: {e}"))
}

/// Compares a limits report with [`EXPECTED_LIMITS`].
pub fn expect_limits(seen: &str) -> Result<(), String> {
    let seen = seen.replace("\r\n", "\n");
    if seen.trim() == EXPECTED_LIMITS {
        return Ok(());
    }
    Err(format!(
        "cgroup limits {:?}, expected {EXPECTED_LIMITS:?}",
        seen.trim()
    ))
}

/// A directory of this suite's own under the temp dir; on drop, kills every process whose command
/// line names it, detaches every mount under it and removes it.
#[derive(Debug)]
pub struct Scratch {
    pub dir: PathBuf,
}

impl Scratch {
    pub fn new(suite: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("pier-test-{suite}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("create {}: {e}", dir.display()));
        Scratch { dir }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let needle = self.dir.to_string_lossy().into_owned();
        kill_processes_naming(&needle);
        for mount_point in mounts_under(&needle) {
            if let Err(e) = umount2(mount_point.as_str(), MntFlags::MNT_DETACH) {
                eprintln!("cleanup: umount {mount_point}: {e}");
            }
        }
        if let Err(e) = fs::remove_dir_all(&self.dir) {
            eprintln!("cleanup: remove {}: {e}", self.dir.display());
        }
    }
}

/// SIGKILLs every process (but this one) whose command line contains `needle`, and waits for them.
fn kill_processes_naming(needle: &str) {
    let me = std::process::id().to_string();
    let Ok(entries) = fs::read_dir("/proc") else {
        return;
    };
    let mut victims = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == me || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let cmdline = fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(needle) {
            eprintln!(
                "cleanup: killing leftover {name}: {}",
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            );
            if let Ok(pid) = name.parse() {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                victims.push(name);
            }
        }
    }
    let _ = wait_until(Duration::from_secs(5), || {
        let alive = victims
            .iter()
            .filter(|pid| Path::new(&format!("/proc/{pid}/cmdline")).exists());
        match alive.count() {
            0 => Ok(()),
            n => Err(format!("{n} processes still alive")),
        }
    });
}

/// Mount points under `prefix` in this mount namespace, deepest first.
fn mounts_under(prefix: &str) -> Vec<String> {
    let table = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(unescape_mount_field)
        .filter(|point| point.starts_with(prefix))
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.len()));
    points
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape_mount_field(field: &str) -> String {
    let mut out = String::new();
    let mut rest = field;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let code = rest
            .get(at + 1..at + 4)
            .and_then(|oct| u8::from_str_radix(oct, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[at + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[at + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Host paths (directories or files) a client creates outside its configured directories
/// (runtime dirs, caches, shared-memory locks). On drop, those that did not exist when the guard
/// was made are removed.
#[derive(Debug)]
pub struct CreatedPaths {
    absent: Vec<PathBuf>,
}

impl CreatedPaths {
    pub fn watch(paths: &[&str]) -> Self {
        let absent = paths
            .iter()
            .map(PathBuf::from)
            .filter(|p| !p.exists())
            .collect();
        CreatedPaths { absent }
    }
}

impl Drop for CreatedPaths {
    fn drop(&mut self) {
        for path in self.absent.iter().filter(|p| p.exists()) {
            let removed = if path.is_dir() {
                fs::remove_dir_all(path)
            } else {
                fs::remove_file(path)
            };
            if let Err(e) = removed {
                eprintln!("cleanup: remove {}: {e}", path.display());
            }
        }
    }
}

/// A cgroup parent a client creates in every hierarchy (`/sys/fs/cgroup/<hierarchy>/<name>`). On
/// drop, the trees that did not exist when the guard was made are removed, deepest first.
#[derive(Debug)]
pub struct CgroupParent {
    absent: Vec<PathBuf>,
}

impl CgroupParent {
    pub fn watch(name: &str) -> Self {
        let mut candidates = vec![Path::new("/sys/fs/cgroup").join(name)];
        if let Ok(hierarchies) = fs::read_dir("/sys/fs/cgroup") {
            candidates.extend(hierarchies.flatten().map(|h| h.path().join(name)));
        }
        CgroupParent {
            absent: candidates.into_iter().filter(|p| !p.exists()).collect(),
        }
    }
}

impl Drop for CgroupParent {
    fn drop(&mut self) {
        for tree in self.absent.iter().filter(|p| p.exists()) {
            remove_cgroup_tree(tree);
        }
    }
}

fn remove_cgroup_tree(dir: &Path) {
    if let Ok(entries) = fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_cgroup_tree(&entry.path());
            }
        }
    }
    if let Err(e) = fs::remove_dir(dir) {
        eprintln!("cleanup: rmdir {}: {e}", dir.display());
    }
}

/// A daemon started by a suite, its output in a log file. On drop: SIGTERM, up to 20 s to exit,
/// then SIGKILL.
#[derive(Debug)]
pub struct Daemon {
    name: String,
    child: Child,
    log: PathBuf,
}

impl Daemon {
    pub fn start(name: &str, command: &mut Command, log: PathBuf) -> Self {
        let file =
            fs::File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));
        let err = file.try_clone().expect("dup log fd");
        let child = command
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("start {name}: {e}"));
        Daemon {
            name: name.to_string(),
            child,
            log,
        }
    }

    /// Waits until `probe` succeeds; panics with the daemon's log tail when it does not.
    pub fn wait_ready(&mut self, probe: impl FnMut() -> Result<String, String>) {
        if let Err(e) = wait_until(Duration::from_secs(30), probe) {
            panic!(
                "{} did not become ready: {e}\nlog tail:\n{}",
                self.name,
                self.log_tail()
            );
        }
    }

    /// The last lines of the daemon's log (for failure messages).
    pub fn log_tail(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(15)..].join("\n")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let pid = Pid::from_raw(self.child.id() as i32);
        let _ = kill(pid, Signal::SIGTERM);
        if let (_, true) = wait_with_deadline(&mut self.child, Duration::from_secs(20)) {
            eprintln!(
                "cleanup: {} ignored SIGTERM for 20 s and was killed",
                self.name
            );
        }
    }
}

/// Builds a busybox rootfs at `dir`: /bin/busybox (from busybox-static) with one symlink per applet,
/// the usual empty mount points, and a root entry in /etc/passwd and /etc/group.
pub fn busybox_rootfs(dir: &Path) -> Result<(), String> {
    let io = |what: &str, e: std::io::Error| format!("{what}: {e}");
    for sub in ["bin", "proc", "sys", "dev", "etc", "tmp", "root"] {
        fs::create_dir_all(dir.join(sub)).map_err(|e| io(sub, e))?;
    }
    let busybox = find_program("busybox").ok_or("busybox not installed (apt: busybox-static)")?;
    fs::copy(&busybox, dir.join("bin/busybox")).map_err(|e| io("copy busybox", e))?;
    let applets = run(&busybox, &["--list"]).ok()?;
    for applet in applets.lines().filter(|a| *a != "busybox") {
        std::os::unix::fs::symlink("busybox", dir.join("bin").join(applet))
            .map_err(|e| io(applet, e))?;
    }
    fs::write(dir.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
        .map_err(|e| io("passwd", e))?;
    fs::write(dir.join("etc/group"), "root:x:0:\n").map_err(|e| io("group", e))
}

/// Builds the busybox rootfs under `scratch` and packs it as a plain tar (what `docker import`
/// and `podman import` take); returns the tar's path.
pub fn busybox_tar(scratch: &Scratch) -> PathBuf {
    let rootfs = scratch.path("rootfs");
    busybox_rootfs(&rootfs).unwrap_or_else(|e| panic!("busybox rootfs: {e}"));
    let tar = scratch.path("rootfs.tar");
    let tar_program = find_program("tar").expect("tar installed");
    let args = [
        OsStr::new("-C"),
        rootfs.as_os_str(),
        OsStr::new("-cf"),
        tar.as_os_str(),
        OsStr::new("."),
    ];
    run(&tar_program, &args)
        .ok()
        .unwrap_or_else(|e| panic!("pack rootfs: {e}"));
    tar
}
