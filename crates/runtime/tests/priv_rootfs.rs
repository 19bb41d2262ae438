//! Privileged tests of `rootfs::setup` and `rootfs::finalize` on a busybox root.
//!
//! Theory of operation: each test builds a busybox rootfs (and host-side bind sources) in a
//! `pier-test-` temp dir, then re-executes this test binary, filtered to the same test, under
//! `unshare -m -p -f --propagation private` (plus the namespaces the case needs). In that child
//! (marked by the env var `PIER_TEST_ROOTFS_CHILD`) the test function runs setup and finalize as
//! a container's init would, then checks from inside: `/proc/self/mountinfo`, stat of devices,
//! writes that must fail. The child's mounts die with its mount namespace, so the host is left
//! as found; the parent removes the temp dir and checks that nothing leaked onto host paths.
//!
//! Privileges: root (skips with a reason otherwise, fails under CI=true); util-linux `unshare`;
//! busybox-static at /bin/busybox.
use oci_spec::runtime::Spec;
use pier_runtime::rootfs::{self, Options};
use serde_json::{json, Value};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

const CHILD: &str = "PIER_TEST_ROOTFS_CHILD";
const DIR: &str = "PIER_TEST_ROOTFS_DIR";

/// True when the test may run; panics under CI=true without root.
fn have_root() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "privileged test needs root under CI"
    );
    eprintln!("skipping: needs root (mount namespaces, mknod, pivot_root)");
    false
}

/// In the child: the test's temp dir. None in the parent.
fn child_dir() -> Option<PathBuf> {
    std::env::var_os(CHILD).map(|_| PathBuf::from(std::env::var_os(DIR).expect("dir env")))
}

/// The temp dir with a busybox rootfs at `rootfs/` and host-side sources beside it.
fn prepare() -> tempfile::TempDir {
    let tmp = tempfile::Builder::new()
        .prefix("pier-test-rootfs-")
        .tempdir()
        .expect("tempdir");
    let root = tmp.path().join("rootfs");
    for d in ["bin", "proc", "sys", "dev", "etc", "tmp", "secret-dir"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox")).expect("copy /bin/busybox");
    std::os::unix::fs::symlink("busybox", root.join("bin/sh")).unwrap();
    std::fs::write(root.join("secret-dir/secret"), "s").unwrap();
    std::fs::write(root.join("etc/secret-file"), "s").unwrap();
    std::fs::create_dir_all(root.join("opt/app/sub")).unwrap();
    std::fs::write(root.join("opt/app/sub/run.sh"), "echo hi\n").unwrap();
    let exec = std::fs::Permissions::from_mode(0o750);
    std::fs::set_permissions(root.join("opt/app/sub/run.sh"), exec).unwrap();
    std::os::unix::fs::symlink("sub/run.sh", root.join("opt/app/link")).unwrap();
    for d in ["host-data/sub", "host-data2", "pier-test-host-target"] {
        std::fs::create_dir_all(tmp.path().join(d)).unwrap();
    }
    std::fs::write(tmp.path().join("host-file"), "from the host\n").unwrap();
    tmp
}

/// Re-runs `test` of this binary in new namespaces (`unshare` flags beyond `-m -p -f`).
fn run_child(test: &str, dir: &Path, unshare: &[&str]) {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("unshare")
        .args(["-m", "-p", "-f", "--propagation", "private"])
        .args(unshare)
        .arg("--")
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env(DIR, dir)
        .output()
        .expect("run unshare");
    let text = format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child failed ({}):\n{text}",
        out.status
    );
    assert!(text.contains("1 passed"), "child ran no test:\n{text}");
    // Other tests may mount things meanwhile: look only for this test's paths.
    let host_mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let dir = dir.to_str().unwrap();
    assert!(
        !host_mounts.contains(dir),
        "a mount leaked to the host:\n{host_mounts}"
    );
}

fn spec(v: Value) -> Spec {
    serde_json::from_value(v).expect("spec")
}

fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Value {
    json!({"destination": dest, "type": typ, "source": source, "options": options})
}

