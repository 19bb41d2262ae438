//! Privileged tests of `process::exec` and the console: each case re-executes this test binary
//! as a child (`child` below, selected with PIER_TEST_PROCESS_CHILD; never forked from the
//! multi-threaded harness) that calls `process::exec` with a spec `process` and execs busybox,
//! which prints what it got (/proc/self/status, ulimits, umask, cwd, env, fds). The parent
//! parses the `KEY=value` lines.
//!
//! Needs root (skips with a reason outside CI, fails under CI=true) and /bin/busybox. Everything
//! a child changes is its own (credentials, limits, keyring); the console case mounts only in a
//! private mount namespace of the child.
use pier_runtime::process::{self, Exec};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::process::{Command, Output, Stdio};

const CHILD_ENV: &str = "PIER_TEST_PROCESS_CHILD";
const BUSYBOX: &str = "/bin/busybox";

fn have_root() -> bool {
    if nix::unistd::geteuid().is_root() && std::path::Path::new(BUSYBOX).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: these tests need root and /bin/busybox"
    );
    eprintln!("skipped: needs root and {BUSYBOX}");
    false
}

/// The re-executed child: applies the case's `process` and execs it. Not a test of its own.
#[test]
#[ignore = "child half of the other tests, run by them through re-execution"]
fn child() {
    let Ok(text) = std::env::var(CHILD_ENV) else {
        return;
    };
    let case: Value = serde_json::from_str(&text).unwrap();
    let mut keep = Vec::new();
    while keep.len() < case["open_fds"].as_u64().unwrap_or(0) as usize {
        keep.push(open_inheritable("/dev/null"));
    }
    if let Some(socket) = case["console"].as_str() {
        console_in_private_mount_ns(socket);
    }
    let mut raw = case["process"].clone();
    process::normalize_json(&mut raw);
    let spec: oci_spec::runtime::Process = serde_json::from_value(raw).unwrap();
    let personality = serde_json::from_value(case["personality"].clone()).ok();
    let seccomp = (!case["seccomp"].is_null()).then(|| {
        pier_seccomp::compile(&pier_seccomp::from_json(&case["seccomp"]).unwrap()).unwrap()
    });
    let exec = Exec {
        process: &spec,
        personality: personality.as_ref(),
        seccomp: seccomp.as_ref(),
        preserve_fds: case["preserve_fds"].as_u64().unwrap_or(0) as u32,
        listen_fds: case["listen_fds"].as_u64().unwrap_or(0) as u32,
        no_new_keyring: false,
    };
    let err = process::exec(&exec, &mut |_| Err("no listener expected".into()));
    eprintln!("PIER-ERROR: {err}");
    std::process::exit(1);
}

/// Opens `path` without O_CLOEXEC, as fds handed to the runtime by its caller are.
fn open_inheritable(path: &str) -> OwnedFd {
    nix::fcntl::open(
        path,
        nix::fcntl::OFlag::O_RDONLY,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap()
}

fn console_in_private_mount_ns(socket: &str) {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).unwrap();
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .unwrap();
    let fd = process::console::connect(std::path::Path::new(socket)).unwrap();
    let size: oci_spec::runtime::Box =
        serde_json::from_value(json!({"height": 33, "width": 111})).unwrap();
    process::console::setup_in_container_sized(fd, Some(&size)).unwrap();
}

