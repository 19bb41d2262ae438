//! The docker and podman rows of `pier bench start` (issue 4): `docker run --rm` on a dockerd the
//! benchmark starts, and `podman run --rm`, on the busybox root the other rows use, set up before
//! the rows run and torn down after so that the host is left as found.
//!
//! Theory of operation: everything lives in the work dir's `peers/` (tmpfs, like the other rows'
//! state) and in a private network namespace `pier-bench-<pid>-peers` (made with `ip netns add`).
//! dockerd is spawned inside that namespace (the benchmark `setns`es itself into it around the
//! spawn) with its data root, exec root (and so its own containerd), pid file, socket and an empty
//! config file under `peers/`, in a process group of its own (a terminal's Ctrl-C goes to the
//! benchmark, which then stops it in order), a cgroup parent `pier-bench-<pid>-docker`, and
//! Docker's defaults otherwise: iptables chains and rules, the docker0 bridge (198.19.250.1/24),
//! docker-proxy for a published port. So the rows pay Docker's real cost, while the chains, rules
//! and bridge it makes exist only in that namespace and vanish with it. The root is brought in with
//! `docker import` of a tar of `peers/rootfs`; the docker CLI talks to the daemon over its socket.
//! podman runs `--rootfs peers/rootfs` with runc, the cgroupfs manager, no events, private
//! `--root/--runroot/--tmpdir/--network-config-dir`, and a netavark bridge network `pier-bench`
//! (198.19.251.0/24, no DNS) for its bridge rows; every podman sample runs inside the private
//! namespace, entered by `setns` outside the timed region (as crun's mount namespace is).
//!
//! Teardown: `podman rm -a -f`, SIGTERM to dockerd (SIGKILL after 20 s), SIGKILL to every process
//! whose command line names `peers/` (containerd, shims, conmon, docker-proxy), lazy unmount of
//! every mount under it, `ip netns del`, and removal of the cgroup trees and host paths the daemons
//! create outside their configured dirs ([`HOST_PATHS`]) that did not exist before. A benchmark
//! killed before its teardown is swept by the next one ([`sweep_stale`]), host paths excepted.
//!
//! Privileges: root. Exercised by tests/bench_start.rs.
use super::bundle;
use super::rows::{find_in_path, Network, Runtime};
use super::runner::last_lines;
use anyhow::Context;
use nix::mount::{umount2, MntFlags};
use nix::sched::{setns, CloneFlags};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The image the docker rows run.
const IMAGE: &str = "pier-bench-busybox:latest";
/// podman's bridge network for its bridge rows.
const PODMAN_NETWORK: &str = "pier-bench";
const DOCKER_BIP: &str = "198.19.250.1/24";
const PODMAN_SUBNET: &str = "198.19.251.0/24";
/// Paths dockerd, containerd, podman and runc create outside the dirs they are given.
const HOST_PATHS: [&str; 7] = [
    "/run/docker",
    "/run/containerd",
    "/run/containers",
    "/run/libpod",
    "/run/runc",
    "/var/lib/containers",
    "/dev/shm/libpod_lock",
];
/// Longest dockerd may take to answer `docker version`.
const DOCKERD_READY: Duration = Duration::from_secs(30);
/// Longest dockerd may take to exit on SIGTERM.
const DOCKERD_STOP: Duration = Duration::from_secs(20);

/// The peers' dir under a work dir.
pub fn dir(work: &Path) -> PathBuf {
    work.join("peers")
}

fn netns_name(pid: &str) -> String {
    format!("pier-bench-{pid}-peers")
}

fn cgroup_parent(pid: &str, engine: &str) -> String {
    format!("pier-bench-{pid}-{engine}")
}

/// The docker CLI (Debian's, which matches its dockerd, before any other in PATH), when dockerd is
/// installed too.
pub fn docker_program() -> Result<PathBuf, String> {
    dockerd().ok_or("dockerd not found (apt-get install docker.io)")?;
    let debian = Path::new("/usr/bin/docker");
    if debian.is_file() {
        return Ok(debian.to_path_buf());
    }
    find_in_path("docker")
        .ok_or_else(|| "docker not found in PATH (apt-get install docker.io)".into())
}