fn default_mounts() -> Vec<Value> {
    vec![
        mount("/proc", "proc", "proc", &[]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
    ]
}

fn namespaces(types: &[&str]) -> Value {
    Value::Array(types.iter().map(|t| json!({"type": t})).collect())
}

/// One line of the child's mountinfo: (mount point, per-mount options, optional fields,
/// fstype).
#[derive(Clone)]
struct MountLine {
    point: String,
    options: String,
    optional: String,
    fstype: String,
}

fn mounts() -> Vec<MountLine> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines()
        .map(|l| {
            let (head, tail) = l.split_once(" - ").unwrap();
            let f: Vec<&str> = head.split(' ').collect();
            MountLine {
                point: f[4].to_string(),
                options: f[5].to_string(),
                optional: f[6..].join(" "),
                fstype: tail.split(' ').next().unwrap().to_string(),
            }
        })
        .collect()
}

/// The topmost mount at `point`.
fn at(mounts: &[MountLine], point: &str) -> MountLine {
    let m = mounts.iter().rev().find(|m| m.point == point);
    m.unwrap_or_else(|| panic!("no mount at {point}")).clone()
}

fn has_opt(m: &MountLine, opt: &str) -> bool {
    m.options.split(',').any(|o| o == opt)
}

fn assert_erofs(path: &str) {
    let err = std::fs::write(path, "x").expect_err(path);
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{path}: {err}");
}

fn run_setup(spec: &Spec, dir: &Path, opts: &Options) -> Result<(), rootfs::RootfsError> {
    run_setup_with(spec, dir, opts, || {})
}

/// Runs setup; `before_pivot` runs as the createContainer hooks would.
fn run_setup_with(
    spec: &Spec,
    dir: &Path,
    opts: &Options,
    mut before_pivot: impl FnMut(),
) -> Result<(), rootfs::RootfsError> {
    let rootfs = dir.join("rootfs");
    let marker = rootfs.join("dev/null");
    let mut hook_saw_devices = false;
    let mut hook = || {
        hook_saw_devices = marker.exists();
        before_pivot();
        Ok(())
    };
    rootfs::setup(spec, &rootfs, opts, &mut hook)?;
    assert!(
        hook_saw_devices,
        "before_pivot ran before the devices or after the pivot"
    );
    assert_eq!(std::env::current_dir().unwrap(), Path::new("/"));
    Ok(())
}

#[test]
fn full_spec_as_real_root() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child("full_spec_as_real_root", tmp.path(), &["-i", "-n", "-u"]);
        }
        return;
    };
    nix::mount::mount(
        Some("tmpfs"),
        &dir.join("host-data/sub"),
        Some("tmpfs"),
        nix::mount::MsFlags::empty(),
        None::<&str>,
    )
    .expect("submount of the bind source");
    let s = full_spec(&dir);
    run_setup(&s, &dir, &Options::default()).expect("setup");
    rootfs::finalize(&s).expect("finalize");
    let ms = mounts();
    check_root_and_binds(&ms);
    check_special_filesystems(&ms);
    check_devices();
    check_sysctl_and_paths(&ms);
    // The root is usable by a program.
    let out = Command::new("/bin/sh")
        .args(["-c", "echo ok"])
        .output()
        .expect("busybox sh");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok\n");
}

/// The spec of `full_spec_as_real_root`: every kind of mount, devices, sysctl, paths.
fn full_spec(dir: &Path) -> Spec {
    let mut ms = default_mounts();
    ms.extend([
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", "ro"],
        ),
        mount(
            "/data",
            "bind",
            dir.join("host-data").to_str().unwrap(),
            &["rbind", "rro", "nosuid"],
        ),
        mount(
            "/etc/pier/file",
            "bind",
            dir.join("host-file").to_str().unwrap(),
            &["bind", "ro"],
        ),
        // A relative source is relative to the bundle (`dir`), not to the cwd.
        mount("/data2", "none", "host-data2", &["bind", "nodev", "noexec"]),
        mount(
            "/scratch",
            "tmpfs",
            "tmpfs",
            &["mode=1777", "size=1m", "noatime"],
        ),
        mount("/opt/app", "tmpfs", "tmpfs", &["tmpcopyup", "ro"]),
    ]);
    spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": true},
        "mounts": ms,
        "linux": {
            "namespaces": namespaces(&["pid", "network", "ipc", "uts", "mount"]),
            "devices": [
                {"path": "/dev/pier-test-fuse", "type": "c", "major": 10, "minor": 229,
                 "fileMode": 0o640, "uid": 1000, "gid": 1001},
                {"path": "/dev/sub/pier-test-fifo", "type": "p"}
            ],
            "sysctl": {"kernel.shmmni": "1234", "net.ipv4.ip_forward": "1"},
            "readonlyPaths": ["/proc/sys", "/does-not-exist"],
            "maskedPaths": [
                "/proc/timer_list", "/proc/acpi", "/secret-dir", "/etc/secret-file", "/proc/kcore"
            ]
        }
    }))
}

