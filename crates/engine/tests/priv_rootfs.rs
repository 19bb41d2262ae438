//! Privileged tests of root filesystems and generated specs, run for real by pier-runtime
//! in-process: the `host` root (host programs, read-only system directories, private /tmp),
//! the overlay on a directory (never changed), `--read-only`, Docker's capabilities, masked
//! paths and seccomp profile, `-u` lookup, volumes, and `--init` as pid 1.
//!
//! Each container gets a temp state directory (`pier-test-` prefix, removed on drop with the
//! container deleted and its root released first), a new network namespace of its own, and
//! cgroups `/pier-test-<name>-<pid>` the runtime removes on delete. The checks are shell
//! scripts inside the container whose exit code the test asserts. This binary is also the
//! `--init` of the init test: started as `/dev/init` it runs pier's init (see `main`).
//! Tests run one at a time on the main thread (the runtime forks; libtest's threads would
//! risk a fork holding a lock), filtered by name arguments. Needs root: skips with a reason
//! outside CI, fails under CI=true.
use pier_cgroups::ManagerKind;
use pier_engine::config::{RunArgs, RunConfig};
use pier_engine::rootfs::{self, Prepared};
use pier_engine::spec::{self, Context, NetNs, INIT_PATH};
use pier_engine::Paths;
use pier_runtime::{CreateOptions, Runtime};
use std::path::{Path, PathBuf};

fn root_or_skip() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: privileged tests need root"
    );
    eprintln!("skipping: needs root");
    false
}

/// A state directory and a runtime; containers run in it are deleted and released on drop.
struct Fixture {
    state: tempfile::TempDir,
    paths: Paths,
    rt: Runtime,
    started: Vec<(String, PathBuf)>,
}

impl Fixture {
    fn new() -> Fixture {
        let state = tempfile::Builder::new()
            .prefix("pier-test-state-")
            .tempdir()
            .unwrap();
        let paths = Paths {
            state_dir: state.path().to_owned(),
        };
        let rt = Runtime {
            root: paths.runtime_root(),
            cgroup_manager: ManagerKind::Cgroupfs,
        };
        Fixture {
            state,
            paths,
            rt,
            started: Vec::new(),
        }
    }

    /// Runs `script` with `sh -c` in a container of `rootfs` with the flags `edit` sets;
    /// returns its exit code.
    fn run(
        &mut self,
        name: &str,
        rootfs: &str,
        script: &str,
        edit: impl FnOnce(&mut RunArgs),
    ) -> i32 {
        let mut args = RunArgs {
            rootfs: rootfs.to_string(),
            command: vec!["/bin/sh".into(), "-c".into(), script.into()],
            ..RunArgs::default()
        };
        edit(&mut args);
        let config = RunConfig::parse(&args).unwrap();
        let dir = self.paths.containers().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        self.started.push((name.to_string(), dir.clone()));
        let root = rootfs::prepare(&self.paths, &config.rootfs, config.read_only, &dir).unwrap();
        let ctx = self.context(name, root, &dir);
        let spec = spec::build(&config, &ctx).unwrap();
        spec.save(dir.join("config.json")).unwrap();
        let opts = CreateOptions {
            bundle: dir.clone(),
            ..CreateOptions::default()
        };
        self.rt.run(name, &opts, false).unwrap()
    }

    /// The generated /etc files (a bare directory root gets their mount points in its upper).
    fn context(&self, name: &str, root: Prepared, dir: &Path) -> Context {
        let file = |file: &str, text: &str| {
            let path = dir.join(file);
            std::fs::write(&path, text).unwrap();
            Some(path)
        };
        Context {
            root,
            hostname: "pier-test-host".into(),
            netns: NetNs::New,
            hosts: file("hosts", "127.0.0.1 localhost\n198.18.0.2 pier-test-host\n"),
            hostname_file: file("hostname", "pier-test-host\n"),
            resolv_conf: file("resolv.conf", "nameserver 198.18.0.1\n"),
            cgroups_path: format!("/pier-test-{name}-{}", std::process::id()),
            init_binary: Some(std::env::current_exe().unwrap()),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for (id, dir) in &self.started {
            let _ = self.rt.delete(id, true);
            // No panic here: a failing test is already unwinding through this drop.
            if let Err(e) = rootfs::release(dir) {
                eprintln!("leftover: {e}");
            }
        }
    }
}

/// A busybox root: /bin with the applets the scripts use, and nothing else (no mount points,
/// no /etc: the runtime creates them in the overlay's upper layer).
fn busybox_root() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("pier-test-lower-")
        .tempdir()
        .unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    for applet in ["sh", "touch", "rm", "mkdir", "cat", "test", "echo", "grep"] {
        std::os::unix::fs::symlink("busybox", bin.join(applet)).unwrap();
    }
    dir
}