fn spawn_child(case: &Value) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "--quiet",
        ])
        .env(CHILD_ENV, case.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn run_child(case: Value) -> Output {
    spawn_child(&case).wait_with_output().unwrap()
}

/// `KEY=value` lines of the child's stdout.
fn report(out: &Output) -> HashMap<String, String> {
    let text = String::from_utf8_lossy(&out.stdout);
    let map: HashMap<_, _> = text
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    assert!(map.contains_key("END"), "child did not finish: {out:?}");
    map
}

fn busybox_script(script: &str) -> Value {
    json!(["busybox", "sh", "-c", script])
}

const STATUS_SCRIPT: &str = r#"
for k in Uid Gid Groups CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs; do
  echo "$k=$(grep "^$k:" /proc/$$/status | cut -d: -f2 | tr -s '\t ' ' ')"
done
echo "NOFILE=$(ulimit -n)"; echo "NOFILE_HARD=$(ulimit -Hn)"; echo "UMASK=$(umask)"; echo "PWD=$(pwd)"
echo "FOO=$FOO"; echo "OOM=$(cat /proc/$$/oom_score_adj)"; echo "PERSONALITY=$(cat /proc/$$/personality)"
echo "NICE_POLICY=$(cut -d' ' -f19,41 /proc/$$/stat)"; echo "IONICE=$(ionice -p $$)"
echo END=1
"#;

#[test]
fn non_root_user_with_ambient_capability_and_limits() {
    if !have_root() {
        return;
    }
    let out = run_child(json!({
        "personality": {"domain": "LINUX32"},
        "process": {
            "args": busybox_script(STATUS_SCRIPT),
            "env": ["PATH=/nonexistent:/bin", "FOO=bar baz"],
            "cwd": "/tmp",
            "user": {"uid": 1000, "gid": 1001, "additionalGids": [20, 10], "umask": 23},
            "capabilities": {
                "bounding": ["CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_PIER_TEST_UNKNOWN"],
                "effective": ["CAP_NET_BIND_SERVICE"], "permitted": ["CAP_NET_BIND_SERVICE"],
                "inheritable": ["CAP_NET_BIND_SERVICE"], "ambient": ["CAP_NET_BIND_SERVICE"]
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "soft": 100, "hard": 200}],
            "noNewPrivileges": true,
            "oomScoreAdj": 500,
            "scheduler": {"policy": "SCHED_BATCH", "nice": 5},
            "ioPriority": {"class": "IOPRIO_CLASS_IDLE", "priority": 0}
        }
    }));
    let r = report(&out);
    assert_eq!(r["Uid"], "1000 1000 1000 1000");
    assert_eq!(r["Gid"], "1001 1001 1001 1001");
    assert_eq!(r["Groups"], "10 20");
    assert_eq!(r["CapBnd"], "0000000000000420");
    assert_eq!(r["CapAmb"], "0000000000000400");
    assert_eq!(r["CapEff"], "0000000000000400");
    assert_eq!(r["CapPrm"], "0000000000000400");
    assert_eq!(r["CapInh"], "0000000000000400");
    assert_eq!(r["NoNewPrivs"], "1");
    assert_eq!(
        (r["NOFILE"].as_str(), r["NOFILE_HARD"].as_str()),
        ("100", "200")
    );
    assert_eq!(r["UMASK"], "0027");
    assert_eq!(r["PWD"], "/tmp");
    assert_eq!(r["FOO"], "bar baz");
    assert_eq!(r["OOM"], "500");
    assert_eq!(r["PERSONALITY"], "00000008");
    assert_eq!(r["NICE_POLICY"], "5 3");
    assert_eq!(r["IONICE"], "idle");
}

#[test]
fn root_without_capabilities_in_spec_keeps_them() {
    if !have_root() {
        return;
    }
    let out = run_child(json!({"process": {
        "args": busybox_script(STATUS_SCRIPT), "env": ["PATH=/bin"], "cwd": "/",
        "user": {"uid": 0, "gid": 0}
    }}));
    let r = report(&out);
    let own = std::fs::read_to_string("/proc/self/status").unwrap();
    let own_bnd = own
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .unwrap()
        .trim();
    assert_eq!(r["CapBnd"], own_bnd);
    assert_eq!(r["NoNewPrivs"], "0");
    assert_eq!(r["UMASK"], "0022");
    assert_eq!(r["Groups"], "");
}

