//! Privileged tests of pier-cgroups against the host's real cgroup hierarchies.
//!
//! Each test makes its own `pier-test-<random>` cgroup, and a guard kills its children and
//! destroys the cgroup on drop, so the host is left as found even when an assertion fails.
//! Without root the tests print why and pass, except under CI=true where they fail.
use oci_spec::runtime::{
    LinuxBlockIoBuilder, LinuxCpuBuilder, LinuxDeviceCgroupBuilder, LinuxDeviceType,
    LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResources, LinuxResourcesBuilder,
};
use pier_cgroups::{shares_to_weight, Cgroup, Hierarchies, ManagerKind};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{SystemTime, UNIX_EPOCH};

const MIB: i64 = 1024 * 1024;

fn have_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "{test} needs root and CI=true"
    );
    eprintln!("skipping {test}: needs root");
    false
}

fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!("pier-test-{tag}-{}-{nanos}", std::process::id())
}

/// Kills the children and destroys the cgroup when the test ends, however it ends.
struct Guard {
    cgroup: Cgroup,
    children: Vec<Child>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.cgroup.thaw();
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Err(e) = self.cgroup.destroy() {
            eprintln!("guard cleanup: {e}");
        }
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_else(|e| panic!("read {}/{file}: {e}", dir.display()))
        .trim()
        .to_string()
}

fn task_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after_comm = &stat[stat.rfind(')').unwrap() + 2..];
    after_comm.chars().next().unwrap()
}

fn resources(pids: i64) -> LinuxResources {
    let deny_all = LinuxDeviceCgroupBuilder::default()
        .allow(false)
        .access("rwm")
        .build()
        .unwrap();
    let null = LinuxDeviceCgroupBuilder::default()
        .allow(true)
        .typ(LinuxDeviceType::C)
        .major(1)
        .minor(3)
        .access("rwm")
        .build()
        .unwrap();
    LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(64 * MIB)
                .build()
                .unwrap(),
        )
        .pids(LinuxPidsBuilder::default().limit(pids).build().unwrap())
        .cpu(
            LinuxCpuBuilder::default()
                .shares(512u64)
                .quota(50_000i64)
                .period(100_000u64)
                .build()
                .unwrap(),
        )
        .devices(vec![deny_all, null])
        .block_io(
            LinuxBlockIoBuilder::default()
                .weight(500u16)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap()
}

/// Checks the limits of `resources(pids)` are what the kernel now reports.
fn assert_limits(cg: &Cgroup, pids: i64) {
    if let Some(mem) = cg.v1_dir("memory") {
        assert_eq!(
            read(&mem.path, "memory.limit_in_bytes"),
            (64 * MIB).to_string()
        );
        assert_eq!(
            read(&cg.v1_dir("pids").unwrap().path, "pids.max"),
            pids.to_string()
        );
        let cpu = &cg.v1_dir("cpu").unwrap().path;
        assert_eq!(read(cpu, "cpu.shares"), "512");
        assert_eq!(read(cpu, "cpu.cfs_quota_us"), "50000");
        assert_eq!(read(cpu, "cpu.cfs_period_us"), "100000");
        let devices = read(&cg.v1_dir("devices").unwrap().path, "devices.list");
        assert_eq!(devices, "c 1:3 rwm");
        let blkio = &cg.v1_dir("blkio").unwrap().path;
        let weight_file = if blkio.join("blkio.weight").exists() {
            "blkio.weight"
        } else {
            "blkio.bfq.weight"
        };
        assert_eq!(read(blkio, weight_file), "500");
    } else {
        let dir = &cg.v2_dir().unwrap().path;
        assert_eq!(read(dir, "memory.max"), (64 * MIB).to_string());
        assert_eq!(read(dir, "pids.max"), pids.to_string());
        assert_eq!(read(dir, "cpu.weight"), shares_to_weight(512).to_string());
        assert_eq!(read(dir, "cpu.max"), "50000 100000");
    }
}

fn assert_all_gone(dirs: &[PathBuf]) {
    for d in dirs {
        assert!(!d.exists(), "{} is left behind", d.display());
    }
}