fn check_root_and_binds(ms: &[MountLine]) {
    // The old root is gone: no host path is visible.
    assert!(
        ms.iter().all(|m| !m.point.contains("pier-test-rootfs")),
        "old root still attached"
    );
    assert!(Path::new("/bin/busybox").exists());
    // Root read-only; the spec's mounts keep their own options.
    assert!(has_opt(&at(ms, "/"), "ro"));
    assert_erofs("/pier-test-new-file");
    let scratch = at(ms, "/scratch");
    assert!(
        has_opt(&scratch, "rw") && has_opt(&scratch, "noatime"),
        "{}",
        scratch.options
    );
    let mode = std::fs::metadata("/scratch").unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o1777);
    std::fs::write("/scratch/x", "x").expect("tmpfs is writable");
    // tmpcopyup: the tmpfs holds a copy of what it covers.
    let app = at(ms, "/opt/app");
    assert!(
        app.fstype == "tmpfs" && has_opt(&app, "ro"),
        "{}",
        app.options
    );
    assert_eq!(
        std::fs::read_to_string("/opt/app/link").unwrap(),
        "echo hi\n"
    );
    let run = std::fs::metadata("/opt/app/sub/run.sh").unwrap();
    assert_eq!(run.permissions().mode() & 0o7777, 0o750);
    // Binds: rro reaches the submount, nosuid only where asked.
    let data = at(ms, "/data");
    assert!(
        has_opt(&data, "ro") && has_opt(&data, "nosuid"),
        "{}",
        data.options
    );
    assert!(
        has_opt(&at(ms, "/data/sub"), "ro"),
        "rro did not reach the submount"
    );
    assert_erofs("/data/sub/x");
    let file = at(ms, "/etc/pier/file");
    assert!(has_opt(&file, "ro"));
    assert_eq!(
        std::fs::read_to_string("/etc/pier/file").unwrap(),
        "from the host\n"
    );
    let data2 = at(ms, "/data2");
    assert!(has_opt(&data2, "nodev") && has_opt(&data2, "noexec") && has_opt(&data2, "rw"));
}

fn check_special_filesystems(ms: &[MountLine]) {
    // Special filesystems.
    assert_eq!(at(ms, "/proc").fstype, "proc");
    assert!(has_opt(&at(ms, "/sys"), "ro"));
    assert_eq!(at(ms, "/dev/pts").fstype, "devpts");
    assert_eq!(at(ms, "/dev/mqueue").fstype, "mqueue");
    let cg = at(ms, "/sys/fs/cgroup");
    assert!(
        cg.fstype == "tmpfs" || cg.fstype == "cgroup2",
        "{}",
        cg.fstype
    );
    if cg.fstype == "tmpfs" {
        assert!(has_opt(&cg, "ro"));
        let memory = at(ms, "/sys/fs/cgroup/memory");
        assert!(has_opt(&memory, "ro") && memory.fstype == "cgroup");
        assert!(Path::new("/sys/fs/cgroup/memory/memory.limit_in_bytes").exists());
    }
}

fn check_devices() {
    // Devices and links.
    let null = std::fs::metadata("/dev/null").unwrap();
    assert!(null.file_type().is_char_device());
    assert_eq!(
        (null.rdev(), null.mode() & 0o777),
        (libc::makedev(1, 3), 0o666)
    );
    let fuse = std::fs::metadata("/dev/pier-test-fuse").unwrap();
    assert_eq!(fuse.rdev(), libc::makedev(10, 229));
    assert_eq!(
        (fuse.mode() & 0o777, fuse.uid(), fuse.gid()),
        (0o640, 1000, 1001)
    );
    assert!(std::fs::metadata("/dev/sub/pier-test-fifo")
        .unwrap()
        .file_type()
        .is_fifo());
    assert_eq!(
        std::fs::read_link("/dev/ptmx").unwrap(),
        Path::new("pts/ptmx")
    );
    assert_eq!(
        std::fs::read_link("/dev/fd").unwrap(),
        Path::new("/proc/self/fd")
    );
    assert!(Path::new("/dev/pts/ptmx").exists() && Path::new("/dev/shm").is_dir());
}

