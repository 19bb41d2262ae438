//! Privileged lifecycle tests of the runtime API with a real busybox container.
//!
//! Each test builds a bundle in a temp dir (`/bin/busybox` is busybox-static, linked as the
//! commands the test needs) and uses a temp `--root`; the containers get `cgroupsPath`
//! `/pier-test-<name>-<pid>` so the test can check that no cgroup is left. The inits are
//! children of the test process, so a test can also check that no process is left. Tests run
//! one at a time on the main thread (see `main`). Needs root: skips with a reason outside CI,
//! fails under CI=true.
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use pier_cgroups::ManagerKind;
use pier_runtime::{CreateOptions, Error, ExecOptions, Runtime};
use serde_json::{json, Value};
use std::os::fd::AsFd;
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

/// A bundle and a runtime root in temp dirs, removed on drop (containers deleted first).
struct Fixture {
    rt: Runtime,
    bundle: tempfile::TempDir,
    _root: tempfile::TempDir,
    ids: Vec<String>,
}

impl Fixture {
    fn new(id: &str, args: &[&str]) -> Fixture {
        let bundle = tempfile::Builder::new()
            .prefix("pier-test-bundle-")
            .tempdir()
            .unwrap();
        let root = tempfile::Builder::new()
            .prefix("pier-test-root-")
            .tempdir()
            .unwrap();
        make_rootfs(&bundle.path().join("rootfs"));
        let f = Fixture {
            rt: Runtime {
                root: root.path().join("state"),
                cgroup_manager: ManagerKind::Cgroupfs,
            },
            bundle,
            _root: root,
            ids: vec![id.to_owned()],
        };
        f.write_config(id, args, |_| {});
        f
    }

    fn write_config(&self, id: &str, args: &[&str], edit: impl FnOnce(&mut Value)) {
        let mut spec = serde_json::to_value(pier_runtime::default_spec()).unwrap();
        spec["process"]["terminal"] = json!(false);
        spec["process"]["args"] = json!(args);
        spec["process"]["env"] = json!(["PATH=/bin"]);
        spec["process"]["capabilities"]["ambient"] = json!([]);
        spec["hostname"] = json!("pier-test");
        spec["linux"]["cgroupsPath"] = json!(format!("/{}", cgroup_name(id)));
        edit(&mut spec);
        std::fs::write(self.bundle.path().join("config.json"), spec.to_string()).unwrap();
    }

    fn opts(&self) -> CreateOptions {
        CreateOptions {
            bundle: self.bundle.path().to_owned(),
            ..CreateOptions::default()
        }
    }

    fn root_entries(&self) -> Vec<String> {
        match std::fs::read_dir(&self.rt.root) {
            Ok(d) => d
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        for id in &self.ids {
            let _ = self.rt.delete(id, true);
        }
        reap_all();
    }
}

fn make_rootfs(rootfs: &Path) {
    let bin = rootfs.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::copy("/bin/busybox", bin.join("busybox")).unwrap();
    for cmd in ["sh", "true", "sleep", "cat", "hostname", "ls"] {
        std::os::unix::fs::symlink("busybox", bin.join(cmd)).unwrap();
    }
    for dir in ["proc", "dev", "sys", "tmp"] {
        std::fs::create_dir_all(rootfs.join(dir)).unwrap();
    }
}

/// Reaps every exited child; true when no child is left at all.
fn reap_all() -> bool {
    loop {
        match waitid(Id::All, WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG) {
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => continue,
            Err(_) => return true,
        }
    }
}

/// The test's cgroup: the pid keeps concurrent runs of this suite (worktrees) apart.
fn cgroup_name(id: &str) -> String {
    format!("{id}-{}", std::process::id())
}

fn cgroup_dirs(id: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/sys/fs/cgroup").unwrap().flatten() {
        let dir = entry.path().join(cgroup_name(id));
        if dir.exists() {
            found.push(dir);
        }
    }
    found
}

