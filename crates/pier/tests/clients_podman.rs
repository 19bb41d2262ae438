//! Real client: Debian's `podman` (4.3) driving the runtime under test through `--runtime`.
//!
//! Every podman call gets private storage and state (`--root`, `--runroot`, `--tmpdir` in a scratch
//! dir), the cgroupfs manager (no systemd here), file events, `--network none`, and a cgroup parent of
//! its own. Hard rlimits cannot be raised on this machine even by root, so containers get
//! `--ulimit nofile=1024:1024 --ulimit nproc=1024:1024`. The image comes from `podman import` of a
//! busybox rootfs. Checks: output and exit code of `podman run`; `run -d`, `exec`, `kill`, `wait`,
//! `rm`; `run -t`; `--memory 64m --cpus 0.5` read back from the container's cgroup files.
//!
//! Needs root, podman (with conmon) and busybox-static; `PIER_CLIENT_RUNTIME=runc` checks the harness
//! itself. Podman writes a few paths outside its configured dirs (/run/containers, /run/libpod,
//! /var/lib/containers/cache, its shared-memory lock /dev/shm/libpod_lock, the runtime's default
//! root): the guards remove those it created.
//! Support code and cleanup guards: tests/clients/mod.rs.
mod clients;

use std::path::{Path, PathBuf};

use clients::{
    busybox_tar, expect_limits, limits_script, ready, run, runtime_under_test, CgroupParent,
    Checks, CreatedPaths, Outcome, Scratch, IMAGE,
};

const CGROUP_PARENT: &str = "pier-test-podman";

/// podman with this suite's private global options.
struct Podman {
    program: PathBuf,
    global: Vec<String>,
}

impl Podman {
    fn new(scratch: &Scratch, runtime: &Path) -> Self {
        let dir = |name: &str| scratch.path(name).to_string_lossy().into_owned();
        let global = [
            "--runtime",
            &runtime.to_string_lossy(),
            "--root",
            &dir("root"),
            "--runroot",
            &dir("runroot"),
            "--tmpdir",
            &dir("tmp"),
            "--volumepath",
            &dir("volumes"),
            "--cgroup-manager",
            "cgroupfs",
            "--events-backend",
            "file",
        ];
        let program = clients::find_program("podman").expect("podman installed");
        Podman {
            program,
            global: global.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn cmd(&self, args: &[&str]) -> Outcome {
        let mut full: Vec<&str> = self.global.iter().map(String::as_str).collect();
        full.extend_from_slice(args);
        run(&self.program, &full)
    }

    /// The options every container of this suite gets.
    fn container_options() -> Vec<String> {
        let options = [
            "--network",
            "none",
            "--ulimit",
            "nofile=1024:1024",
            "--ulimit",
            "nproc=1024:1024",
        ];
        let mut options: Vec<String> = options.iter().map(|s| s.to_string()).collect();
        options.push(format!("--cgroup-parent=/{CGROUP_PARENT}"));
        options
    }

    /// `podman run <container options> <extra> IMAGE <command>`.
    fn run_container(&self, extra: &[&str], command: &[&str]) -> Outcome {
        let options = Self::container_options();
        let mut args = vec!["run"];
        args.extend(options.iter().map(String::as_str));
        args.extend_from_slice(extra);
        args.push(IMAGE);
        args.extend_from_slice(command);
        self.cmd(&args)
    }
}

#[test]
fn podman_drives_the_runtime() {
    if !ready("podman", &["podman", "conmon", "busybox", "tar"]) {
        return;
    }
    let runtime = runtime_under_test();
    let runtime_default_root = format!(
        "/run/{}",
        runtime.file_name().unwrap_or_default().to_string_lossy()
    );
    let _host_paths = CreatedPaths::watch(&[
        "/run/containers",
        "/run/libpod",
        "/var/lib/containers",
        "/dev/shm/libpod_lock",
        &runtime_default_root,
    ]);
    let _cgroups = (
        CgroupParent::watch(CGROUP_PARENT),
        CgroupParent::watch("libpod_parent"),
    );
    let scratch = Scratch::new("podman");
    let tar = busybox_tar(&scratch);
    let podman = Podman::new(&scratch, &runtime);
    podman
        .cmd(&["import", &tar.to_string_lossy(), IMAGE])
        .ok()
        .unwrap_or_else(|e| panic!("podman import: {e}"));

    let mut checks = Checks::new("podman", &runtime);
    checks.check("run: output and exit code", || {
        podman
            .run_container(&["--rm"], &["sh", "-c", "echo hello-from-pier; exit 3"])
            .expect(3, &["hello-from-pier\n"])
    });
    checks.check("run -d, exec, kill, wait, rm", || {
        detached_lifecycle(&podman)
    });
    checks.check("run -t: a terminal", || {
        podman
            .run_container(&["--rm", "-t"], &["sh", "-c", "tty; echo tty-ok"])
            .expect(0, &["/dev/pts/", "tty-ok"])
    });
    checks.check("exec -t: a terminal in a running container", || {
        exec_terminal(&podman)
    });
    checks.check("run --memory 64m --cpus 0.5: cgroup limits", || {
        let extra = ["--rm", "--memory", "64m", "--cpus", "0.5"];
        expect_limits(
            &podman
                .run_container(&extra, &["sh", "-c", limits_script()])
                .ok()?,
        )
    });
    podman.cmd(&["rm", "-a", "-f", "-t", "0"]);
    checks.finish();
}

fn detached_lifecycle(podman: &Podman) -> Result<(), String> {
    let name = "pier-test-detached";
    clients::detached_lifecycle(
        &|a| podman.cmd(a),
        name,
        podman.run_container(&["-d", "--name", name], &["sleep", "1000"]),
        &["rm", "-f", "-t", "0", name],
    )
}

fn exec_terminal(podman: &Podman) -> Result<(), String> {
    let name = "pier-test-exec-tty";
    let result = podman
        .run_container(&["-d", "--name", name], &["sleep", "1000"])
        .ok()
        .and_then(|_| {
            podman
                .cmd(&["exec", "-t", name, "sh", "-c", "tty; echo tty-ok"])
                .expect(0, &["/dev/pts/", "tty-ok"])
        });
    podman.cmd(&["rm", "-f", "-t", "0", name]);
    result
}