fn check_sysctl_and_paths(ms: &[MountLine]) {
    // sysctl, readonly and masked paths.
    assert_eq!(
        std::fs::read_to_string("/proc/sys/kernel/shmmni")
            .unwrap()
            .trim(),
        "1234"
    );
    assert_eq!(
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_forward")
            .unwrap()
            .trim(),
        "1"
    );
    assert!(has_opt(&at(ms, "/proc/sys"), "ro"));
    assert_erofs("/proc/sys/kernel/shmmni");
    let secret = std::fs::metadata("/etc/secret-file").unwrap();
    assert!(secret.file_type().is_char_device(), "file not masked");
    // /proc/timer_list and /proc/acpi depend on the kernel's configuration.
    if let Ok(m) = std::fs::metadata("/proc/timer_list") {
        assert!(m.file_type().is_char_device());
    }
    if Path::new("/proc/acpi").exists() {
        assert!(has_opt(&at(ms, "/proc/acpi"), "ro"));
    }
    assert!(
        std::fs::read_dir("/secret-dir").unwrap().next().is_none(),
        "directory not masked"
    );
    assert!(has_opt(&at(ms, "/secret-dir"), "ro"));
}

#[test]
fn user_namespace_binds_what_it_cannot_create() {
    let mut mounts_spec = default_mounts();
    mounts_spec.push(mount(
        "/sys/fs/cgroup",
        "cgroup",
        "cgroup",
        &["ro", "nosuid"],
    ));
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child(
                "user_namespace_binds_what_it_cannot_create",
                tmp.path(),
                &["-U", "-r", "-i", "-C"],
            );
        }
        return;
    };
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs", "readonly": true},
        "mounts": mounts_spec,
        "linux": {
            "namespaces": namespaces(&["pid", "ipc", "mount", "user", "cgroup"]),
            "uidMappings": [{"containerID": 0, "hostID": 0, "size": 1}],
            "gidMappings": [{"containerID": 0, "hostID": 0, "size": 1}],
            "readonlyPaths": ["/proc/sys"],
            "maskedPaths": ["/etc/secret-file"]
        }
    }));
    run_setup(&s, &dir, &Options::default()).expect("setup");
    rootfs::finalize(&s).expect("finalize");
    let ms = mounts();
    // mknod is refused in a user namespace: the host's nodes are bound instead.
    let null = std::fs::metadata("/dev/null").unwrap();
    assert!(null.file_type().is_char_device());
    assert_eq!(null.rdev(), libc::makedev(1, 3));
    assert!(
        ms.iter().any(|m| m.point == "/dev/null"),
        "/dev/null is not a bind"
    );
    // sysfs cannot be mounted without a network namespace of our own: rbind of /sys.
    let sys = at(&ms, "/sys");
    assert!(
        sys.fstype == "sysfs" && has_opt(&sys, "ro"),
        "{} {}",
        sys.fstype,
        sys.options
    );
    let below_sys = ms.iter().filter(|m| m.point.starts_with("/sys/"));
    let all_ro = below_sys.clone().all(|m| has_opt(m, "ro"));
    assert!(
        below_sys.count() > 1 && all_ro,
        "the rbind of /sys is writable below"
    );
    // With a cgroup namespace, the hierarchies are mounted anew (their root is the namespace's).
    let memory = at(&ms, "/sys/fs/cgroup/memory");
    assert!(memory.fstype == "cgroup" && has_opt(&memory, "ro") && has_opt(&memory, "nosuid"));
    // devpts with an unmapped gid=5 was retried without it.
    assert_eq!(at(&ms, "/dev/pts").fstype, "devpts");
    assert!(has_opt(&at(&ms, "/"), "ro"));
    assert!(has_opt(&at(&ms, "/proc/sys"), "ro"));
    assert_erofs("/pier-test-new-file");
    let secret = std::fs::metadata("/etc/secret-file").unwrap();
    assert!(
        secret.file_type().is_char_device(),
        "file not masked (userns)"
    );
}

