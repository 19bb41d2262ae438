//! Black-box tests of `pier run`'s flags: process settings, mounts and root filesystems,
//! resources, security, terminal and stdin, host name and generated /etc files. Each test runs
//! pier in its own network namespace and state directory (engine_support).
mod engine_support;

use engine_support::{
    busybox_root, cgroup_v1_file, describe, pid_with, require_root, stdout, temp_dir, unique, Host,
};
use std::fs;

/// `pier run --rm --network none FLAGS host COMMAND`, asserting success; its stdout.
fn run(host: &Host, flags: &[&str], command: &[&str]) -> String {
    let mut args = vec!["run", "--rm", "--network", "none"];
    args.extend_from_slice(flags);
    args.push("host");
    args.extend_from_slice(command);
    host.ok(&args)
}

/// One line of the container's /proc/self/status, e.g. `CapEff`.
fn status_field(host: &Host, flags: &[&str], field: &str) -> String {
    let out = run(
        host,
        flags,
        &["grep", &format!("^{field}:"), "/proc/self/status"],
    );
    out.split_whitespace()
        .nth(1)
        .unwrap_or_default()
        .to_string()
}

#[test]
fn process_settings() {
    if !require_root("process_settings") {
        return;
    }
    let host = Host::new("proc");
    let dir = temp_dir();
    let env_file = dir.path().join("env");
    fs::write(&env_file, "B=2\n# comment\nC=from-file\n").unwrap();
    let out = run(
        &host,
        &[
            "-e",
            "A=1",
            "--env-file",
            env_file.to_str().unwrap(),
            "-e",
            "C=from-flag",
            "-w",
            "/tmp",
            "-u",
            "1234:5678",
            "-h",
            "pier-test-box",
        ],
        &[
            "sh",
            "-c",
            "echo $A $B $C; pwd; id -u; id -g; hostname; cat /etc/hostname",
        ],
    );
    assert_eq!(
        out,
        "1 2 from-flag\n/tmp\n1234\n5678\npier-test-box\npier-test-box\n"
    );
    assert_eq!(
        run(&host, &["--entrypoint", "/bin/echo"], &["hi", "there"]),
        "hi there\n"
    );
    assert_eq!(run(&host, &[], &["sh", "-c", "echo $$"]), "1\n");
    let pid = run(&host, &["--init"], &["sh", "-c", "echo $$"]);
    assert_ne!(pid, "1\n", "--init: the command is still PID 1");
}

#[test]
fn terminal_and_stdin() {
    if !require_root("terminal_and_stdin") {
        return;
    }
    let host = Host::new("tty");
    let piped = host.run_with_input(
        &["run", "--rm", "-i", "--network", "none", "host", "cat"],
        "to stdin\n",
    );
    assert_eq!(stdout(&piped), "to stdin\n", "{}", describe(&piped));
    let closed = host.run_with_input(
        &["run", "--rm", "--network", "none", "host", "cat"],
        "to stdin\n",
    );
    assert_eq!(
        stdout(&closed),
        "",
        "without -i stdin must not reach the container"
    );
    let out = run(&host, &["-t"], &["tty"]);
    assert!(out.starts_with("/dev/pts/"), "-t: {out:?}");
}

#[test]
fn mounts_and_root_filesystems() {
    if !require_root("mounts_and_root_filesystems") {
        return;
    }
    let host = Host::new("mnt");
    let data = temp_dir();
    fs::write(data.path().join("in"), "from host\n").unwrap();
    let volume = format!("{}:/data", data.path().display());
    let volume_ro = format!("{}:/ro:ro", data.path().display());
    let out = run(
        &host,
        &["-v", &volume, "-v", &volume_ro, "--tmpfs", "/scratch"],
        &["sh", "-c", "cat /data/in; echo new > /data/out; echo x > /ro/x || echo refused; grep -c ' /scratch tmpfs ' /proc/mounts"],
    );
    assert_eq!(out, "from host\nrefused\n1\n");
    assert_eq!(
        fs::read_to_string(data.path().join("out")).unwrap(),
        "new\n"
    );
    assert!(!data.path().join("x").exists());

    // The host root is read-only, with a private writable /tmp.
    let out = run(
        &host,
        &[],
        &[
            "sh",
            "-c",
            "touch /usr/pier-test || echo refused; touch /tmp/ok && echo tmp",
        ],
    );
    assert_eq!(out, "refused\ntmp\n");

    // A directory root is the lower layer of an overlay: the container never changes it.
    let root = busybox_root(&["sh", "echo", "cat", "touch", "rm"]);
    let rootfs = root.path().to_str().unwrap();
    let before = fs::read_dir(root.path()).unwrap().count();
    let out = host.ok(&[
        "run",
        "--rm",
        "--network",
        "none",
        rootfs,
        "/bin/sh",
        "-c",
        "echo hi > /new; rm /bin/cat; test -e /bin/cat || echo gone; cat /new",
    ]);
    assert_eq!(out, "gone\nhi\n");
    assert!(!root.path().join("new").exists() && root.path().join("bin/cat").exists());
    assert_eq!(fs::read_dir(root.path()).unwrap().count(), before);
    let out = host.ok(&[
        "run",
        "--rm",
        "--read-only",
        "--network",
        "none",
        rootfs,
        "/bin/sh",
        "-c",
        "touch /x || echo refused",
    ]);
    assert_eq!(out, "refused\n");
}

