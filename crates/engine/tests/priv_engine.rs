//! The engine's lifecycle at the library level: run (foreground and detached), ps, inspect,
//! logs, stop, kill, rm, wait, gc, and crash recovery at every crash point.
//!
//! Runs without the libtest harness (`harness = false`): `run -d` forks a monitor, which must
//! happen in a single-threaded process. The process first moves into its own network namespace
//! (`pier-test-engine-<pid>`, removed by a guard), so the bridge, the nft table and the veths
//! live there; state is in a tempdir; subnets come from 198.18.0.0/15. Crash points that kill
//! the calling process run in a child: this binary re-executed with `child-run`.
//! Needs root: prints why and passes without it, except with CI=true, where it fails.
use std::fs::{self, File};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use pier_engine::config::{RunArgs, RunConfig};
use pier_engine::engine::{Engine, EngineError, ExecArgs, RunOutcome};
use pier_engine::store::Store;
use pier_engine::Paths;

/// A named test.
type Case = (&'static str, fn(&Paths));

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child-run") {
        return child_run(&args[2], &args[3..]);
    }
    if !nix::unistd::geteuid().is_root() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true: needs root"
        );
        println!("priv_engine: skipped (needs root)");
        return;
    }
    let name = format!("pier-test-engine-{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &name]).status();
    assert!(ok.is_ok_and(|s| s.success()), "ip netns add {name}");
    let _netns = Netns(name.clone());
    let file = File::open(format!("/run/netns/{name}")).expect("open netns");
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    let lo = Command::new("ip")
        .args(["link", "set", "lo", "up"])
        .status();
    assert!(lo.is_ok_and(|s| s.success()), "ip link set lo up");
    std::env::set_var("PIER_SUBNET_POOL", "198.18.0.0/15:24");
    let state = tempfile::tempdir().expect("tempdir");
    let paths = Paths {
        state_dir: state.path().to_owned(),
    };
    let tests: &[Case] = &[
        ("foreground_none_exit_code", foreground_none_exit_code),
        ("detached_bridge_logs_stop_rm", detached_bridge_logs_stop_rm),
        ("kill_wait_and_auto_rm", kill_wait_and_auto_rm),
        (
            "duplicate_name_and_running_rm",
            duplicate_name_and_running_rm,
        ),
        ("dead_monitor_is_collected", dead_monitor_is_collected),
        (
            "directory_root_survives_unchanged",
            directory_root_survives_unchanged,
        ),
        ("logs_follow_until_exit", logs_follow_until_exit),
        ("exec_env_user_workdir", exec_env_user_workdir),
        ("detached_tty_is_logged", detached_tty_is_logged),
        (
            "publish_nat_reaches_container",
            publish_nat_reaches_container,
        ),
        ("crash_points_leave_nothing", crash_points_leave_nothing),
    ];
    let only = args.get(1).filter(|a| !a.starts_with('-'));
    for (name, test) in tests {
        if only.is_some_and(|o| !name.contains(o.as_str())) {
            continue;
        }
        print!("test {name} ... ");
        std::io::Write::flush(&mut std::io::stdout()).expect("flush");
        test(&paths);
        assert_clean(&paths);
        println!("ok");
    }
}

fn config(detach: bool, network: &str, command: &[&str]) -> RunConfig {
    let args = RunArgs {
        detach,
        network: Some(network.into()),
        rootfs: "host".into(),
        command: command.iter().map(|s| s.to_string()).collect(),
        ..RunArgs::default()
    };
    RunConfig::parse(&args).expect("config")
}

fn detached(engine: &Engine, config: RunConfig) -> String {
    match engine.run(config).expect("run -d") {
        RunOutcome::Detached { id } => id,
        other => panic!("expected a detached container, got {other:?}"),
    }
}

fn foreground_none_exit_code(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let code = engine.run(config(false, "none", &["sh", "-c", "exit 3"]));
    assert_eq!(code.expect("run"), RunOutcome::Exited { code: 3 });
    let ps = engine.ps(true).expect("ps -a");
    assert_eq!(ps.len(), 1);
    assert_eq!(ps[0].status, "exited (3)");
    assert!(engine.ps(false).expect("ps").is_empty());
    engine.rm(&ps[0].id, false).expect("rm");
}