fn dockerd() -> Option<PathBuf> {
    find_in_path("dockerd").or_else(|| {
        let debian = Path::new("/usr/sbin/dockerd");
        debian.is_file().then(|| debian.to_path_buf())
    })
}

/// podman, when runc (its runtime here) is installed too.
pub fn podman_program() -> Result<PathBuf, String> {
    find_in_path("runc").ok_or("runc not found in PATH (apt-get install runc)")?;
    find_in_path("podman").ok_or_else(|| "podman not found in PATH (apt-get install podman)".into())
}

/// `-H unix://DIR/docker.sock run --rm --network … [-p 8080:80] [seccomp=unconfined] IMAGE
/// /bin/true`.
pub fn docker_run_args(dir: &Path, network: Network, unconfined: bool) -> Vec<OsString> {
    let mut args = docker_host(dir);
    args.extend(["run", "--rm"].map(OsString::from));
    args.extend(container_network(network, "bridge"));
    if unconfined {
        args.extend(["--security-opt", "seccomp=unconfined"].map(OsString::from));
    }
    args.extend([IMAGE, "/bin/true"].map(OsString::from));
    args
}

/// podman's private global options, `run --rm --network … [-p 8080:80] [seccomp=unconfined]`,
/// rlimits this machine can set (root cannot raise a hard rlimit here) and `--rootfs DIR/rootfs
/// /bin/true`.
pub fn podman_run_args(dir: &Path, network: Network, unconfined: bool) -> Vec<OsString> {
    let mut args = podman_globals(dir);
    args.extend(["run", "--rm"].map(OsString::from));
    args.extend(container_network(network, PODMAN_NETWORK));
    if unconfined {
        args.extend(["--security-opt", "seccomp=unconfined"].map(OsString::from));
    }
    let pid = std::process::id().to_string();
    args.extend(
        [
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
            &format!("--cgroup-parent=/{}", cgroup_parent(&pid, "podman")),
            "--rootfs",
        ]
        .map(OsString::from),
    );
    args.extend([dir.join("rootfs").into(), "/bin/true".into()]);
    args
}

fn container_network(network: Network, bridge: &str) -> Vec<OsString> {
    let name = if network == Network::None {
        "none"
    } else {
        bridge
    };
    let mut args = vec!["--network".into(), name.into()];
    if network == Network::Publish {
        args.extend(["-p".into(), "8080:80".into()]);
    }
    args
}

fn docker_host(dir: &Path) -> Vec<OsString> {
    let socket = format!("unix://{}", dir.join("docker.sock").display());
    vec!["-H".into(), socket.into()]
}

fn podman_globals(dir: &Path) -> Vec<OsString> {
    let at = |name: &str| OsString::from(dir.join("podman").join(name));
    let mut args: Vec<OsString> = Vec::new();
    for (flag, name) in [
        ("--root", "root"),
        ("--runroot", "runroot"),
        ("--tmpdir", "tmp"),
        ("--network-config-dir", "networks"),
    ] {
        args.extend([flag.into(), at(name)]);
    }
    let fixed = [
        "--runtime",
        "runc",
        "--cgroup-manager",
        "cgroupfs",
        "--events-backend",
        "none",
    ];
    args.extend(fixed.map(OsString::from));
    args
}

/// The running peers: the private network namespace, dockerd, and what to remove at the end.
/// Dropping it tears everything down.
#[derive(Debug)]
pub struct EnginePeers {
    dir: PathBuf,
    netns: Option<PrivateNet>,
    dockerd: Option<Child>,
    podman: bool,
    /// Host paths and cgroup trees that did not exist before the peers started.
    absent: Vec<PathBuf>,
    docker_problem: Option<String>,
    podman_problem: Option<String>,
    podman_bridge_problem: Option<String>,
}