fn status(rt: &Runtime, id: &str) -> String {
    rt.state(id).unwrap().status
}

/// Waits (on a pidfd, the init being our child) until the init exited, and reaps it.
fn wait_init(pid: i32) {
    let fd = pier_sys::pidfd::open(pid).unwrap();
    let _ = waitid(Id::PIDFd(fd.as_fd()), WaitPidFlag::WEXITED);
}

fn create_start_kill_delete() {
    let id = "pier-test-lifecycle";
    let f = Fixture::new(id, &["sleep", "1000"]);
    let pid_file = f._root.path().join("pid");
    let opts = CreateOptions {
        pid_file: Some(pid_file.clone()),
        ..f.opts()
    };
    f.rt.create(id, &opts).unwrap();
    let state = f.rt.state(id).unwrap();
    assert_eq!(state.status, "created");
    assert!(state.pid > 0);
    assert_eq!(
        std::fs::read_to_string(&pid_file).unwrap(),
        state.pid.to_string()
    );
    assert_eq!(f.rt.list().unwrap().len(), 1);
    assert!(f.rt.ps(id).unwrap().contains(&state.pid));
    f.rt.start(id).unwrap();
    assert_eq!(status(&f.rt, id), "running");
    assert_eq!(
        f.rt.start(id).unwrap_err().to_string(),
        "cannot start an already running container"
    );
    f.rt.kill(id, libc::SIGKILL, false).unwrap();
    wait_init(state.pid);
    assert_eq!(status(&f.rt, id), "stopped");
    assert_eq!(
        f.rt.kill(id, libc::SIGTERM, false).unwrap_err().to_string(),
        "container not running"
    );
    assert_eq!(
        f.rt.start(id).unwrap_err().to_string(),
        "cannot start a container that has stopped"
    );
    f.rt.delete(id, false).unwrap();
    assert!(f.root_entries().is_empty(), "{:?}", f.root_entries());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
    assert_eq!(
        f.rt.state(id).unwrap_err().to_string(),
        format!("container {id} does not exist")
    );
}