#[test]
fn missing_bind_source_names_the_mount() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child("missing_bind_source_names_the_mount", tmp.path(), &[]);
            assert!(
                !tmp.path().join("rootfs/data").exists(),
                "destination created anyway"
            );
        }
        return;
    };
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [
            mount("/proc", "proc", "proc", &[]),
            mount("/data", "bind", "/pier-test-no-such-source", &["rbind"]),
        ],
        "linux": {"namespaces": namespaces(&["pid", "mount"])}
    }));
    let missing = dir.join("pier-test-no-rootfs");
    let err = rootfs::setup(&s, &missing, &Options::default(), &mut || Ok(()));
    let msg = err.expect_err("a missing rootfs").to_string();
    assert!(
        msg.contains("pier-test-no-rootfs") && msg.contains("No such file"),
        "{msg}"
    );
    let err = run_setup(&s, &dir, &Options::default()).expect_err("setup must fail");
    let msg = err.to_string();
    println!("{msg}");
    assert!(msg.contains("mounts[1]"), "{msg}");
    assert!(
        msg.contains("/pier-test-no-such-source") && msg.contains("/data"),
        "{msg}"
    );
    assert!(msg.contains("source does not exist"), "{msg}");
}

#[test]
fn symlinks_in_the_image_cannot_lead_mounts_out() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            let target = tmp.path().join("pier-test-host-target");
            let root = tmp.path().join("rootfs");
            std::os::unix::fs::symlink(&target, root.join("evil-abs")).unwrap();
            let up = "../".repeat(target.components().count() + 2);
            let rel = format!("{up}{}", target.strip_prefix("/").unwrap().display());
            std::os::unix::fs::symlink(rel, root.join("evil-rel")).unwrap();
            std::os::unix::fs::symlink("/etc", root.join("etc-link")).unwrap();
            // Dangling inside the root (the host has the directory, the root does not).
            std::os::unix::fs::symlink(target.join("z"), root.join("dangling")).unwrap();
            // The symlinks resolve inside the root to directories that exist there too.
            std::fs::create_dir_all(root.join(target.strip_prefix("/").unwrap())).unwrap();
            run_child(
                "symlinks_in_the_image_cannot_lead_mounts_out",
                tmp.path(),
                &[],
            );
            assert!(
                std::fs::read_dir(&target).unwrap().next().is_none(),
                "a mount escaped"
            );
            assert!(
                !Path::new("/etc/pier-test-escape").exists(),
                "a mount escaped to /etc"
            );
            let inside = root.join(target.strip_prefix("/").unwrap());
            assert!(
                inside.join("x").is_dir() && inside.join("y").is_dir() && inside.join("z").is_dir()
            );
            assert!(root.join("etc/pier-test-escape").is_file());
        }
        return;
    };
    let target = dir.join("pier-test-host-target");
    let host_file = dir.join("host-file");
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [
            mount("/proc", "proc", "proc", &[]),
            mount("/evil-abs/x", "tmpfs", "tmpfs", &[]),
            mount("/evil-rel/y", "tmpfs", "tmpfs", &[]),
            mount("/dangling", "tmpfs", "tmpfs", &[]),
            mount("/etc-link/pier-test-escape", "bind", host_file.to_str().unwrap(), &["bind"]),
        ],
        "linux": {"namespaces": namespaces(&["pid", "mount"])}
    }));
    run_setup(&s, &dir, &Options::default()).expect("setup");
    let ms = mounts();
    let t = target.to_str().unwrap();
    assert_eq!(at(&ms, &format!("{t}/x")).fstype, "tmpfs");
    assert_eq!(at(&ms, &format!("{t}/y")).fstype, "tmpfs");
    assert_eq!(at(&ms, &format!("{t}/z")).fstype, "tmpfs");
    assert_eq!(
        std::fs::read_to_string("/etc/pier-test-escape").unwrap(),
        "from the host\n"
    );
}

#[test]
fn no_pivot_moves_the_root() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child("no_pivot_moves_the_root", tmp.path(), &[]);
        }
        return;
    };
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [mount("/proc", "proc", "proc", &[])],
        "linux": {"namespaces": namespaces(&["pid", "mount"])}
    }));
    run_setup(&s, &dir, &Options { no_pivot: true }).expect("setup");
    rootfs::finalize(&s).expect("finalize");
    assert!(Path::new("/bin/busybox").exists() && Path::new("/dev/null").exists());
    assert!(!Path::new("/rootfs").exists());
}