fn detached_bridge_logs_stop_rm(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let mut cfg = config(
        true,
        "bridge",
        &["sh", "-c", "echo hello; echo oops >&2; exec sleep 100"],
    );
    cfg.name = Some("web".into());
    let id = detached(&engine, cfg);
    let ps = engine.ps(false).expect("ps");
    assert_eq!(ps.len(), 1);
    assert_eq!(
        (ps[0].name.as_str(), ps[0].status.as_str()),
        ("web", "running")
    );
    let inspect = engine.inspect("web").expect("inspect");
    let address = inspect["Addresses"][0]
        .as_str()
        .expect("an address")
        .to_owned();
    assert!(address.starts_with("198.1"), "{address}");
    assert!(engine.kill("web", 0).is_ok());
    let stopped = engine
        .stop(&id[..10], Duration::from_millis(100))
        .expect("stop");
    assert_eq!(stopped, id);
    assert_eq!(engine.wait("web").expect("wait"), 137);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine
        .logs("web", false, None, &mut out, &mut err)
        .expect("logs");
    assert_eq!(
        (out.as_slice(), err.as_slice()),
        (&b"hello\n"[..], &b"oops\n"[..])
    );
    assert!(matches!(
        engine.kill("web", 9),
        Err(EngineError::NotRunning(_))
    ));
    engine.rm("web", false).expect("rm");
    assert!(matches!(
        engine.inspect("web"),
        Err(EngineError::NoSuchContainer(_))
    ));
}

fn kill_wait_and_auto_rm(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let id = detached(&engine, config(true, "none", &["sleep", "100"]));
    engine.kill(&id, libc::SIGKILL).expect("kill");
    assert_eq!(engine.wait(&id).expect("wait"), 137);
    engine.rm(&id, false).expect("rm");
    let mut cfg = config(true, "bridge", &["true"]);
    cfg.rm = true;
    let id = detached(&engine, cfg);
    // `wait` returns the code, or finds the record already removed.
    match engine.wait(&id) {
        Ok(code) => assert_eq!(code, 0),
        Err(e) => assert!(matches!(e, EngineError::NoSuchContainer(_)), "{e}"),
    }
    await_gone(&engine, &id);
}

/// --rm: the monitor removes the record right after `wait` saw the exit.
fn await_gone(engine: &Engine, id: &str) {
    match engine.rm(id, true) {
        Ok(_) | Err(EngineError::NoSuchContainer(_)) => {}
        Err(e) => panic!("rm -f {id}: {e}"),
    }
}

fn duplicate_name_and_running_rm(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let mut cfg = config(true, "none", &["sleep", "100"]);
    cfg.name = Some("dup".into());
    let id = detached(&engine, cfg.clone());
    let err = engine.run(cfg).expect_err("duplicate name");
    assert!(err.to_string().contains(&id), "{err}");
    let err = engine
        .rm("dup", false)
        .expect_err("rm of a running container");
    assert!(matches!(err, EngineError::Running(_)), "{err}");
    engine.rm("dup", true).expect("rm -f");
    assert!(engine.ps(true).expect("ps").is_empty());
}

fn dead_monitor_is_collected(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let id = detached(&engine, config(true, "bridge", &["sleep", "100"]));
    let store = Store::open(paths).expect("store");
    let record = store.load(&id).expect("record");
    let monitor = record.responsible.expect("monitor").pid;
    let init = record.init.expect("init");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(monitor),
        nix::sys::signal::SIGKILL,
    )
    .expect("kill the monitor");
    let pidfd = pier_sys::pidfd::open(monitor).ok();
    if let Some(fd) = pidfd {
        pier_sys::pidfd::wait_exited(fd).expect("monitor gone");
    }
    let report = engine.gc().expect("gc");
    assert!(report.removed.iter().any(|r| r.contains(&id)), "{report:?}");
    assert!(!init.alive(), "the container's init survived its monitor");
    assert_eq!(engine.ps(true).expect("ps")[0].status, "exited");
    engine.rm(&id, false).expect("rm");
}