#[test]
fn preserved_and_listen_fds_stay_open_and_others_close() {
    if !have_root() {
        return;
    }
    let script = r#"for f in 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$f ] && echo "FD$f=open"; done
echo "LISTEN=$LISTEN_FDS $LISTEN_PID $$"; echo END=1"#;
    let out = run_child(json!({
        "open_fds": 6, "preserve_fds": 1, "listen_fds": 1,
        "process": {"args": busybox_script(script), "env": ["PATH=/bin", "LISTEN_FDS=7"], "cwd": "/",
                    "user": {"uid": 0, "gid": 0}}
    }));
    let r = report(&out);
    assert!(r.contains_key("FD3") && r.contains_key("FD4"), "{r:?}");
    assert!(!r.contains_key("FD5") && !r.contains_key("FD6"), "{r:?}");
    let listen: Vec<&str> = r["LISTEN"].split(' ').collect();
    assert_eq!(listen[0], "1");
    assert_eq!(listen[1], listen[2], "LISTEN_PID is the exec'd process");
}

fn child_error(process: Value) -> String {
    let out = run_child(json!({ "process": process }));
    assert!(!out.status.success(), "{out:?}");
    error_line(&out)
}

fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("PIER-ERROR: "))
        .map(str::to_string)
        .unwrap_or(stderr)
}

#[test]
fn raising_the_hard_rlimit_names_it_and_both_values() {
    if !have_root() {
        return;
    }
    let (_, hard) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
    let requested = hard + 1;
    let out = run_child(json!({"process": {
        "args": ["busybox", "true"], "env": ["PATH=/bin"], "cwd": "/", "user": {"uid": 0, "gid": 0},
        "rlimits": [{"type": "RLIMIT_NOFILE", "soft": requested, "hard": requested}]
    }}));
    if out.status.success() {
        eprintln!(
            "skipped: this host lets root raise hard rlimits (CAP_SYS_RESOURCE), nothing to refuse"
        );
        return;
    }
    let err = error_line(&out);
    assert!(err.contains("RLIMIT_NOFILE"), "{err}");
    assert!(
        err.contains(&requested.to_string()) && err.contains(&hard.to_string()),
        "{err}"
    );
}

#[test]
fn missing_program_is_reported_like_runc() {
    if !have_root() {
        return;
    }
    let err = child_error(json!({
        "args": ["pier-test-no-such-program"], "env": ["PATH=/bin:/usr/bin"], "cwd": "/",
        "user": {"uid": 0, "gid": 0}
    }));
    assert_eq!(
        err,
        "exec: \"pier-test-no-such-program\": executable file not found in $PATH"
    );
    let err = child_error(json!({
        "args": ["/pier-test-no-such-program"], "cwd": "/", "user": {"uid": 0, "gid": 0}
    }));
    assert_eq!(
        err,
        "exec /pier-test-no-such-program: no such file or directory"
    );
}

#[test]
fn bad_cwd_username_and_lsm_labels_are_refused() {
    if !have_root() {
        return;
    }
    let base = json!({"args": ["busybox", "true"], "env": ["PATH=/bin"], "cwd": "/", "user": {"uid": 0, "gid": 0}});
    let with = |key: &str, value: Value| {
        let mut p = base.clone();
        p[key] = value;
        p
    };
    let err = child_error(with("cwd", json!("/pier-test-missing-dir")));
    assert!(err.contains("/pier-test-missing-dir"), "{err}");
    let err = child_error(with(
        "user",
        json!({"uid": 0, "gid": 0, "username": "daemon"}),
    ));
    assert!(
        err.contains("username \"daemon\" is not supported"),
        "{err}"
    );
    let apparmor_on = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.trim() == "Y");
    if !apparmor_on {
        let err = child_error(with("apparmorProfile", json!("pier-test-profile")));
        assert!(err.contains("AppArmor is not enabled"), "{err}");
    }
    if !std::path::Path::new("/sys/fs/selinux/enforce").exists() {
        let err = child_error(with(
            "selinuxLabel",
            json!("system_u:system_r:container_t:s0"),
        ));
        assert!(err.contains("SELinux is not enabled"), "{err}");
    }
}