/// Every path under `dir`, sorted, for before/after comparisons.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                todo.push(path.clone());
            }
            out.push(path);
        }
    }
    out.sort();
    out
}

fn mounted_under(dir: &Path) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_string_lossy();
    mounts.lines().any(|l| l.contains(dir.as_ref()))
}

fn host_root_runs_host_programs() {
    let mut f = Fixture::new();
    let marker = PathBuf::from(format!("/tmp/pier-test-marker-{}", std::process::id()));
    std::fs::write(&marker, "").unwrap();
    let script = format!(
        "set -e; /usr/bin/env true; test -x /bin/ls; ls /usr/lib >/dev/null
         ! touch /usr/pier-test-x 2>/dev/null; ! touch /etc/pier-test-x 2>/dev/null
         ! touch /pier-test-x 2>/dev/null
         touch {marker}-in /run/ok /var/tmp/ok; test ! -e {marker}
         test \"$(hostname)\" = pier-test-host; grep -q pier-test-host /etc/hostname /etc/hosts
         grep -q 198.18.0.1 /etc/resolv.conf; test \"$HOME\" = /root",
        marker = marker.display()
    );
    let code = f.run("host", "host", &script, |_| {});
    std::fs::remove_file(&marker).unwrap();
    assert_eq!(code, 0);
    let inside = PathBuf::from(format!("{}-in", marker.display()));
    assert!(!Path::new("/usr/pier-test-x").exists() && !inside.exists());
    assert!(
        !mounted_under(f.state.path()),
        "the host root mounts nothing on the host"
    );
}

fn caps_are_dockers() {
    let mut f = Fixture::new();
    let script = "set -e; grep -q '^CapEff:[[:space:]]*00000000a80425fb$' /proc/self/status
        grep -q '^CapBnd:[[:space:]]*00000000a80425fb$' /proc/self/status
        grep -q '^CapInh:[[:space:]]*0000000000000000$' /proc/self/status
        grep -q '^CapAmb:[[:space:]]*0000000000000000$' /proc/self/status";
    assert_eq!(f.run("caps", "host", script, |_| {}), 0);
    let added = "grep -q '^CapEff:[[:space:]]*00000000a80435fb$' /proc/self/status";
    let code = f.run("capadd", "host", added, |a| {
        a.cap_add = vec!["NET_ADMIN".into()]
    });
    assert_eq!(code, 0, "--cap-add NET_ADMIN adds bit 12");
}

fn masked_and_readonly_paths() {
    let mut f = Fixture::new();
    let script = "set -e; test -c /proc/keys; test -c /proc/timer_list
        test -z \"$(ls -A /sys/firmware)\"
        ! sh -c 'echo 0 > /proc/sys/kernel/printk' 2>/dev/null
        grep -q ' /proc/sys ro,' /proc/self/mountinfo";
    assert_eq!(f.run("masked", "host", script, |_| {}), 0);
}

fn seccomp_blocks_what_dockers_blocks() {
    let mut f = Fixture::new();
    let blocked = "set -e; grep -q '^Seccomp:[[:space:]]*2$' /proc/self/status
        out=$(unshare -U true 2>&1) && exit 1
        echo \"$out\" | grep -q 'Operation not permitted'";
    assert_eq!(f.run("seccomp", "host", blocked, |_| {}), 0);
    let unconfined = "grep -q '^Seccomp:[[:space:]]*0$' /proc/self/status && unshare -U true";
    let code = f.run("unconfined", "host", unconfined, |a| {
        a.security_opt = vec!["seccomp=unconfined".into()]
    });
    assert_eq!(
        code, 0,
        "without the profile unshare -U works, so the profile blocked it"
    );
}

fn overlay_never_changes_the_directory() {
    let mut f = Fixture::new();
    let lower = busybox_root();
    let before = tree(lower.path());
    let script = "set -e; echo new > /newfile; rm /bin/cat; mkdir /newdir; test -f /newfile
        touch /bin/busybox";
    let code = f.run("overlay", lower.path().to_str().unwrap(), script, |_| {});
    assert_eq!(code, 0);
    assert_eq!(tree(lower.path()), before);
    let dir = f.paths.containers().join("overlay");
    assert!(mounted_under(&dir));
    rootfs::release(&dir).unwrap();
    rootfs::release(&dir).unwrap();
    assert!(!mounted_under(&dir));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert!(
        left.iter()
            .all(|n| !["rootfs", "upper", "work"].contains(&n.to_str().unwrap())),
        "{left:?}"
    );
    assert_eq!(tree(lower.path()), before);
}