#[test]
fn lifecycle_limits_freeze_pids_destroy() {
    if !have_root("lifecycle_limits_freeze_pids_destroy") {
        return;
    }
    let name = unique("life");
    let path = PathBuf::from(format!("/{name}"));
    let cgroup = Cgroup::create(
        &name,
        Some(&path),
        ManagerKind::Cgroupfs,
        Some(&resources(32)),
    )
    .expect("create");
    let dirs: Vec<PathBuf> = cgroup.dirs.iter().map(|d| d.path.clone()).collect();
    let mut guard = Guard {
        cgroup,
        children: Vec::new(),
    };
    let cg = guard.cgroup.clone();
    assert!(!cg.dirs.is_empty());
    assert_limits(&cg, 32);

    let child = Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    guard.children.push(child);
    cg.add_process(pid as i32, false).expect("add_process");
    let now = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    for d in &cg.dirs {
        assert!(
            now.contains(&format!(":{}\n", d.cgroup)),
            "{pid} not in {}: {now}",
            d.cgroup
        );
    }
    assert_eq!(cg.pids().expect("pids"), vec![pid as i32]);
    let stats = cg.stats().expect("stats");
    assert_eq!((stats.pids.current, stats.pids.limit), (1, 32));
    assert_eq!(stats.memory.usage.limit, 64 * MIB as u64);

    cg.freeze().expect("freeze");
    assert!(cg.is_frozen().unwrap());
    if cg.v1_dir("freezer").is_some() {
        assert_eq!(task_state(pid), 'D', "a v1-frozen task reports D");
    }
    cg.thaw().expect("thaw");
    assert!(!cg.is_frozen().unwrap());
    assert_ne!(task_state(pid), 'D');

    cg.apply(&resources(64)).expect("update");
    assert_limits(&cg, 64);

    let mut child = guard.children.pop().unwrap();
    cg.signal_all(nix::sys::signal::Signal::SIGTERM)
        .expect("signal_all");
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(15)
    );
    cg.destroy().expect("destroy");
    assert_all_gone(&dirs);
    cg.destroy().expect("destroy is idempotent");
}

#[test]
fn self_join_moves_the_calling_thread() {
    if !have_root("self_join_moves_the_calling_thread") {
        return;
    }
    let name = unique("join");
    let path = PathBuf::from(format!("/{name}"));
    let cgroup = Cgroup::create(&name, Some(&path), ManagerKind::Cgroupfs, None).expect("create");
    let guard = Guard {
        cgroup,
        children: Vec::new(),
    };
    let join = guard.cgroup.self_join().expect("open tasks files");
    let expected: Vec<String> = guard
        .cgroup
        .dirs
        .iter()
        .filter(|d| !d.controllers.is_empty())
        .map(|d| format!("{}:{}", d.controllers.join(","), d.cgroup))
        .collect();
    assert_eq!(join.len(), expected.len());
    let seen = std::thread::spawn(move || {
        join.join().expect("join");
        std::fs::read_to_string("/proc/thread-self/cgroup").unwrap()
    })
    .join()
    .unwrap();
    for want in expected {
        assert!(seen.contains(&want), "thread not in {want}: {seen}");
    }
}

#[test]
fn failed_create_leaves_nothing() {
    if !have_root("failed_create_leaves_nothing") {
        return;
    }
    let name = unique("fail");
    let bad = LinuxResourcesBuilder::default()
        .memory(
            LinuxMemoryBuilder::default()
                .limit(64 * MIB)
                .swap(MIB)
                .build()
                .unwrap(),
        )
        .build()
        .unwrap();
    let path = PathBuf::from(format!("/{name}/leaf"));
    let err = Cgroup::create(&name, Some(&path), ManagerKind::Cgroupfs, Some(&bad))
        .expect_err("swap below the memory limit must fail");
    eprintln!("expected failure: {err}");
    assert!(err.to_string().contains("memory"), "{err}");
    let found = Hierarchies::detect().unwrap();
    for h in found.v1.iter().chain(found.v2.iter()) {
        assert!(
            !h.mountpoint.join(&name).exists(),
            "left in {}",
            h.mountpoint.display()
        );
    }
}

#[test]
fn relative_path_is_below_the_callers_cgroup() {
    if !have_root("relative_path_is_below_the_callers_cgroup") {
        return;
    }
    let name = unique("rel");
    let cgroup =
        Cgroup::create(&name, Some(Path::new(&name)), ManagerKind::Cgroupfs, None).expect("create");
    let guard = Guard {
        cgroup,
        children: Vec::new(),
    };
    let mine = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    for d in &guard.cgroup.dirs {
        let parent = d.cgroup.strip_suffix(&format!("/{name}")).unwrap();
        let parent = if parent.is_empty() { "/" } else { parent };
        let line = format!("{}:{parent}\n", d.controllers.join(","));
        assert!(mine.contains(&line), "{line:?} not in {mine}");
        assert!(d.path.is_dir());
    }
}

