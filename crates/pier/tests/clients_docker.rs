//! Real client: Debian's `dockerd` (docker.io 20.10) driving the runtime under test.
//!
//! The suite starts its own dockerd with every path in a scratch dir (data root, exec root with its
//! own containerd, pid file, socket, an empty config file), no iptables, no bridge, no ip forwarding
//! and no masquerading, so the host's network and firewall are untouched; the runtime under test is
//! registered as `pier` (`--add-runtime`) and selected per container (`--runtime pier`), runc stays the
//! default. The image is a busybox rootfs brought in with `docker import`. Checks: output and exit
//! code of `docker run`; `run -d`, `exec`, `kill`, `wait`, `rm`; `run -t`; `--memory 64m --cpus 0.5`
//! read back from the container's cgroup files.
//!
//! Needs root and docker.io (dockerd, docker) and busybox-static; `PIER_CLIENT_RUNTIME=runc` checks the
//! harness itself. Support code and cleanup guards: tests/clients/mod.rs.
mod clients;

use std::path::{Path, PathBuf};
use std::process::Command;

use clients::{
    busybox_tar, expect_limits, limits_script, ready, run, runtime_under_test, CgroupParent,
    Checks, CreatedPaths, Daemon, Outcome, Scratch, IMAGE,
};

const CGROUP_PARENT: &str = "pier-test-docker";

/// The docker CLI talking to this suite's daemon.
struct Docker {
    cli: PathBuf,
    host: String,
}

impl Docker {
    fn cmd(&self, args: &[&str]) -> Outcome {
        let mut full = vec!["-H", self.host.as_str()];
        full.extend_from_slice(args);
        run(&self.cli, &full)
    }

    /// `docker run --rm --runtime pier --network none <extra> IMAGE <command>`.
    fn run_rm(&self, extra: &[&str], command: &[&str]) -> Outcome {
        let mut args = vec!["run", "--rm", "--runtime", "pier", "--network", "none"];
        args.extend_from_slice(extra);
        args.push(IMAGE);
        args.extend_from_slice(command);
        self.cmd(&args)
    }
}

/// The docker CLI matching Debian's dockerd (another, newer client may come first in PATH).
fn docker_cli() -> PathBuf {
    let debian = Path::new("/usr/bin/docker");
    if debian.is_file() {
        return debian.to_path_buf();
    }
    clients::find_program("docker").expect("docker installed")
}

fn start_dockerd(scratch: &Scratch, runtime: &Path) -> Daemon {
    let config = scratch.path("daemon.json");
    std::fs::write(&config, "{}").expect("write daemon.json");
    let dir = |name: &str| scratch.path(name).to_string_lossy().into_owned();
    let mut command = Command::new("dockerd");
    command
        .arg(format!("--config-file={}", config.display()))
        .arg(format!("--data-root={}", dir("docker")))
        .arg(format!("--exec-root={}", dir("exec")))
        .arg(format!("--pidfile={}", dir("docker.pid")))
        .arg(format!("--host=unix://{}", dir("docker.sock")))
        .args([
            "--iptables=false",
            "--ip6tables=false",
            "--ip-forward=false",
            "--ip-masq=false",
        ])
        .args(["--bridge=none", "--default-runtime=runc"])
        .arg(format!("--cgroup-parent=/{CGROUP_PARENT}"))
        .arg(format!("--add-runtime=pier={}", runtime.display()));
    Daemon::start("dockerd", &mut command, scratch.path("dockerd.log"))
}

#[test]
fn docker_drives_the_runtime() {
    if !ready("docker", &["dockerd", "docker", "busybox", "tar"]) {
        return;
    }
    let runtime = runtime_under_test();
    let _host_paths = CreatedPaths::watch(&["/run/docker", "/run/containerd"]);
    let _cgroups = CgroupParent::watch(CGROUP_PARENT);
    let scratch = Scratch::new("docker");
    let tar = busybox_tar(&scratch);
    let mut daemon = start_dockerd(&scratch, &runtime);
    let docker = Docker {
        cli: docker_cli(),
        host: format!("unix://{}", scratch.path("docker.sock").display()),
    };
    daemon.wait_ready(|| docker.cmd(&["version"]).ok());
    docker
        .cmd(&["import", &tar.to_string_lossy(), IMAGE])
        .ok()
        .unwrap_or_else(|e| panic!("docker import: {e}\n{}", daemon.log_tail()));

    let mut checks = Checks::new("docker", &runtime);
    checks.check("run: output and exit code", || {
        docker
            .run_rm(&[], &["sh", "-c", "echo hello-from-pier; exit 3"])
            .expect(3, &["hello-from-pier\n"])
    });
    checks.check("run -d, exec, kill, wait, rm", || {
        detached_lifecycle(&docker)
    });
    checks.check("run -t: a terminal", || {
        docker
            .run_rm(&["-t"], &["sh", "-c", "tty; echo tty-ok"])
            .expect(0, &["/dev/pts/", "tty-ok"])
    });
    checks.check("exec -t: a terminal in a running container", || {
        exec_terminal(&docker)
    });
    checks.check("run --memory 64m --cpus 0.5: cgroup limits", || {
        let seen = docker
            .run_rm(
                &["--memory", "64m", "--cpus", "0.5"],
                &["sh", "-c", limits_script()],
            )
            .ok()?;
        expect_limits(&seen)
    });
    if !checks.is_clean() {
        eprintln!("dockerd log tail:\n{}", daemon.log_tail());
    }
    checks.finish();
}

fn detached_lifecycle(docker: &Docker) -> Result<(), String> {
    let name = "pier-test-detached";
    let args = [
        "run",
        "-d",
        "--runtime",
        "pier",
        "--network",
        "none",
        "--name",
        name,
        IMAGE,
        "sleep",
        "1000",
    ];
    clients::detached_lifecycle(
        &|a| docker.cmd(a),
        name,
        docker.cmd(&args),
        &["rm", "-f", name],
    )
}

fn exec_terminal(docker: &Docker) -> Result<(), String> {
    let name = "pier-test-exec-tty";
    let args = [
        "run",
        "-d",
        "--runtime",
        "pier",
        "--network",
        "none",
        "--name",
        name,
        IMAGE,
        "sleep",
        "1000",
    ];
    let result = docker.cmd(&args).ok().and_then(|_| {
        docker
            .cmd(&["exec", "-t", name, "sh", "-c", "tty; echo tty-ok"])
            .expect(0, &["/dev/pts/", "tty-ok"])
    });
    docker.cmd(&["rm", "-f", name]);
    result
}