#[test]
fn console_socket_receives_the_pty_master() {
    if !have_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap();
    let path = dir.path().join("console.sock");
    let listener = UnixListener::bind(&path).unwrap();
    let script = "echo TTY=$(tty); echo CONSOLE=$(stat -c %t:%T /dev/console) PTS=$(stat -c %t:%T $(tty)); echo SIZE=$(stty size); echo END=1";
    let mut child = spawn_child(&json!({
        "console": path.to_str().unwrap(),
        "process": {"args": busybox_script(script), "env": ["PATH=/bin"], "cwd": "/", "user": {"uid": 0, "gid": 0}}
    }));
    let ready = {
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::try_from(30_000).unwrap()).unwrap()
    };
    if ready == 0 {
        child.kill().unwrap();
        panic!(
            "child never connected: {:?}",
            child.wait_with_output().unwrap()
        );
    }
    let (conn, _) = listener.accept().unwrap();
    let mut name = [0u8; 64];
    let (len, master) = pier_sys::process::recv_fd(conn.as_fd(), &mut name).unwrap();
    assert_eq!(&name[..len], b"/dev/ptmx");
    let mut text = Vec::new();
    let mut master = std::fs::File::from(master.expect("an fd with the message"));
    let _ = master.read_to_end(&mut text);
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&text);
    assert!(out.status.success(), "{out:?} {text}");
    let r: HashMap<_, _> = text.lines().filter_map(|l| l.split_once('=')).collect();
    assert!(r["TTY"].trim().starts_with("/dev/pts/"), "{text}");
    assert_eq!(r["SIZE"].trim(), "33 111");
    let console = r["CONSOLE"].split_whitespace().next().unwrap();
    assert!(
        r["CONSOLE"].contains(&format!("PTS={console}")),
        "/dev/console is the pty slave: {text}"
    );
}

/// A profile allowing everything but the given syscalls, which fail with ENOSYS.
fn deny_profile(names: &[&str]) -> Value {
    json!({"defaultAction": "SCMP_ACT_ALLOW",
           "syscalls": [{"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOSYS}]})
}

#[test]
fn seccomp_without_nnp_is_installed_before_privileges_are_dropped() {
    if !have_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap();
    let target = dir.path().join("sub");
    let script = format!(
        r#"echo "MKDIR=$(mkdir {} 2>&1)"; echo "Seccomp=$(grep '^Seccomp:' /proc/$$/status | cut -f2)"
echo "NoNewPrivs=$(grep '^NoNewPrivs:' /proc/$$/status | cut -f2)"; echo END=1"#,
        target.display()
    );
    let out = run_child(json!({
        "seccomp": deny_profile(&["mkdir", "mkdirat"]),
        "process": {"args": busybox_script(&script), "env": ["PATH=/bin"], "cwd": "/",
                    "user": {"uid": 1000, "gid": 1000}, "capabilities": {}, "noNewPrivileges": false}
    }));
    let r = report(&out);
    assert_eq!(r["Seccomp"], "2", "{out:?}");
    assert_eq!(r["NoNewPrivs"], "0");
    assert!(r["MKDIR"].contains("Function not implemented"), "{r:?}");
    assert!(!target.exists());
}

#[test]
fn seccomp_with_nnp_is_installed_last() {
    if !have_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap();
    let target = dir.path().join("sub");
    let script = format!(
        r#"echo "Seccomp=$(grep '^Seccomp:' /proc/$$/status | cut -f2)"; echo "MKDIR=$(mkdir {} 2>&1)"; echo END=1"#,
        target.display()
    );
    let denied = [
        "capset",
        "setresuid",
        "setresgid",
        "setgroups",
        "chdir",
        "prctl",
        "mkdir",
        "mkdirat",
    ];
    let out = run_child(json!({
        "seccomp": deny_profile(&denied),
        "process": {"args": busybox_script(&script), "env": ["PATH=/bin"], "cwd": "/tmp",
                    "user": {"uid": 1000, "gid": 1000}, "noNewPrivileges": true,
                    "capabilities": {"bounding": ["CAP_KILL"], "permitted": ["CAP_KILL"]}}
    }));
    let r = report(&out);
    assert_eq!(r["Seccomp"], "2", "{out:?}");
    assert!(
        r["MKDIR"].contains("Function not implemented"),
        "the filter is active: {r:?}"
    );
}