#[test]
fn shared_root_propagation() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child("shared_root_propagation", tmp.path(), &[]);
        }
        return;
    };
    // The bind source is a mount of its own, which the rshared `/` puts in a peer group.
    let flags = nix::mount::MsFlags::empty();
    let source = dir.join("host-data");
    nix::mount::mount(Some("tmpfs"), &source, Some("tmpfs"), flags, None::<&str>).expect("tmpfs");
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [
            mount("/proc", "proc", "proc", &[]),
            mount("/data", "bind", source.to_str().unwrap(), &["rbind", "rslave"])
        ],
        "linux": {"namespaces": namespaces(&["pid", "mount"]), "rootfsPropagation": "rshared"}
    }));
    let data_point = dir.join("rootfs/data");
    let check = || {
        // Before the pivot, the source still exists: /data is its slave.
        let data = at(&mounts(), data_point.to_str().unwrap());
        assert!(
            data.optional.contains("master:"),
            "/data: {}",
            data.optional
        );
    };
    run_setup_with(&s, &dir, &Options::default(), check).expect("setup");
    rootfs::finalize(&s).expect("finalize");
    let root = at(&mounts(), "/");
    assert!(
        root.optional.contains("shared:"),
        "/ is not shared: {}",
        root.optional
    );
}

#[test]
fn sysctl_outside_the_containers_namespaces_is_refused() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child(
                "sysctl_outside_the_containers_namespaces_is_refused",
                tmp.path(),
                &[],
            );
        }
        return;
    };
    let base = json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [mount("/proc", "proc", "proc", &[])],
        "linux": {"namespaces": namespaces(&["pid", "mount"])}
    });
    let s = spec(base.clone());
    run_setup(&s, &dir, &Options::default()).expect("setup");
    for (key, why) in [
        ("net.ipv4.ip_forward", "no network namespace"),
        ("kernel.panic", "not namespaced"),
    ] {
        let mut v = base.clone();
        v["linux"]["sysctl"] = json!({ key: "1" });
        let msg = rootfs::finalize(&spec(v)).expect_err(key).to_string();
        assert!(msg.contains(key) && msg.contains(why), "{msg}");
    }
    let mut v = base.clone();
    v["linux"]["rootfsPropagation"] = json!("sideways");
    let msg = rootfs::finalize(&spec(v))
        .expect_err("bad propagation")
        .to_string();
    assert!(msg.contains("sideways"), "{msg}");
}

#[test]
fn unbindable_root_propagation() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child("unbindable_root_propagation", tmp.path(), &[]);
        }
        return;
    };
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [mount("/proc", "proc", "proc", &[])],
        "linux": {"namespaces": namespaces(&["pid", "mount"]), "rootfsPropagation": "runbindable"}
    }));
    // An unbindable `/` would refuse the root's bind onto itself: it is applied at the end.
    run_setup(&s, &dir, &Options::default()).expect("setup");
    rootfs::finalize(&s).expect("finalize");
    let root = at(&mounts(), "/");
    assert!(root.optional.contains("unbindable"), "/: {}", root.optional);
}

#[test]
fn non_recursive_root_propagation() {
    let Some(dir) = child_dir() else {
        if have_root() {
            let tmp = prepare();
            run_child("non_recursive_root_propagation", tmp.path(), &[]);
        }
        return;
    };
    // Make the namespace look like a systemd host's (everything shared), then ask for a
    // non-recursive type: the rest of the tree stays shared, which setup must cope with.
    // The bundle is a mount of its own, as an overlay rootfs would be.
    let bind = nix::mount::MsFlags::MS_BIND;
    nix::mount::mount(Some(&dir), &dir, None::<&str>, bind, None::<&str>).expect("bind");
    let flags = nix::mount::MsFlags::MS_SHARED | nix::mount::MsFlags::MS_REC;
    nix::mount::mount(None::<&str>, "/", None::<&str>, flags, None::<&str>).expect("rshared /");
    let s = spec(json!({
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "mounts": [mount("/proc", "proc", "proc", &[])],
        "linux": {"namespaces": namespaces(&["pid", "mount"]), "rootfsPropagation": "slave"}
    }));
    let proc_point = dir.join("rootfs/proc");
    let check = || {
        // The root's parent was made private, so the root and its mounts are nobody's peers.
        let proc_mount = at(&mounts(), proc_point.to_str().unwrap());
        assert!(
            !proc_mount.optional.contains("shared:"),
            "{}",
            proc_mount.optional
        );
    };
    run_setup_with(&s, &dir, &Options::default(), check).expect("setup");
    rootfs::finalize(&s).expect("finalize");
    assert_eq!(at(&mounts(), "/proc").fstype, "proc");
}
