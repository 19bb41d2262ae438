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
use pier_engine::engine::{Engine, EngineError, RunOutcome};
use pier_engine::store::Store;
use pier_engine::Paths;

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
        assert!(std::env::var("CI").as_deref() != Ok("true"), "CI=true: needs root");
        println!("priv_engine: skipped (needs root)");
        return;
    }
    let name = format!("pier-test-engine-{}", std::process::id());
    let ok = Command::new("ip").args(["netns", "add", &name]).status();
    assert!(ok.is_ok_and(|s| s.success()), "ip netns add {name}");
    let _netns = Netns(name.clone());
    let file = File::open(format!("/run/netns/{name}")).expect("open netns");
    nix::sched::setns(file, nix::sched::CloneFlags::CLONE_NEWNET).expect("setns");
    std::env::set_var("PIER_SUBNET_POOL", "198.18.0.0/15:24");
    let state = tempfile::tempdir().expect("tempdir");
    let paths = Paths {
        state_dir: state.path().to_owned(),
    };
    let tests: &[(&str, fn(&Paths))] = &[
        ("foreground_none_exit_code", foreground_none_exit_code),
        ("detached_bridge_logs_stop_rm", detached_bridge_logs_stop_rm),
        ("kill_wait_and_auto_rm", kill_wait_and_auto_rm),
        ("duplicate_name_and_running_rm", duplicate_name_and_running_rm),
        ("dead_monitor_is_collected", dead_monitor_is_collected),
        ("crash_points_leave_nothing", crash_points_leave_nothing),
    ];
    for (name, test) in tests {
        print!("test {name} ... ");
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
    let mut cfg = config(true, "bridge", &["sh", "-c", "echo hello; echo oops >&2; exec sleep 100"]);
    cfg.name = Some("web".into());
    let id = detached(&engine, cfg);
    let ps = engine.ps(false).expect("ps");
    assert_eq!(ps.len(), 1);
    assert_eq!((ps[0].name.as_str(), ps[0].status.as_str()), ("web", "running"));
    let inspect = engine.inspect("web").expect("inspect");
    let address = inspect["Addresses"][0].as_str().expect("an address").to_owned();
    assert!(address.starts_with("198.1"), "{address}");
    assert!(engine.kill("web", 0).is_ok());
    let stopped = engine.stop(&id[..10], Duration::from_millis(100)).expect("stop");
    assert_eq!(stopped, id);
    assert_eq!(engine.wait("web").expect("wait"), 137);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    engine.logs("web", false, None, &mut out, &mut err).expect("logs");
    assert_eq!((out.as_slice(), err.as_slice()), (&b"hello\n"[..], &b"oops\n"[..]));
    assert!(matches!(engine.kill("web", 9), Err(EngineError::NotRunning(_))));
    engine.rm("web", false).expect("rm");
    assert!(matches!(engine.inspect("web"), Err(EngineError::NoSuchContainer(_))));
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
    let err = engine.rm("dup", false).expect_err("rm of a running container");
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
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(monitor), nix::sys::signal::SIGKILL)
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

/// Each crash point in a child process (`run -d`, then `stop` and `rm`), then `gc`.
fn crash_points_leave_nothing(paths: &Paths) {
    for point in pier_engine::crash::POINTS {
        let verb = point.split(':').next().expect("verb");
        Command::new(std::env::current_exe().expect("exe"))
            .args(["child-run", &paths.state_dir.display().to_string(), verb])
            .env(pier_engine::crash::ENV, point)
            .status()
            .expect("child");
        let engine = Engine::open(paths.clone()).expect("open");
        // The monitor may still be finishing after the front crashed: stop waits for it.
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

/// In the child: a detached run, then for stop and rm points the verb that crashes (the
/// crash variable only matches the points of its own verb).
fn child_run(state: &str, rest: &[String]) {
    let paths = Paths {
        state_dir: state.into(),
    };
    let engine = Engine::open(paths).expect("open");
    let Ok(RunOutcome::Detached { id }) = engine.run(config(true, "bridge", &["sleep", "100"]))
    else {
        return;
    };
    match rest.first().map(String::as_str) {
        Some("stop") => drop(engine.stop(&id, Duration::from_millis(50))),
        Some("rm") => drop(engine.rm(&id, true)),
        _ => {}
    }
}

/// Nothing of any container survives in the state dir, the netns, the mounts or cgroups.
fn assert_clean(paths: &Paths) {
    assert_clean_at(paths, "after the test");
}

fn assert_clean_at(paths: &Paths, when: &str) {
    let entries = |p: &Path| fs::read_dir(p).map(|d| d.count()).unwrap_or(0);
    assert_eq!(entries(&paths.containers()), 0, "{when}: container directories");
    assert_eq!(entries(&paths.runtime_root()), 0, "{when}: runtime state");
    let links = Command::new("ip").args(["-o", "link"]).output().expect("ip link");
    let links = String::from_utf8_lossy(&links.stdout).into_owned();
    assert!(!links.contains("veth"), "{when}: links left: {links}");
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let state = paths.state_dir.display().to_string();
    assert!(!mounts.contains(&state), "{when}: mounts left under {state}");
    // Runtime state is kept while its cgroup cannot be removed: none left means none left.
    for lease in fs::read_dir(paths.ipam()).into_iter().flatten().flatten() {
        let text = fs::read_to_string(lease.path()).unwrap_or_default();
        assert!(!has_id(&text), "{when}: leases left in {}: {text}", lease.path().display());
    }
}

/// True when `text` holds a 64-hex-digit container id.
fn has_id(text: &str) -> bool {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .any(|word| word.len() == 64)
}
