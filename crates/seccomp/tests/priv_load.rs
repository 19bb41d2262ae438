//! Loads compiled filters into the kernel, in child processes.
//!
//! Each case re-executes this test binary with PIER_SECCOMP_CHILD=<case>, running only
//! `child_entry`, which sets no_new_privs, installs a filter on its own thread and checks from
//! that thread that allowed calls work and denied ones fail with the errno the profile asks
//! for; its exit code reports the result. No fork from the multi-threaded harness. The NOTIFY
//! case also plays the agent: it listens on a socket in a temp dir, receives the listener fd
//! and the state from the child, and answers the child's notified mkdir with EXDEV.
//! Privileges: none (no_new_privs makes seccomp(2) unprivileged). Leaves nothing behind.
use pier_seccomp::{compile, from_json, send_to_listener};
use pier_sys::process::recv_fd;
use pier_sys::seccomp::{notif_recv, notif_respond};
use std::os::fd::AsFd;
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "PIER_SECCOMP_CHILD";
const DIR_ENV: &str = "PIER_SECCOMP_DIR";
const STATE: &[u8] =
    br#"{"ociVersion":"1.0.2","fds":["seccompFd"],"pid":1,"metadata":"m","state":{}}"#;

fn spawn_child(case: &str, dir: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, case)
        .env(DIR_ENV, dir)
        .stdout(Stdio::null())
        .spawn()
        .unwrap()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap()
}

fn expect_success(case: &str) {
    let dir = temp_dir();
    let status = spawn_child(case, dir.path()).wait().unwrap();
    assert!(status.success(), "child case {case} failed: {status}");
}

#[test]
fn allowed_calls_work_and_denied_ones_get_their_errno() {
    expect_success("errno");
}

#[test]
fn docker_default_profile_loads_and_denies() {
    expect_success("docker");
}

#[test]
fn kernel_accepts_programs_with_far_jumps() {
    expect_success("far");
}

#[test]
fn notify_delivers_to_the_listener() {
    let dir = temp_dir();
    let sock = dir.path().join("agent.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    listener.set_nonblocking(true).unwrap();
    let mut child = spawn_child("notify", dir.path());
    let deadline = Instant::now() + Duration::from_secs(30);
    let conn = loop {
        match listener.accept() {
            Ok((conn, _)) => break conn,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "child exited before connecting"
                );
                assert!(Instant::now() < deadline, "child never connected");
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).unwrap();
    let mut buf = [0u8; 512];
    let (len, fd) = recv_fd(conn.as_fd(), &mut buf).unwrap();
    let fd = fd.expect("the listener message carries the listener fd");
    assert_eq!(&buf[..len], STATE);
    let notif = notif_recv(fd.as_fd()).unwrap();
    assert!(
        notif.nr == libc::SYS_mkdir as i32 || notif.nr == libc::SYS_mkdirat as i32,
        "nr {}",
        notif.nr
    );
    notif_respond(fd.as_fd(), notif.id, 0, -libc::EXDEV).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "child failed: {status}");
}

/// Runs in the re-executed child only.
#[test]
fn child_entry() {
    let Ok(case) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var(DIR_ENV).unwrap());
    nix::sys::prctl::set_no_new_privs().unwrap();
    let result = match case.as_str() {
        "errno" => child_errno(&dir),
        "docker" => child_docker(),
        "notify" => child_notify(&dir),
        "far" => child_far(),
        other => Err(format!("unknown case {other}")),
    };
    if let Err(e) = &result {
        eprintln!("child {case}: {e}");
    }
    std::process::exit(i32::from(result.is_err()));
}

fn install(json: serde_json::Value) -> Result<Option<std::os::fd::OwnedFd>, String> {
    let program =
        compile(&from_json(&json).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    program.install().map_err(|e| e.to_string())
}

fn errno_of<T>(r: Result<T, std::io::Error>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn child_errno(dir: &Path) -> Result<(), String> {
    install(
        serde_json::json!({"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
        {"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":42},
        {"names":["kill"],"action":"SCMP_ACT_ERRNO","errnoRet":55,"args":[{"index":1,"value":0,"op":"SCMP_CMP_EQ"}]}]}),
    )?;
    std::env::current_dir().map_err(|e| format!("getcwd denied: {e}"))?;
    match errno_of(std::fs::create_dir(dir.join("x"))) {
        Some(42) => {}
        other => return Err(format!("mkdir: expected errno 42, got {other:?}")),
    }
    let me = nix::unistd::getpid();
    match nix::sys::signal::kill(me, None) {
        Err(e) if e as i32 == 55 => {}
        other => return Err(format!("kill(pid, 0): expected errno 55, got {other:?}")),
    }
    nix::sys::signal::kill(me, nix::sys::signal::Signal::SIGCHLD)
        .map_err(|e| format!("kill(pid, SIGCHLD): {e}"))?;
    nix::unistd::getppid();
    Ok(())
}

fn child_docker() -> Result<(), String> {
    let json: serde_json::Value =
        serde_json::from_str(include_str!("../profiles/docker-default.json"))
            .map_err(|e| e.to_string())?;
    install(json)?;
    std::env::current_dir().map_err(|e| format!("getcwd denied: {e}"))?;
    match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUTS) {
        Err(nix::errno::Errno::EPERM) => {}
        other => return Err(format!("unshare: expected EPERM, got {other:?}")),
    }
    let none: Option<&str> = None;
    match nix::mount::mount(
        none,
        "/nonexistent",
        none,
        nix::mount::MsFlags::MS_BIND,
        none,
    ) {
        Err(nix::errno::Errno::EPERM) => {}
        other => return Err(format!("mount: expected EPERM, got {other:?}")),
    }
    Ok(())
}

fn child_notify(dir: &Path) -> Result<(), String> {
    let sock = dir.join("agent.sock");
    let listener = install(
        serde_json::json!({"defaultAction":"SCMP_ACT_ALLOW","listenerPath": sock,
        "syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_NOTIFY"}]}),
    )?
    .ok_or("no listener fd returned")?;
    send_to_listener(&sock, listener.as_fd(), STATE).map_err(|e| e.to_string())?;
    match errno_of(std::fs::create_dir(dir.join("notified"))) {
        Some(libc::EXDEV) => Ok(()),
        other => Err(format!(
            "notified mkdir: expected EXDEV from the agent, got {other:?}"
        )),
    }
}

/// A profile big enough for trampolines (one conditional rule per known x86_64 syscall but
/// the few the child needs); the kernel must accept it and `getcwd` still works.
fn child_far() -> Result<(), String> {
    let keep = [
        "getcwd",
        "exit_group",
        "exit",
        "write",
        "sigaltstack",
        "munmap",
        "rt_sigprocmask",
        "futex",
    ];
    let rules: Vec<serde_json::Value> = pier_seccomp::known_syscalls()
        .filter(|n| !keep.contains(n))
        .enumerate()
        .map(|(i, n)| {
            serde_json::json!({"names": [n], "action": "SCMP_ACT_ERRNO", "errnoRet": i % 4000 + 1,
            "args": [{"index": i % 6, "value": u64::MAX - i as u64, "op": "SCMP_CMP_EQ"}]})
        })
        .collect();
    let program = compile(
        &from_json(&serde_json::json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": rules}))
            .map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let far = program
        .instructions()
        .iter()
        .any(|i| i.code == pier_seccomp::bpf::JMP_JA && i.k > 255);
    if !far {
        return Err("profile produced no far jump".into());
    }
    program.install().map_err(|e| e.to_string())?;
    std::env::current_dir().map_err(|e| format!("getcwd denied: {e}"))?;
    Ok(())
}