#[test]
fn disabled_and_systemd_managers() {
    let cg = Cgroup::create("x", None, ManagerKind::Disabled, Some(&resources(8))).unwrap();
    assert!(cg.dirs.is_empty());
    let err = cg.pids().unwrap_err().to_string();
    assert!(err.contains("--cgroup-manager disabled"), "{err}");
    assert!(cg.destroy().is_ok());
    assert!(!cg.is_frozen().unwrap());
    if !Path::new("/run/systemd/system").exists() {
        let err = Cgroup::create("x", None, ManagerKind::Systemd, None).unwrap_err();
        assert!(
            err.to_string().contains("--cgroup-manager cgroupfs"),
            "{err}"
        );
    }
}

/// Runs `sh` in the cgroup and reports which of /dev/null and /dev/zero it could read.
fn probe_devices(cg: &Cgroup) -> String {
    use std::io::{Read, Write};
    let script =
        "read go; cat /dev/null && echo null-ok; head -c1 /dev/zero >/dev/null && echo zero-ok";
    let mut child = Command::new("sh")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn sh");
    let moved = cg.add_process(child.id() as i32, false);
    let mut stdin = child.stdin.take().unwrap();
    let _ = stdin.write_all(b"go\n");
    drop(stdin);
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child.wait().unwrap();
    moved.expect("add_process");
    out
}

#[test]
fn cgroup2_device_program_enforces_and_replaces() {
    if !have_root("cgroup2_device_program_enforces_and_replaces") {
        return;
    }
    let name = unique("dev");
    let path = PathBuf::from(format!("/{name}"));
    let cgroup = Cgroup::create(&name, Some(&path), ManagerKind::Cgroupfs, None).expect("create");
    let guard = Guard {
        cgroup,
        children: Vec::new(),
    };
    let Some(v2) = guard.cgroup.v2_dir() else {
        eprintln!("no cgroup2 mount: nothing to test");
        return;
    };
    let rule = |allow: bool, minor: Option<i64>| {
        let b = LinuxDeviceCgroupBuilder::default()
            .allow(allow)
            .access("rwm");
        match minor {
            Some(m) => b.typ(LinuxDeviceType::C).major(1).minor(m),
            None => b,
        }
        .build()
        .unwrap()
    };
    let null_only = [rule(false, None), rule(true, Some(3))];
    pier_cgroups::devices::apply(&v2.path, &null_only).expect("install device program");
    let out = probe_devices(&guard.cgroup);
    assert!(out.contains("null-ok") && !out.contains("zero-ok"), "{out}");

    let null_and_zero = [rule(false, None), rule(true, Some(3)), rule(true, Some(5))];
    pier_cgroups::devices::apply(&v2.path, &null_and_zero).expect("replace device program");
    let out = probe_devices(&guard.cgroup);
    assert!(out.contains("null-ok") && out.contains("zero-ok"), "{out}");
    let dir = std::fs::File::open(&v2.path).unwrap();
    let ids = pier_sys::cgroup::device_program_ids(std::os::fd::AsFd::as_fd(&dir)).unwrap();
    assert_eq!(ids.len(), 1, "the old program is detached");
}

#[test]
fn cgroup2_freezer() {
    if !have_root("cgroup2_freezer") {
        return;
    }
    let name = unique("frz2");
    let path = PathBuf::from(format!("/{name}"));
    let cgroup = Cgroup::create(&name, Some(&path), ManagerKind::Cgroupfs, None).expect("create");
    let mut guard = Guard {
        cgroup,
        children: Vec::new(),
    };
    let Some(v2) = guard.cgroup.v2_dir().cloned() else {
        eprintln!("no cgroup2 mount: nothing to test");
        return;
    };
    let child = Command::new("sleep")
        .arg("1000")
        .spawn()
        .expect("spawn sleep");
    let pid = child.id();
    guard.children.push(child);
    guard
        .cgroup
        .add_process(pid as i32, false)
        .expect("add_process");
    // The same container seen through its cgroup2 directory only: the v2 freezer.
    let only_v2 = Cgroup {
        kind: ManagerKind::Cgroupfs,
        dirs: vec![v2.clone()],
    };
    only_v2.freeze().expect("freeze");
    assert!(only_v2.is_frozen().unwrap());
    assert!(read(&v2.path, "cgroup.events").contains("frozen 1"));
    only_v2.thaw().expect("thaw");
    assert!(!only_v2.is_frozen().unwrap());
    assert_eq!(only_v2.pids().unwrap(), vec![pid as i32]);
    only_v2
        .signal_all(nix::sys::signal::Signal::SIGKILL)
        .expect("cgroup.kill");
    let status = guard.children[0].wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(9)
    );
}