fn delete_created_never_started() {
    let id = "pier-test-created";
    let f = Fixture::new(id, &["true"]);
    f.rt.create(id, &f.opts()).unwrap();
    f.rt.delete(id, false).unwrap();
    assert!(reap_all(), "the held init is gone");
    assert!(f.root_entries().is_empty());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn delete_force_running() {
    let id = "pier-test-force";
    let f = Fixture::new(id, &["sleep", "1000"]);
    f.rt.create(id, &f.opts()).unwrap();
    f.rt.start(id).unwrap();
    let err = f.rt.delete(id, false).unwrap_err();
    assert!(matches!(err, Error::NotStopped { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        format!("cannot delete container {id} that is not stopped: running")
    );
    f.rt.delete(id, true).unwrap();
    assert!(reap_all());
    assert!(f.root_entries().is_empty());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn delete_kills_processes_left_in_the_cgroup() {
    let id = "pier-test-leftover";
    let f = Fixture::new(id, &["true"]);
    // Without a pid namespace, the init's death does not take the other processes along.
    f.write_config(id, &["sleep", "1000"], |spec| {
        spec["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .retain(|ns| ns["type"] != "pid");
    });
    f.rt.create(id, &f.opts()).unwrap();
    f.rt.start(id).unwrap();
    let init = f.rt.state(id).unwrap().pid;
    assert_eq!(f.rt.exec(id, &sleeper(true)).unwrap(), 0);
    assert_eq!(f.rt.ps(id).unwrap().len(), 2, "{:?}", f.rt.ps(id));
    f.rt.kill(id, libc::SIGKILL, false).unwrap();
    wait_init(init);
    assert_eq!(status(&f.rt, id), "stopped");
    assert_eq!(f.rt.ps(id).unwrap().len(), 1, "the exec'd sleep is left");
    f.rt.delete(id, false).unwrap();
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
    assert!(f.root_entries().is_empty());
}

fn pause_resume_update() {
    let id = "pier-test-pause";
    let f = Fixture::new(id, &["sleep", "1000"]);
    f.rt.create(id, &f.opts()).unwrap();
    assert_eq!(
        f.rt.pause(id).unwrap_err().to_string(),
        "container not running"
    );
    f.rt.start(id).unwrap();
    f.rt.pause(id).unwrap();
    assert_eq!(status(&f.rt, id), "paused");
    let exec = f.rt.exec(id, &sleeper(true)).unwrap_err().to_string();
    assert_eq!(exec, "cannot exec in a paused container");
    f.rt.resume(id).unwrap();
    assert_eq!(status(&f.rt, id), "running");
    assert_eq!(
        f.rt.resume(id).unwrap_err().to_string(),
        "container not paused"
    );
    let resources = serde_json::from_value(json!({"pids": {"limit": 42}})).unwrap();
    f.rt.update(id, &resources).unwrap();
    f.rt.pause(id).unwrap();
    f.rt.delete(id, true).unwrap();
    assert!(reap_all());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn console_socket_gets_the_pty_master() {
    let id = "pier-test-console";
    let f = Fixture::new(id, &["sh", "-c", "[ -t 0 ] && [ -t 1 ] && exit 4"]);
    f.write_config(
        id,
        &["sh", "-c", "[ -t 0 ] && [ -t 1 ] && exit 4"],
        |spec| {
            spec["process"]["terminal"] = json!(true);
        },
    );
    let socket = f._root.path().join("console.sock");
    let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    let opts = CreateOptions {
        console_socket: Some(socket),
        ..f.opts()
    };
    f.rt.create(id, &opts).unwrap();
    let master = receive_master(&listener);
    let pid = f.rt.state(id).unwrap().pid;
    f.rt.start(id).unwrap();
    let fd = pier_sys::pidfd::open(pid).unwrap();
    let status = waitid(Id::PIDFd(fd.as_fd()), WaitPidFlag::WEXITED).unwrap();
    assert_eq!(
        status,
        WaitStatus::Exited(nix::unistd::Pid::from_raw(pid), 4),
        "stdio is the pty"
    );
    nix::unistd::close(master).unwrap();
    f.rt.delete(id, false).unwrap();
}

/// Accepts one connection on a `--console-socket` listener and receives the pty master.
fn receive_master(listener: &std::os::unix::net::UnixListener) -> std::os::fd::RawFd {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::AsRawFd;
    let (conn, _) = listener.accept().unwrap();
    let mut buf = [0u8; 64];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )
    .unwrap();
    let master = msg.cmsgs().unwrap().find_map(|c| match c {
        ControlMessageOwned::ScmRights(fds) => fds.first().copied(),
        _ => None,
    });
    master.expect("the pty master came over the socket")
}

/// `sleep 1000` for `exec`.
fn sleeper(detach: bool) -> ExecOptions {
    let mut process = pier_runtime::default_spec().process().clone().unwrap();
    process.set_terminal(Some(false));
    process.set_capabilities(None);
    process.set_args(Some(vec!["sleep".into(), "1000".into()]));
    process.set_env(Some(vec!["PATH=/bin".into()]));
    ExecOptions {
        process,
        detach,
        pid_file: None,
        console_socket: None,
        preserve_fds: 0,
    }
}

fn run_returns_exit_codes() {
    let id = "pier-test-run";
    let f = Fixture::new(
        id,
        &["sh", "-c", "[ \"$(hostname)\" = pier-test ] && exit 3"],
    );
    assert_eq!(f.rt.run(id, &f.opts(), false).unwrap(), 3);
    assert!(f.root_entries().is_empty());
    // Without a pid namespace the shell is not an init, so SIGKILL from itself works.
    f.write_config(id, &["sh", "-c", "kill -9 $$"], |spec| {
        spec["linux"]["namespaces"]
            .as_array_mut()
            .unwrap()
            .retain(|ns| ns["type"] != "pid");
    });
    assert_eq!(f.rt.run(id, &f.opts(), false).unwrap(), 128 + 9);
    f.write_config(id, &["true"], |_| {});
    assert_eq!(f.rt.run(id, &f.opts(), false).unwrap(), 0);
    assert!(f.root_entries().is_empty());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn exec_in_running_container() {
    let id = "pier-test-exec";
    let f = Fixture::new(id, &["sleep", "1000"]);
    f.rt.create(id, &f.opts()).unwrap();
    f.rt.start(id).unwrap();
    let spec = pier_runtime::default_spec();
    let mut process = spec.process().clone().unwrap();
    process.set_terminal(Some(false));
    process.set_env(Some(vec!["PATH=/bin".into()]));
    process.set_capabilities(None);
    process.set_args(Some(vec![
        "sh".into(),
        "-c".into(),
        "[ \"$(hostname)\" = pier-test ] && exit 5".into(),
    ]));
    let opts = ExecOptions {
        process,
        detach: false,
        pid_file: None,
        console_socket: None,
        preserve_fds: 0,
    };
    assert_eq!(f.rt.exec(id, &opts).unwrap(), 5);
    let mut missing = opts.clone();
    missing
        .process
        .set_args(Some(vec!["pier-test-nonexistent".into()]));
    let err = f.rt.exec(id, &missing).unwrap_err().to_string();
    assert!(err.contains("executable file not found"), "{err}");
    let pids = f.rt.ps(id).unwrap();
    assert_eq!(pids.len(), 1, "only the init remains: {pids:?}");
    f.rt.delete(id, true).unwrap();
    let err = f.rt.exec(id, &opts).unwrap_err();
    assert_eq!(err.to_string(), format!("container {id} does not exist"));
}

/// `exec --tty` gets a pty of its own, but the container's `/dev/console` stays the one the init
/// set up: exactly one mount on it in the init's mount table, before and after (runc's exec
/// does not mount over it either).
fn exec_tty_leaves_the_console_alone() {
    let id = "pier-test-exec-tty";
    let f = Fixture::new(id, &["sleep", "1000"]);
    f.write_config(id, &["sleep", "1000"], |spec| {
        spec["process"]["terminal"] = json!(true);
    });
    let init_socket = f._root.path().join("init-console.sock");
    let init_listener = std::os::unix::net::UnixListener::bind(&init_socket).unwrap();
    let opts = CreateOptions {
        console_socket: Some(init_socket),
        ..f.opts()
    };
    f.rt.create(id, &opts).unwrap();
    let init_master = receive_master(&init_listener);
    f.rt.start(id).unwrap();
    let pid = f.rt.state(id).unwrap().pid;
    assert_eq!(console_mounts(pid), 1, "the init's console");
    let exec_socket = f._root.path().join("exec-console.sock");
    let exec_listener = std::os::unix::net::UnixListener::bind(&exec_socket).unwrap();
    let mut exec = sleeper(false);
    exec.process.set_terminal(Some(true));
    exec.process.set_args(Some(vec![
        "sh".into(),
        "-c".into(),
        "[ -t 0 ] && exit 7".into(),
    ]));
    exec.console_socket = Some(exec_socket);
    assert_eq!(
        f.rt.exec(id, &exec).unwrap(),
        7,
        "the exec'd stdin is a pty"
    );
    nix::unistd::close(receive_master(&exec_listener)).unwrap();
    assert_eq!(console_mounts(pid), 1, "exec --tty mounted on /dev/console");
    nix::unistd::close(init_master).unwrap();
    f.rt.delete(id, true).unwrap();
}

/// How many mounts in the mount table of `pid` are on `/dev/console`.
fn console_mounts(pid: i32) -> usize {
    let table = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap();
    table
        .lines()
        .filter(|line| line.split(' ').nth(4) == Some("/dev/console"))
        .count()
}

fn unknown_and_duplicate_ids() {
    let id = "pier-test-dup";
    let f = Fixture::new(id, &["true"]);
    for err in [
        f.rt.state("nope"),
        f.rt.start("nope").map(|_| unreachable!()),
        f.rt.delete("nope", true).map(|_| unreachable!()),
    ] {
        assert_eq!(
            err.unwrap_err().to_string(),
            "container nope does not exist"
        );
    }
    assert!(matches!(
        f.rt.create("a/b", &f.opts()),
        Err(Error::InvalidId(_))
    ));
    f.rt.create(id, &f.opts()).unwrap();
    let err = f.rt.create(id, &f.opts()).unwrap_err();
    assert_eq!(err.to_string(), format!("container with id exists: {id}"));
    assert_eq!(
        status(&f.rt, id),
        "created",
        "the first container is untouched"
    );
}

fn failure_in_the_init_leaves_nothing() {
    let id = "pier-test-badmount";
    let f = Fixture::new(id, &["true"]);
    f.write_config(id, &["true"], |spec| {
        let mounts = spec["mounts"].as_array_mut().unwrap();
        mounts.push(json!({"destination": "/mnt", "type": "bind",
            "source": "/nonexistent/pier-test", "options": ["rbind"]}));
    });
    let err = f.rt.create(id, &f.opts()).unwrap_err();
    assert!(matches!(err, Error::Init(_)), "{err}");
    assert!(err.to_string().contains("/nonexistent/pier-test"), "{err}");
    assert!(reap_all(), "no process left");
    assert!(f.root_entries().is_empty(), "{:?}", f.root_entries());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn missing_program_fails_create() {
    let id = "pier-test-noprog";
    let f = Fixture::new(id, &["pier-test-nonexistent"]);
    let err = f.rt.create(id, &f.opts()).unwrap_err().to_string();
    assert!(
        err.ends_with("exec: \"pier-test-nonexistent\": executable file not found in $PATH"),
        "{err}"
    );
    assert!(reap_all(), "no process left");
    assert!(f.root_entries().is_empty(), "{:?}", f.root_entries());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn user_cgroup_and_time_namespaces() {
    let id = "pier-test-userns";
    let check = "read up _ < /proc/uptime; [ ${up%%.*} -ge 86400 ] && [ $(id -u) = 0 ] \
        && grep -q ' 100000 ' /proc/self/uid_map && grep -q ':/$' /proc/self/cgroup && exit 9";
    let f = Fixture::new(id, &["sh", "-c", check]);
    // The init runs as host uid 100000: the bundle must be searchable for it.
    std::fs::set_permissions(
        f.bundle.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    f.write_config(id, &["sh", "-c", check], |spec| {
        let namespaces = spec["linux"]["namespaces"].as_array_mut().unwrap();
        namespaces.extend([
            json!({"type": "user"}),
            json!({"type": "cgroup"}),
            json!({"type": "time"}),
        ]);
        let map = json!([{"containerID": 0, "hostID": 100000, "size": 65536}]);
        spec["linux"]["uidMappings"] = map.clone();
        spec["linux"]["gidMappings"] = map;
        spec["linux"]["timeOffsets"] = json!({"boottime": {"secs": 86400, "nanosecs": 0}});
        spec["mounts"]
            .as_array_mut()
            .unwrap()
            .retain(|m| m["destination"] != "/sys/fs/cgroup");
    });
    assert_eq!(f.rt.run(id, &f.opts(), false).unwrap(), 9);
    assert!(f.root_entries().is_empty());
    assert!(cgroup_dirs(id).is_empty(), "{:?}", cgroup_dirs(id));
}

fn seccomp_notify_listener_gets_the_fd() {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::AsRawFd;
    let id = "pier-test-notify";
    let f = Fixture::new(id, &["true"]);
    let socket = f._root.path().join("agent.sock");
    let agent = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    f.write_config(id, &["true"], |spec| {
        spec["linux"]["seccomp"] = json!({
            "defaultAction": "SCMP_ACT_ALLOW",
            "listenerPath": socket,
            "listenerMetadata": "pier-test-metadata",
            "syscalls": [{"names": ["swapon"], "action": "SCMP_ACT_NOTIFY"}]
        });
    });
    assert_eq!(f.rt.run(id, &f.opts(), false).unwrap(), 0);
    let (conn, _) = agent.accept().unwrap();
    let mut buf = vec![0u8; 65536];
    let mut cmsg = nix::cmsg_space!([std::os::fd::RawFd; 1]);
    let mut iov = [std::io::IoSliceMut::new(&mut buf)];
    let msg = recvmsg::<()>(
        conn.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )
    .unwrap();
    let fds: Vec<_> = msg
        .cmsgs()
        .unwrap()
        .filter_map(|c| match c {
            ControlMessageOwned::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        .collect();
    let len = msg.bytes;
    assert_eq!(fds.len(), 1, "one listener fd");
    nix::unistd::close(fds[0]).unwrap();
    let state: Value = serde_json::from_slice(&buf[..len]).unwrap();
    assert_eq!(state["fds"], json!(["seccompFd"]));
    assert_eq!(state["metadata"], "pier-test-metadata");
    assert_eq!(state["state"]["id"], id);
    assert!(state["pid"].as_i64().unwrap() > 0, "{state}");
}

fn bad_bundle_is_named() {
    let id = "pier-test-badbundle";
    let f = Fixture::new(id, &["true"]);
    std::fs::remove_dir_all(f.bundle.path().join("rootfs")).unwrap();
    let err = f.rt.create(id, &f.opts()).unwrap_err().to_string();
    assert!(
        err.contains("rootfs") && err.contains("does not exist"),
        "{err}"
    );
    std::fs::write(
        f.bundle.path().join("config.json"),
        "{\"ociVersion\": \"1.0.0\", \"process\": 3}",
    )
    .unwrap();
    let err = f.rt.create(id, &f.opts()).unwrap_err().to_string();
    assert!(
        err.contains("config.json") && err.contains("process"),
        "{err}"
    );
    assert!(f.root_entries().is_empty(), "{:?}", f.root_entries());
}

const TESTS: &[(&str, fn())] = &[
    ("create_start_kill_delete", create_start_kill_delete),
    ("delete_created_never_started", delete_created_never_started),
    ("delete_force_running", delete_force_running),
    (
        "delete_kills_processes_left_in_the_cgroup",
        delete_kills_processes_left_in_the_cgroup,
    ),
    ("pause_resume_update", pause_resume_update),
    (
        "console_socket_gets_the_pty_master",
        console_socket_gets_the_pty_master,
    ),
    ("run_returns_exit_codes", run_returns_exit_codes),
    ("exec_in_running_container", exec_in_running_container),
    (
        "exec_tty_leaves_the_console_alone",
        exec_tty_leaves_the_console_alone,
    ),
    ("unknown_and_duplicate_ids", unknown_and_duplicate_ids),
    (
        "failure_in_the_init_leaves_nothing",
        failure_in_the_init_leaves_nothing,
    ),
    ("missing_program_fails_create", missing_program_fails_create),
    (
        "user_cgroup_and_time_namespaces",
        user_cgroup_and_time_namespaces,
    ),
    (
        "seccomp_notify_listener_gets_the_fd",
        seccomp_notify_listener_gets_the_fd,
    ),
    ("bad_bundle_is_named", bad_bundle_is_named),
];

/// A harness of our own (`harness = false`): every test runs on the main thread, one after the
/// other. libtest would run each on a new thread, and a thread being created while a test forks
/// leaves glibc in the child waiting for it forever (in its set*id wrappers, for one). Arguments
/// that do not start with `-` (and are not numbers, like the value of `--test-threads 4`) filter
/// tests by name.
fn main() {
    if !root_or_skip() {
        return;
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-') && a.parse::<u64>().is_err())
        .collect();
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