/// A directory root is an overlay's lower layer: the container writes to its own upper layer,
/// and a crashed monitor's overlay is unmounted by `gc`.
fn directory_root_survives_unchanged(paths: &Paths) {
    let root = tempfile::tempdir().expect("root dir");
    let bin = root.path().join("bin");
    fs::create_dir(&bin).expect("bin");
    fs::copy("/usr/bin/busybox", bin.join("busybox")).expect("static busybox");
    for tool in ["sh", "sleep", "echo"] {
        std::os::unix::fs::symlink("busybox", bin.join(tool)).expect("symlink");
    }
    let engine = Engine::open(paths.clone()).expect("open");
    let args = RunArgs {
        detach: true,
        network: Some("none".into()),
        rootfs: root.path().display().to_string(),
        command: ["/bin/sh", "-c", "echo x > /written; exec sleep 100"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..RunArgs::default()
    };
    let id = detached(&engine, RunConfig::parse(&args).expect("config"));
    let state = paths.state_dir.display().to_string();
    let mounted = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    assert!(mounted.contains(&state), "no overlay under {state}");
    let written = ExecArgs {
        command: ["/bin/sh", "-c", "while ! test -f /written; do :; done"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..ExecArgs::default()
    };
    assert_eq!(engine.exec(&id, &written).expect("exec"), 0);
    let monitor = Store::open(paths)
        .expect("store")
        .load(&id)
        .expect("record");
    let monitor = monitor.responsible.expect("monitor");
    let pidfd = monitor.pidfd().expect("monitor pidfd");
    pier_sys::pidfd::send_signal(&pidfd, libc::SIGKILL).expect("kill the monitor");
    pier_sys::pidfd::wait_exited(&pidfd).expect("monitor gone");
    engine.gc().expect("gc");
    assert!(
        !root.path().join("written").exists(),
        "the container changed its root dir"
    );
    engine.rm(&id, false).expect("rm");
}

fn logs_follow_until_exit(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let mut cfg = config(
        true,
        "none",
        &["sh", "-c", "echo a; read x < /dev/null; echo b; exit 4"],
    );
    cfg.rm = false;
    let id = detached(&engine, cfg);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine
        .logs(&id, true, None, &mut out, &mut err)
        .expect("logs -f");
    assert_eq!(String::from_utf8_lossy(&out), "a\nb\n");
    assert_eq!(engine.wait(&id).expect("wait"), 4);
    let mut last = Vec::new();
    engine
        .logs(&id, false, Some(1), &mut last, &mut err)
        .expect("logs --tail 1");
    assert_eq!(String::from_utf8_lossy(&last), "b\n");
    engine.rm(&id, false).expect("rm");
}

fn detached_tty_is_logged(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let mut cfg = config(true, "none", &["sh", "-c", "tty; echo hi; exit 2"]);
    cfg.tty = true;
    let id = detached(&engine, cfg);
    assert_eq!(engine.wait(&id).expect("wait"), 2);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine
        .logs(&id, false, None, &mut out, &mut err)
        .expect("logs");
    // The pty's line discipline turns each newline into CR LF.
    assert_eq!(String::from_utf8_lossy(&out), "/dev/pts/0\r\nhi\r\n");
    engine.rm(&id, false).expect("rm");
}

fn exec_env_user_workdir(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let id = detached(&engine, config(true, "none", &["sleep", "100"]));
    let check = r#"test "$FOO" = bar && test "$(id -u)" = 65534 && test "$PWD" = /tmp"#;
    let args = ExecArgs {
        env: vec!["FOO=bar".into()],
        user: Some("65534".into()),
        workdir: Some("/tmp".into()),
        command: vec!["sh".into(), "-c".into(), format!("{check} && exit 7")],
        ..ExecArgs::default()
    };
    assert_eq!(engine.exec(&id, &args).expect("exec"), 7);
    let tty = ExecArgs {
        tty: true,
        command: vec!["sh".into(), "-c".into(), "test -t 1 && exit 9".into()],
        ..ExecArgs::default()
    };
    assert_eq!(engine.exec(&id, &tty).expect("exec -t"), 9);
    let no_stdin = ExecArgs {
        command: vec![
            "sh".into(),
            "-c".into(),
            "read x; test -z \"$x\" && exit 6".into(),
        ],
        ..ExecArgs::default()
    };
    assert_eq!(engine.exec(&id, &no_stdin).expect("exec without -i"), 6);
    engine.rm(&id, true).expect("rm -f");
    let err = engine
        .exec(&id, &args)
        .expect_err("exec in a removed container");
    assert!(matches!(err, EngineError::NoSuchContainer(_)), "{err}");
}

fn publish_nat_reaches_container(paths: &Paths) {
    let engine = Engine::open(paths.clone()).expect("open");
    let args = RunArgs {
        detach: true,
        publish: vec!["80".into()],
        publish_mode: Some("nat".into()),
        rootfs: "host".into(),
        command: [
            "sh",
            "-c",
            "while :; do busybox nc -l -p 80 -e hostname; done",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
        ..RunArgs::default()
    };
    let id = detached(&engine, RunConfig::parse(&args).expect("config"));
    let ports = engine.port(&id).expect("port");
    assert_eq!(ports.len(), 1, "{ports:?}");
    let host_port: u16 = ports[0].rsplit(':').next().unwrap().parse().expect("port");
    let inspect = engine.inspect(&id).expect("inspect");
    let gateway = inspect["Record"]["attachments"][0]["gateways"][0]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        dnat_elements().contains(&host_port.to_string()),
        "{}",
        dnat_elements()
    );
    let reply = fetch(&format!("{gateway}:{host_port}"));
    assert_eq!(reply.trim(), &id[..12]);
    engine.rm(&id, true).expect("rm -f");
    let refused = std::net::TcpStream::connect(format!("{gateway}:{host_port}"));
    assert!(
        refused.is_err(),
        "the published port outlived its container"
    );
}

/// Reads what the server at `addr` sends; retries the connect while it is not listening yet.
fn fetch(addr: &str) -> String {
    use std::io::Read;
    for _ in 0..300 {
        let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let mut text = String::new();
        if stream.read_to_string(&mut text).is_ok() && !text.is_empty() {
            return text;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("nothing answered at {addr}");
}

/// Each crash point in a child process (`run -d`, then `stop` and `rm`), then `gc`.
fn crash_points_leave_nothing(paths: &Paths) {
    for point in pier_engine::crash::POINTS {
        print!("{point} ");
        std::io::Write::flush(&mut std::io::stdout()).expect("flush");
        let verb = point.split(':').next().expect("verb");
        Command::new(std::env::current_exe().expect("exe"))
            .args(["child-run", &paths.state_dir.display().to_string(), verb])
            .env(pier_engine::crash::ENV, point)
            .status()
            .expect("child");
        let engine = Engine::open(paths.clone()).expect("open");
        if *point == "run:front-forked" {
            await_running(&engine);
        }
        for summary in engine.ps(true).expect("ps") {
            match engine.rm(&summary.id, true) {
                Ok(_) | Err(EngineError::NoSuchContainer(_)) => {}
                Err(e) => panic!("{point}: rm -f after the crash: {e}"),
            }
        }
        engine.gc().expect("gc");
        assert!(engine.ps(true).expect("ps").is_empty(), "{point}");
        assert_clean_at(paths, point);
    }
}

/// The front crashed but its monitor goes on starting the container: wait until it runs.
fn await_running(engine: &Engine) {
    for _ in 0..500 {
        let ps = engine.ps(false).expect("ps");
        if !ps.is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the monitor never started the container after its front crashed");
}

/// In the child: a detached run, then for stop and rm points the verb that crashes (the
/// crash variable only matches the points of its own verb).
fn child_run(state: &str, rest: &[String]) {
    let paths = Paths {
        state_dir: state.into(),
    };
    let engine = Engine::open(paths).expect("open");
    let args = RunArgs {
        detach: true,
        publish: vec!["80".into()],
        publish_mode: Some("nat".into()),
        rootfs: "host".into(),
        command: vec!["sleep".into(), "100".into()],
        ..RunArgs::default()
    };
    let Ok(RunOutcome::Detached { id }) = engine.run(RunConfig::parse(&args).expect("config"))
    else {
        return;
    };
    match rest.first().map(String::as_str) {
        Some("stop") => drop(engine.stop(&id, Duration::from_millis(50))),
        Some("rm") => drop(engine.rm(&id, true)),
        _ => {}
    }
}

/// `ip -o link` once no veth is left, or after 5 s. A container's veth pair goes with its
/// network namespace, which the kernel frees asynchronously (a few ms after the last process).
fn veths_gone() -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let out = Command::new("ip")
            .args(["-o", "link"])
            .output()
            .expect("ip link");
        let links = String::from_utf8_lossy(&out.stdout).into_owned();
        if !links.contains("veth") || std::time::Instant::now() > deadline {
            return links;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Nothing of any container survives in the state dir, the netns, the mounts or cgroups.
fn assert_clean(paths: &Paths) {
    assert_clean_at(paths, "after the test");
}

fn assert_clean_at(paths: &Paths, when: &str) {
    let entries = |p: &Path| fs::read_dir(p).map(|d| d.count()).unwrap_or(0);
    assert_eq!(
        entries(&paths.containers()),
        0,
        "{when}: container directories"
    );
    let runtime: Vec<_> = fs::read_dir(paths.runtime_root())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n != "seccomp-cache")
        .collect();
    assert!(runtime.is_empty(), "{when}: runtime state {runtime:?}");
    // The runtime's default parent goes with its last container (an explicit cgroupsPath in
    // the engine's spec once kept it forever).
    assert!(
        !Path::new("/sys/fs/cgroup/unified/pier").exists(),
        "{when}: the default parent cgroup /pier is left"
    );
    let links = veths_gone();
    assert!(!links.contains("veth"), "{when}: links left: {links}");
    let nft = dnat_elements();
    assert!(
        !nft.contains("elements"),
        "{when}: published ports left: {nft}"
    );
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let state = paths.state_dir.display().to_string();
    assert!(
        !mounts.contains(&state),
        "{when}: mounts left under {state}"
    );
    // Runtime state is kept while its cgroup cannot be removed: none left means none left.
    for lease in fs::read_dir(paths.ipam()).into_iter().flatten().flatten() {
        let text = fs::read_to_string(lease.path()).unwrap_or_default();
        assert!(
            !has_id(&text),
            "{when}: leases left in {}: {text}",
            lease.path().display()
        );
    }
}

/// The nat engine's map of published ports (any host address), as nft lists it.
fn dnat_elements() -> String {
    let nft = Command::new("nft")
        .args(["list", "map", "inet", "pier", "pier_dnat4_any"])
        .output();
    nft.map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default()
}

/// True when `text` holds a 64-hex-digit container id.
fn has_id(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .any(|word| word.len() == 64)
}
