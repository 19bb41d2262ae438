//! Black-box tests of the engine's command line: the dialect rule seen from outside, help, refused
//! command lines, and the lifecycle verbs (run, ps, logs, exec, kill, wait, stop, inspect, rm).
//! Each root test runs pier in its own network namespace and state directory (engine_support).
mod engine_support;

use engine_support::{
    describe, require_root, sh, stdout, temp_dir, unique, Host, ENGINE_FAILED, PIER,
};
use std::process::{Command, Stdio};

fn pier(args: &[&str], state_dir: &std::path::Path) -> std::process::Output {
    Command::new(PIER)
        .args(args)
        .env("PIER_STATE_DIR", state_dir)
        .stdin(Stdio::null())
        .output()
        .expect("running pier")
}

#[test]
fn help_teaches_both_command_lines() {
    let state = temp_dir();
    let top = stdout(&pier(&["--help"], state.path()));
    for needle in [
        "pier run --rm host echo hello",
        "runc",
        "--state-dir",
        "network",
        "kill ID SIGNAL",
    ] {
        assert!(top.contains(needle), "pier --help lacks {needle:?}: {top}");
    }
    let run = stdout(&pier(&["run", "--help"], state.path()));
    for needle in [
        "--publish-mode",
        "-h, --hostname",
        "--security-opt",
        "--ulimit",
        "Example:",
    ] {
        assert!(
            run.contains(needle),
            "pier run --help lacks {needle:?}: {run}"
        );
    }
    let create = stdout(&pier(&["create", "--help"], state.path()));
    assert!(create.contains("--bundle"), "{create}");
    let network = stdout(&pier(&["network", "create", "--help"], state.path()));
    assert!(
        network.contains("--host-shim") && network.contains("macvlan"),
        "{network}"
    );
}

#[test]
fn refused_command_lines_exit_125_and_create_nothing() {
    let state = temp_dir();
    let dir = state.path().join("state");
    for (args, culprit) in [
        (&["run", "--bogus", "host", "true"][..], "--bogus"),
        (&["run", "-P", "host", "true"], "-P"),
        (&["run", "--publish-mode", "magic", "host", "true"], "magic"),
        (&["logs", "--tail", "lots", "web"], "lots"),
        (
            &["network", "create", "--subnet", "198.18.0.0", "n"],
            "198.18.0.0",
        ),
        (&["network", "create", "-d", "overlay", "n"], "overlay"),
    ] {
        let out = pier(args, &dir);
        assert_eq!(
            out.status.code(),
            Some(ENGINE_FAILED),
            "{args:?}: {}",
            describe(&out)
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(culprit),
            "{args:?} does not name {culprit}: {stderr}"
        );
    }
    assert!(
        !dir.exists(),
        "a refused command line created the state directory"
    );
}

#[test]
fn runc_shapes_reach_the_runtime() {
    // runc's verbs fail with runc's exit code 1 on a missing container, not the engine's 125.
    let root = temp_dir();
    let root = root.path().to_str().unwrap();
    for args in [
        &["--root", root, "ps", "pier-test-none"][..],
        &["--root", root, "kill", "pier-test-none", "9"],
        &["--root", root, "state", "pier-test-none"],
    ] {
        let out = Command::new(PIER)
            .args(args)
            .output()
            .expect("running pier");
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", describe(&out));
    }
}

#[test]
fn foreground_run_exits_with_the_program_code() {
    if !require_root("foreground_run_exits_with_the_program_code") {
        return;
    }
    let host = Host::new("fg");
    let out = host.run(&[
        "run",
        "--rm",
        "--network",
        "none",
        "host",
        "sh",
        "-c",
        "echo hello; exit 3",
    ]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));
    assert_eq!(stdout(&out), "hello\n");
    assert!(host.ps_all().is_empty(), "--rm left the container");
    let name = unique("keep");
    let out = host.run(&["run", "--name", &name, "--network", "none", "host", "true"]);
    assert!(out.status.success(), "{}", describe(&out));
    let all = host.ps_all();
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["name"], name.as_str());
    assert_eq!(all[0]["status"], "exited (0)");
    assert!(
        host.ok(&["ps"]).lines().count() == 1,
        "pier ps lists an exited container"
    );
    host.ok(&["rm", &name]);
    assert!(host.entries("containers").is_empty());
}

#[test]
fn detached_lifecycle() {
    if !require_root("detached_lifecycle") {
        return;
    }
    let host = Host::new("life");
    let name = unique("life");
    let script = "echo out; echo err >&2; trap 'exit 7' USR1; while :; do sleep 0.1; done";
    let id = host.start(&name, &["--network", "none"], &["sh", "-c", script]);
    assert!(
        id.len() >= 12 && id.chars().all(|c| c.is_ascii_hexdigit()),
        "run -d printed {id:?}"
    );

    let table = host.ok(&["ps"]);
    assert!(
        table.starts_with("CONTAINER ID") && table.contains(&name) && table.contains(&id[..12]),
        "{table}"
    );
    assert_eq!(host.ok(&["ps", "-q"]).trim(), &id[..12]);
    assert_eq!(host.ps_all()[0]["status"], "running");

    let inspect: serde_json::Value =
        serde_json::from_str(&host.ok(&["inspect", &id[..8]])).expect("inspect JSON");
    let text = inspect.to_string();
    assert!(
        inspect.is_array() && text.contains(&id) && text.contains(&name),
        "{text}"
    );

    wait_for_log(&host, &name, "out\n");
    let out = host.run(&["logs", &name]);
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "err\n",
        "{}",
        describe(&out)
    );

    host.ok(&["kill", "-s", "USR1", &name]);
    assert_eq!(host.ok(&["wait", &name]).trim(), "7");
    assert_eq!(host.ps_all()[0]["status"], "exited (7)");
    assert_eq!(host.ok(&["ps"]).lines().count(), 1);
    host.ok(&["rm", &id[..10]]);
    assert!(host.ps_all().is_empty());
    assert!(
        host.entries("containers").is_empty(),
        "{:?}",
        host.entries("containers")
    );
}