impl EnginePeers {
    /// Sets up what the docker rows (`docker`) and podman rows (`podman`) need under `work`. A
    /// failure does not stop the benchmark: it becomes the reason of the rows it concerns.
    pub fn prepare(work: &Path, docker: bool, podman: bool) -> EnginePeers {
        let pid = std::process::id().to_string();
        let mut peers = EnginePeers {
            dir: dir(work),
            netns: None,
            dockerd: None,
            podman,
            absent: absent_before(&pid),
            docker_problem: None,
            podman_problem: None,
            podman_bridge_problem: None,
        };
        if let Err(e) = peers.common(&pid) {
            peers.docker_problem = Some(format!("{e:#}"));
            peers.podman_problem = Some(format!("{e:#}"));
            return peers;
        }
        if docker {
            peers.docker_problem = peers.start_docker(&pid).err().map(|e| format!("{e:#}"));
        }
        if podman {
            peers.podman_bridge_problem = peers.podman_network().err().map(|e| format!("{e:#}"));
        }
        peers
    }

    /// Why `runtime`'s row cannot run, if it cannot.
    pub fn problem(&self, runtime: Runtime) -> Option<String> {
        if runtime.is_docker() {
            return self.docker_problem.clone();
        }
        if runtime == Runtime::PodmanRunNone || self.podman_problem.is_some() {
            return self.podman_problem.clone();
        }
        self.podman_bridge_problem.clone()
    }

    /// Runs `body` inside the peers' network namespace.
    pub fn in_netns<T>(&self, body: impl FnOnce() -> T) -> anyhow::Result<T> {
        let net = self
            .netns
            .as_ref()
            .context("the peers' network namespace was not made")?;
        net.run(body)
    }

    /// The rootfs and the network namespace.
    fn common(&mut self, pid: &str) -> anyhow::Result<()> {
        std::fs::create_dir_all(&self.dir)
            .with_context(|| format!("creating {}", self.dir.display()))?;
        bundle::busybox_rootfs(&self.dir.join("rootfs"))?;
        self.netns = Some(PrivateNet::create(&netns_name(pid))?);
        Ok(())
    }

    /// Starts dockerd in the namespace, waits until it answers, imports the image.
    fn start_docker(&mut self, pid: &str) -> anyhow::Result<()> {
        let docker = docker_program().map_err(anyhow::Error::msg)?;
        let tar = self.dir.join("rootfs.tar");
        let mut pack = Command::new("tar");
        pack.arg("-C").arg(self.dir.join("rootfs"));
        pack.arg("-cf").arg(&tar).arg(".");
        checked(&mut pack, "packing the busybox root for docker import")?;
        let mut command = self.dockerd_command(pid)?;
        let child = self
            .in_netns(|| command.spawn())?
            .context("starting dockerd")?;
        self.dockerd = Some(child);
        self.wait_for_dockerd(&docker)?;
        let mut import = Command::new(&docker);
        import
            .args(docker_host(&self.dir))
            .arg("import")
            .arg(&tar)
            .arg(IMAGE);
        checked(&mut import, "docker import of the busybox root")
    }