fn read_only_directory_root_refuses_writes() {
    let mut f = Fixture::new();
    let lower = busybox_root();
    let before = tree(lower.path());
    let script =
        "! touch /x 2>/dev/null && ! touch /bin/x 2>/dev/null && ! rm /bin/cat 2>/dev/null &&
        grep -q 198.18.0.1 /etc/resolv.conf";
    let code = f.run("readonly", lower.path().to_str().unwrap(), script, |a| {
        a.read_only = true
    });
    assert_eq!(code, 0);
    assert_eq!(tree(lower.path()), before);
}

fn users_volumes_and_limits() {
    let mut f = Fixture::new();
    let vol = tempfile::Builder::new()
        .prefix("pier-test-vol-")
        .tempdir()
        .unwrap();
    std::fs::write(vol.path().join("file"), "hello").unwrap();
    let script = "set -e; test \"$(id -u):$(id -g)\" = 65534:65534
        grep -q hello /tmp/data/file; ! touch /tmp/data/x 2>/dev/null
        test \"$(ulimit -n)\" = 512";
    let code = f.run("user", "host", script, |a| {
        a.user = Some("nobody".into());
        a.volumes = vec![format!("{}:/tmp/data:ro", vol.path().display())];
        a.ulimit = vec!["nofile=512:1024".into()];
    });
    assert_eq!(code, 0);
    // The limits as the container's own cgroups (v1 here, in its cgroup namespace) show them.
    let v1 = Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists();
    let limits = match v1 {
        true => {
            "set -e; cd /sys/fs/cgroup; test $(cat memory/memory.limit_in_bytes) = 67108864
            test $(cat memory/memory.memsw.limit_in_bytes) = 134217728
            test $(cat pids/pids.max) = 100; test $(cat cpu/cpu.cfs_quota_us) = 50000
            test $(cat cpu/cpu.cfs_period_us) = 100000"
        }
        false => {
            "set -e; cd /sys/fs/cgroup; test $(cat memory.max) = 67108864
            test $(cat pids.max) = 100; test \"$(cat cpu.max)\" = '50000 100000'"
        }
    };
    let code = f.run("limits", "host", limits, |a| {
        a.memory = Some("64m".into());
        a.pids_limit = Some(100);
        a.cpus = Some("0.5".into());
    });
    assert_eq!(code, 0);
}

fn init_is_pid_1_and_passes_exits_and_signals() {
    let mut f = Fixture::new();
    let init = |a: &mut RunArgs| a.init = true;
    let check = "grep -q /dev/init /proc/1/cmdline && exit 7";
    assert_eq!(f.run("init-exit", "host", check, init), 7);
    // SIGTERM to pid 1 reaches the command, which dies of it: 128 + 15.
    let signalled = "kill -TERM 1; sleep 60";
    assert_eq!(f.run("init-signal", "host", signalled, init), 143);
    // An orphan left behind is reaped, and the command's own status still decides.
    let orphan = "(sleep 0 &); sleep 0.1; ! grep -q '^State:.*zombie' /proc/[0-9]*/status";
    assert_eq!(f.run("init-orphan", "host", orphan, init), 0);
}

type Test = (&'static str, fn());

const TESTS: &[Test] = &[
    ("host_root_runs_host_programs", host_root_runs_host_programs),
    ("caps_are_dockers", caps_are_dockers),
    ("masked_and_readonly_paths", masked_and_readonly_paths),
    (
        "seccomp_blocks_what_dockers_blocks",
        seccomp_blocks_what_dockers_blocks,
    ),
    (
        "overlay_never_changes_the_directory",
        overlay_never_changes_the_directory,
    ),
    (
        "read_only_directory_root_refuses_writes",
        read_only_directory_root_refuses_writes,
    ),
    ("users_volumes_and_limits", users_volumes_and_limits),
    (
        "init_is_pid_1_and_passes_exits_and_signals",
        init_is_pid_1_and_passes_exits_and_signals,
    ),
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.first().map(String::as_str) == Some(INIT_PATH) {
        std::process::exit(pier_engine::init::main(&args));
    }
    if !root_or_skip() {
        return;
    }
    let filters: Vec<&String> = args[1..].iter().filter(|a| !a.starts_with('-')).collect();
    let (mut failed, mut passed) = (Vec::new(), 0);
    for (name, test) in TESTS {
        if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        let ok = std::panic::catch_unwind(test).is_ok();
        println!("test {name} ... {}", if ok { "ok" } else { "FAILED" });
        match ok {
            true => passed += 1,
            false => failed.push(*name),
        }
    }
    let verdict = if failed.is_empty() { "ok" } else { "FAILED" };
    println!(
        "\ntest result: {verdict}. {passed} passed; {} failed",
        failed.len()
    );
    if !failed.is_empty() {
        eprintln!("failed: {failed:?}");
        std::process::exit(1);
    }
}