/// Waits (bounded, no timing assert) until the container's log holds `text`.
fn wait_for_log(host: &Host, container: &str, text: &str) {
    for _ in 0..200 {
        if host.ok(&["logs", container]).contains(text) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("{container}'s log never held {text:?}");
}

#[test]
fn logs_follow_ends_with_the_container() {
    if !require_root("logs_follow_ends_with_the_container") {
        return;
    }
    let host = Host::new("follow");
    let name = unique("follow");
    host.start(
        &name,
        &["--network", "none"],
        &["sh", "-c", "echo one; sleep 1; echo two"],
    );
    assert_eq!(host.ok(&["logs", "-f", &name]), "one\ntwo\n");
    assert_eq!(host.ok(&["logs", "--tail", "1", &name]), "two\n");
    assert_eq!(host.ok(&["wait", &name]).trim(), "0");
}

#[test]
fn exec_flags() {
    if !require_root("exec_flags") {
        return;
    }
    let host = Host::new("exec");
    let name = unique("exec");
    host.start(&name, &["--network", "none"], &["sleep", "600"]);
    let out = host.ok(&[
        "exec",
        "-e",
        "A=1",
        "-w",
        "/tmp",
        "-u",
        "1234:5678",
        &name,
        "sh",
        "-c",
        "echo $A; pwd; id -u; id -g",
    ]);
    assert_eq!(out, "1\n/tmp\n1234\n5678\n");
    let out = host.run(&["exec", &name, "sh", "-c", "exit 4"]);
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    let out = host.run_with_input(&["exec", "-i", &name, "cat"], "piped\n");
    assert_eq!(stdout(&out), "piped\n", "{}", describe(&out));
    host.ok(&["exec", "-d", &name, "touch", "/tmp/detached"]);
    let made = (0..200).any(|_| {
        let found = host
            .run(&["exec", &name, "test", "-e", "/tmp/detached"])
            .status
            .success();
        if !found {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        found
    });
    assert!(made, "exec -d never ran its command");
    host.fails_naming(&["exec", "pier-test-nosuch", "true"], "pier-test-nosuch");
    let out = host.ok(&["exec", "-t", &name, "tty"]);
    assert!(out.starts_with("/dev/pts/"), "exec -t: {out:?}");
}

#[test]
fn stop_kill_and_rm_force() {
    if !require_root("stop_kill_and_rm_force") {
        return;
    }
    let host = Host::new("stop");
    let (a, b, c) = (unique("a"), unique("b"), unique("c"));
    // sh as PID 1 ignores SIGTERM without a trap: stop must fall back to SIGKILL.
    host.start(
        &a,
        &["--network", "none"],
        &["sh", "-c", "while :; do sleep 0.1; done"],
    );
    assert_eq!(host.ok(&["stop", "-t", "1", &a]).trim(), a);
    assert_eq!(host.ok(&["wait", &a]).trim(), "137");
    host.start(&b, &["--network", "none"], &["sleep", "600"]);
    assert_eq!(host.ok(&["kill", &b]).trim(), b);
    assert_eq!(host.ok(&["wait", &b]).trim(), "137");
    host.start(&c, &["--network", "none"], &["sleep", "600"]);
    host.fails_naming(&["rm", &c], &c);
    assert_eq!(host.ps_all().len(), 3);
    assert_eq!(host.ok(&["rm", "-f", &a, &b, &c]).lines().count(), 3);
    assert!(host.ps_all().is_empty());
    assert!(host.processes(&c).is_empty());
}

/// `wait` that began before a `--rm` container exited reports its code even when it wakes
/// only after the monitor removed the container (the waiter is stopped across the removal).
#[test]
fn wait_outlives_the_removal_of_an_rm_container() {
    if !require_root("wait_outlives_the_removal_of_an_rm_container") {
        return;
    }
    let host = Host::new("waitrm");
    let name = unique("waitrm");
    let script = "trap 'exit 3' USR1; while :; do sleep 0.1; done";
    host.start(&name, &["--rm", "--network", "none"], &["sh", "-c", script]);
    let waiter = host
        .command(&["wait", &name])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawning wait");
    let pid = waiter.id().to_string();
    // nsenter execs pier in place: the pid is pier's. Stop it once it blocks in poll(2).
    let syscall = format!("/proc/{pid}/syscall");
    let polling = (0..400).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(25));
        std::fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with("7 "))
    });
    assert!(polling, "wait never blocked in poll(2)");
    sh("kill", &["-STOP", &pid]);
    host.ok(&["kill", "-s", "USR1", &name]);
    let gone = (0..400).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(25));
        host.entries("containers").is_empty()
    });
    sh("kill", &["-CONT", &pid]);
    assert!(gone, "the --rm container was never removed");
    let out = waiter.wait_with_output().expect("waiting for wait");
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(stdout(&out).trim(), "3");
}