    fn dockerd_command(&self, pid: &str) -> anyhow::Result<Command> {
        let program = dockerd().context("dockerd not found")?;
        let at = |name: &str| self.dir.join(name).display().to_string();
        std::fs::write(at("daemon.json"), "{}\n").context("writing dockerd's daemon.json")?;
        let log = File::create(at("dockerd.log")).context("creating dockerd.log")?;
        let mut command = Command::new(program);
        command
            .arg(format!("--config-file={}", at("daemon.json")))
            .arg(format!("--data-root={}", at("docker")))
            .arg(format!("--exec-root={}", at("exec")))
            .arg(format!("--pidfile={}", at("docker.pid")))
            .arg(format!("--host=unix://{}", at("docker.sock")))
            .arg(format!("--bip={DOCKER_BIP}"))
            .arg(format!("--cgroup-parent=/{}", cgroup_parent(pid, "docker")))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("dup of dockerd.log")?)
            .stderr(log);
        Ok(command)
    }

    fn wait_for_dockerd(&mut self, docker: &Path) -> anyhow::Result<()> {
        let deadline = Instant::now() + DOCKERD_READY;
        let log = self.dir.join("dockerd.log");
        let tail = || last_lines(&std::fs::read_to_string(&log).unwrap_or_default(), 3);
        loop {
            let mut version = Command::new(docker);
            version.args(docker_host(&self.dir)).arg("version");
            if checked(&mut version, "docker version").is_ok() {
                return Ok(());
            }
            if let Some(Ok(Some(status))) = self.dockerd.as_mut().map(Child::try_wait) {
                anyhow::bail!("dockerd exited ({status}): {}", tail());
            }
            if Instant::now() > deadline {
                anyhow::bail!("dockerd not ready after {DOCKERD_READY:?}: {}", tail());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Creates podman's bridge network (a config file; netavark sets it up per container).
    fn podman_network(&self) -> anyhow::Result<()> {
        let podman = podman_program().map_err(anyhow::Error::msg)?;
        let mut create = Command::new(podman);
        create.args(podman_globals(&self.dir));
        create.args([
            "network",
            "create",
            "--disable-dns",
            "--subnet",
            PODMAN_SUBNET,
        ]);
        create.arg(PODMAN_NETWORK);
        checked(&mut create, "podman network create")
    }

    fn stop_podman(&self) {
        let Ok(podman) = podman_program() else {
            return;
        };
        let mut rm = Command::new(podman);
        rm.args(podman_globals(&self.dir))
            .args(["rm", "-a", "-f", "-t", "0"]);
        if let Ok(Err(e)) = self.in_netns(|| checked(&mut rm, "podman rm -a -f")) {
            eprintln!("pier bench: {e:#}");
        }
    }

    fn stop_dockerd(&mut self) {
        let Some(mut child) = self.dockerd.take() else {
            return;
        };
        let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + DOCKERD_STOP;
        while matches!(child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        if matches!(child.try_wait(), Ok(None)) {
            eprintln!("pier bench: dockerd ignored SIGTERM for {DOCKERD_STOP:?}; killing it");
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for EnginePeers {
    fn drop(&mut self) {
        if self.podman && self.netns.is_some() {
            self.stop_podman();
        }
        self.stop_dockerd();
        let name = self.netns.take().map(|net| net.name);
        release(&self.dir, name.as_deref());
        for path in self.absent.iter().filter(|p| p.exists()) {
            remove_created(path);
        }
    }
}

/// Kills what still runs from `dir`, unmounts what is mounted under it, deletes the namespace.
fn release(dir: &Path, netns: Option<&str>) {
    kill_processes_naming(&dir.display().to_string());
    for point in mounts_under(dir) {
        if let Err(e) = umount2(point.as_str(), MntFlags::MNT_DETACH) {
            eprintln!("pier bench: cannot unmount {point}: {e}");
        }
    }
    if let Some(name) = netns {
        let mut del = Command::new("ip");
        del.args(["netns", "del", name]);
        if let Err(e) = checked(&mut del, "ip netns del") {
            eprintln!("pier bench: {e:#}");
        }
    }
}

/// Removes the peers of a benchmark that was killed (its work dir `work`, its pid `pid`).
pub fn sweep_stale(work: &Path, pid: &str) {
    let netns = netns_name(pid);
    let named = Path::new("/run/netns").join(&netns).exists();
    release(&dir(work), named.then_some(netns.as_str()));
    for path in cgroup_trees(&[cgroup_parent(pid, "docker"), cgroup_parent(pid, "podman")]) {
        if path.exists() {
            remove_created(&path);
        }
    }
}

/// The host paths and cgroup trees the peers may create that do not exist now.
fn absent_before(pid: &str) -> Vec<PathBuf> {
    let names = [
        cgroup_parent(pid, "docker"),
        cgroup_parent(pid, "podman"),
        "libpod_parent".to_string(),
    ];
    let mut paths = cgroup_trees(&names);
    paths.extend(HOST_PATHS.iter().map(PathBuf::from));
    paths.retain(|p| !p.exists());
    paths
}

/// `/sys/fs/cgroup/NAME` and `/sys/fs/cgroup/<hierarchy>/NAME` for every name.
fn cgroup_trees(names: &[String]) -> Vec<PathBuf> {
    let root = Path::new("/sys/fs/cgroup");
    let mut parents = vec![root.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(root) {
        parents.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    let pairs = parents
        .iter()
        .flat_map(|p| names.iter().map(move |n| p.join(n)));
    pairs.collect()
}

/// Removes a path the peers created: a cgroup tree deepest first, else a file or directory tree.
fn remove_created(path: &Path) {
    let removed = if path.starts_with("/sys/fs/cgroup") {
        remove_cgroup_tree(path)
    } else if path.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    };
    if let Err(e) = removed {
        eprintln!("pier bench: cannot remove {}: {e}", path.display());
    }
}

fn remove_cgroup_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)?.flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            remove_cgroup_tree(&entry.path())?;
        }
    }
    std::fs::remove_dir(dir)
}

/// SIGKILLs every process whose command line contains `needle` (never this one) and waits up to
/// 5 s for them to go.
fn kill_processes_naming(needle: &str) {
    let me = std::process::id();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let mut victims = Vec::new();
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if pid != me && String::from_utf8_lossy(&cmdline).contains(needle) {
            let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            victims.push(entry.path());
        }
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while victims.iter().any(|p| p.join("cmdline").exists()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Mount points under `dir` in this mount namespace, deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = dir.display().to_string();
    let table = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = table
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&prefix))
        .map(String::from)
        .collect();
    points.sort_by_key(|point| std::cmp::Reverse(point.len()));
    points
}

/// Runs `command` to completion; Err with its stderr's last lines when it fails.
fn checked(command: &mut Command, what: &str) -> anyhow::Result<()> {
    command.stdin(Stdio::null());
    let Output { status, stderr, .. } = command.output().with_context(|| what.to_string())?;
    anyhow::ensure!(
        status.success(),
        "{what}: {status}: {}",
        last_lines(&String::from_utf8_lossy(&stderr), 3)
    );
    Ok(())
}

/// A named network namespace (`ip netns add`) and handles on it and on the benchmark's own.
#[derive(Debug)]
struct PrivateNet {
    name: String,
    home: File,
    private: File,
}

impl PrivateNet {
    fn create(name: &str) -> anyhow::Result<PrivateNet> {
        let mut add = Command::new("ip");
        add.args(["netns", "add", name]);
        checked(&mut add, "ip netns add")?;
        let opened = PrivateNet::open(name);
        if opened.is_err() {
            let mut del = Command::new("ip");
            let _ = checked(del.args(["netns", "del", name]), "ip netns del");
        }
        opened
    }

    fn open(name: &str) -> anyhow::Result<PrivateNet> {
        let mut lo = Command::new("ip");
        lo.args(["-n", name, "link", "set", "lo", "up"]);
        checked(&mut lo, "lo up in the peers' namespace")?;
        let path = Path::new("/run/netns").join(name);
        Ok(PrivateNet {
            name: name.to_string(),
            home: File::open("/proc/self/ns/net").context("opening /proc/self/ns/net")?,
            private: File::open(&path).with_context(|| format!("opening {}", path.display()))?,
        })
    }

    fn run<T>(&self, body: impl FnOnce() -> T) -> anyhow::Result<T> {
        setns(self.private.as_fd(), CloneFlags::CLONE_NEWNET)
            .context("setns into the peers' network namespace")?;
        let result = body();
        setns(self.home.as_fd(), CloneFlags::CLONE_NEWNET)
            .context("setns back to the benchmark's network namespace")?;
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_publish_row_publishes_on_the_default_bridge() {
        let args = docker_run_args(Path::new("/w/peers"), Network::Publish, false);
        let line: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        assert_eq!(
            line.join(" "),
            "-H unix:///w/peers/docker.sock run --rm --network bridge -p 8080:80 \
             pier-bench-busybox:latest /bin/true"
        );
    }

    #[test]
    fn podman_rows_use_private_storage_and_the_bench_network() {
        let args = podman_run_args(Path::new("/w/peers"), Network::Bridge, true);
        let line: Vec<String> = args.iter().map(|a| a.to_string_lossy().into()).collect();
        let line = line.join(" ");
        assert!(
            line.starts_with("--root /w/peers/podman/root --runroot"),
            "{line}"
        );
        assert!(
            line.contains("run --rm --network pier-bench --security-opt"),
            "{line}"
        );
        assert!(
            line.ends_with("--rootfs /w/peers/rootfs /bin/true"),
            "{line}"
        );
    }
}