#[test]
fn resource_limits() {
    if !require_root("resource_limits") {
        return;
    }
    let host = Host::new("res");
    let mark = unique("mark");
    let name = unique("res");
    let env = format!("PIER_TEST_MARK={mark}");
    host.start(
        &name,
        &[
            "--network",
            "none",
            "-e",
            &env,
            "--cpus",
            "0.5",
            "--memory",
            "64m",
            "--pids-limit",
            "50",
        ],
        &["sleep", "600"],
    );
    let pid = pid_with(&mark);
    assert_eq!(cgroup_v1_file(pid, "cpu", "cpu.cfs_quota_us"), "50000");
    assert_eq!(cgroup_v1_file(pid, "cpu", "cpu.cfs_period_us"), "100000");
    assert_eq!(
        cgroup_v1_file(pid, "memory", "memory.limit_in_bytes"),
        "67108864"
    );
    assert_eq!(cgroup_v1_file(pid, "pids", "pids.max"), "50");
    assert_eq!(
        run(
            &host,
            &["--ulimit", "nofile=512:512"],
            &["sh", "-c", "ulimit -n"]
        ),
        "512\n"
    );
}

#[test]
fn security_options() {
    if !require_root("security_options") {
        return;
    }
    let host = Host::new("sec");
    // Docker's default capability set and its default seccomp profile.
    assert_eq!(status_field(&host, &[], "CapEff"), "00000000a80425fb");
    assert_eq!(status_field(&host, &[], "Seccomp"), "2");
    assert_eq!(status_field(&host, &[], "NoNewPrivs"), "0");
    let caps = status_field(
        &host,
        &["--cap-drop", "ALL", "--cap-add", "NET_ADMIN"],
        "CapEff",
    );
    assert_eq!(caps, "0000000000001000");
    let caps = status_field(&host, &["--cap-drop", "CHOWN"], "CapEff");
    assert_eq!(caps, "00000000a80425fa");
    let nnp = status_field(
        &host,
        &["--security-opt", "no-new-privileges"],
        "NoNewPrivs",
    );
    assert_eq!(nnp, "1");
    let unconfined = status_field(&host, &["--security-opt", "seccomp=unconfined"], "Seccomp");
    assert_eq!(unconfined, "0");

    let dir = temp_dir();
    let profile = dir.path().join("profile.json");
    let deny_mkdir = r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO"}]}"#;
    fs::write(&profile, deny_mkdir).unwrap();
    let opt = format!("seccomp={}", profile.display());
    let out = run(
        &host,
        &["--security-opt", &opt],
        &[
            "sh",
            "-c",
            "mkdir /tmp/d 2>/dev/null && echo made || echo refused",
        ],
    );
    assert_eq!(out, "refused\n");
    assert_eq!(
        run(&host, &[], &["sh", "-c", "mkdir /tmp/d && echo made"]),
        "made\n"
    );
}

#[test]
fn generated_etc_files() {
    if !require_root("generated_etc_files") {
        return;
    }
    let host = Host::new("etc");
    let name = unique("etc");
    host.start(&name, &[], &["sleep", "600"]);
    let address = host.address(&name);
    let hosts = host.ok(&["exec", &name, "cat", "/etc/hosts"]);
    let own = hosts
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == name));
    assert!(
        own.is_some_and(|l| l.starts_with(&address)),
        "/etc/hosts lacks {address} {name}: {hosts}"
    );
    let resolv = host.ok(&["exec", &name, "cat", "/etc/resolv.conf"]);
    assert!(
        resolv.contains("nameserver") && !resolv.contains("127.0.0.53"),
        "{resolv}"
    );
}
