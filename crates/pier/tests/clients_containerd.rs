//! Real client: Debian's `containerd` (1.6) and `ctr` driving the runtime under test as the runc
//! binary of the `io.containerd.runc.v2` shim (`ctr run --runc-binary`).
//!
//! The suite starts its own containerd from a config file of its own (root, state, socket and the
//! `opt` plugin's path in a scratch dir; the CRI plugin disabled), uses a namespace of its own
//! (`pier-test-ctd`, which is also the cgroup parent ctr gives containers) and imports the busybox
//! rootfs as an OCI image layout archive built here (one uncompressed layer, digests from
//! `sha256sum`). ctr creates a fresh network namespace per container (loopback only). Checks: output
//! and exit code of `ctr run`; `run -d`, `task exec`, `task kill`, `task rm`; `run -t` (ctr needs a
//! terminal on its own stdin, given by `script`); `--memory-limit` and `--cpus` read back from the
//! host's cgroup files of the task (ctr's default spec mounts no cgroup filesystem inside).
//!
//! Needs root, containerd, sha256sum, script (bsdutils) and busybox-static; `PIER_CLIENT_RUNTIME=runc`
//! checks the harness itself. containerd's shims put their sockets under /run/containerd/s whatever
//! the config says: the guards remove that if it was created here. Support: tests/clients/mod.rs.
mod clients;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clients::{
    busybox_tar, expect_limits, find_program, host_limits, ready, run, runtime_under_test,
    wait_until, CgroupParent, Checks, CreatedPaths, Daemon, Outcome, Scratch,
};
use serde_json::json;

const NAMESPACE: &str = "pier-test-ctd";
const IMAGE_REF: &str = "docker.io/library/pier-test-busybox:latest";

/// ctr talking to this suite's containerd, in this suite's namespace, with the runtime under test.
struct Ctr {
    program: PathBuf,
    address: String,
    runtime: String,
}

impl Ctr {
    fn cmd(&self, args: &[&str]) -> Outcome {
        let mut full = vec!["--address", self.address.as_str(), "--namespace", NAMESPACE];
        full.extend_from_slice(args);
        run(&self.program, &full)
    }

    /// `ctr run --runc-binary <runtime> <extra> IMAGE <id> <command>`.
    fn run_args<'a>(&'a self, extra: &[&'a str], id: &'a str, command: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec!["run", "--runc-binary", self.runtime.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&[IMAGE_REF, id]);
        args.extend_from_slice(command);
        args
    }
}

fn start_containerd(scratch: &Scratch) -> Daemon {
    let dir = |name: &str| scratch.path(name).to_string_lossy().into_owned();
    let config = format!(
        "version = 2\nroot = \"{}\"\nstate = \"{}\"\ndisabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n\
         [grpc]\n  address = \"{}\"\n[plugins.\"io.containerd.internal.v1.opt\"]\n  path = \"{}\"\n",
        dir("root"),
        dir("state"),
        dir("containerd.sock"),
        dir("opt")
    );
    fs::write(scratch.path("config.toml"), config).expect("write containerd config");
    let mut command = Command::new("containerd");
    command.arg("--config").arg(scratch.path("config.toml"));
    Daemon::start("containerd", &mut command, scratch.path("containerd.log"))
}

/// Stores `bytes` as a blob of an OCI image layout; returns its descriptor digest and size.
fn put_blob(layout: &Path, bytes: &[u8]) -> (String, usize) {
    let staged = layout.join("staged");
    fs::write(&staged, bytes).expect("write blob");
    let sum = run(&find_program("sha256sum").expect("sha256sum"), &[&staged])
        .ok()
        .expect("sha256sum");
    let hex = sum
        .split_whitespace()
        .next()
        .expect("sha256sum output")
        .to_string();
    fs::rename(&staged, layout.join("blobs/sha256").join(&hex)).expect("store blob");
    (format!("sha256:{hex}"), bytes.len())
}

/// Packs the busybox rootfs tar as an OCI image layout archive (what `ctr images import` takes).
fn oci_archive(scratch: &Scratch, rootfs_tar: &Path) -> PathBuf {
    let layout = scratch.path("oci");
    fs::create_dir_all(layout.join("blobs/sha256")).expect("create oci layout");
    let (layer, layer_size) = put_blob(&layout, &fs::read(rootfs_tar).expect("read rootfs tar"));
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": ["sh"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [layer]},
    });
    let (config, config_size) = put_blob(&layout, config.to_string().as_bytes());
    let manifest = json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": layer_size}],
    });
    let (manifest, manifest_size) = put_blob(&layout, manifest.to_string().as_bytes());
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": manifest, "size": manifest_size,
        "annotations": {"org.opencontainers.image.ref.name": IMAGE_REF},
    }]});
    fs::write(layout.join("index.json"), index.to_string()).expect("write index.json");
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .expect("write oci-layout");
    let archive = scratch.path("oci.tar");
    let tar = find_program("tar").expect("tar");
    let args = [
        "-C",
        &layout.to_string_lossy(),
        "-cf",
        &archive.to_string_lossy(),
        "oci-layout",
        "index.json",
        "blobs",
    ]
    .map(String::from);
    run(&tar, &args)
        .ok()
        .unwrap_or_else(|e| panic!("pack oci archive: {e}"));
    archive
}

#[test]
fn containerd_drives_the_runtime() {
    if !ready(
        "containerd",
        &[
            "containerd",
            "ctr",
            "containerd-shim-runc-v2",
            "sha256sum",
            "script",
            "busybox",
        ],
    ) {
        return;
    }
    let runtime = runtime_under_test();
    let _host_paths = CreatedPaths::watch(&["/run/containerd"]);
    let _cgroups = CgroupParent::watch(NAMESPACE);
    let scratch = Scratch::new("containerd");
    let archive = oci_archive(&scratch, &busybox_tar(&scratch));
    let mut daemon = start_containerd(&scratch);
    let ctr = Ctr {
        program: find_program("ctr").expect("ctr installed"),
        address: scratch
            .path("containerd.sock")
            .to_string_lossy()
            .into_owned(),
        runtime: runtime.to_string_lossy().into_owned(),
    };
    daemon.wait_ready(|| ctr.cmd(&["version"]).ok());
    ctr.cmd(&["images", "import", &archive.to_string_lossy()])
        .ok()
        .unwrap_or_else(|e| panic!("ctr import: {e}"));

    let mut checks = Checks::new("containerd", &runtime);
    checks.check("run: output and exit code", || {
        let args = ctr.run_args(
            &["--rm"],
            "pier-test-run",
            &["sh", "-c", "echo hello-from-pier; exit 3"],
        );
        ctr.cmd(&args).expect(3, &["hello-from-pier\n"])
    });
    checks.check("run -d, task exec, task kill, task rm", || {
        detached_lifecycle(&ctr)
    });
    checks.check("run -t: a terminal", || terminal(&ctr));
    checks.check("task exec -t: a terminal in a running task", || {
        exec_terminal(&ctr)
    });
    checks.check("run --memory-limit 64m --cpus 0.5: cgroup limits", || {
        limits(&ctr)
    });
    if !checks.is_clean() {
        eprintln!("containerd log tail:\n{}", daemon.log_tail());
    }
    checks.finish();
}

/// Starts `id` detached running `sleep 1000` with `extra` options; returns the task's host pid.
fn start_detached(ctr: &Ctr, id: &str, extra: &[&str]) -> Result<String, String> {
    let mut options = vec!["-d"];
    options.extend_from_slice(extra);
    ctr.cmd(&ctr.run_args(&options, id, &["sleep", "1000"]))
        .ok()?;
    let tasks = ctr.cmd(&["task", "ls"]).ok()?;
    let row = tasks
        .lines()
        .find(|line| line.split_whitespace().next() == Some(id));
    let pid = row.and_then(|line| line.split_whitespace().nth(1));
    pid.map(str::to_string)
        .ok_or_else(|| format!("task {id} not listed: {tasks}"))
}

/// Kills and removes task and container `id`, whatever their state.
fn remove(ctr: &Ctr, id: &str) {
    ctr.cmd(&["task", "kill", "-s", "SIGKILL", id]);
    let _ = wait_until(Duration::from_secs(10), || stopped(ctr, id));
    ctr.cmd(&["task", "rm", "-f", id]);
    ctr.cmd(&["container", "rm", id]);
}

fn stopped(ctr: &Ctr, id: &str) -> Result<(), String> {
    let tasks = ctr.cmd(&["task", "ls"]).ok()?;
    let row = tasks
        .lines()
        .find(|line| line.split_whitespace().next() == Some(id));
    match row {
        Some(line) if !line.contains("STOPPED") => Err(format!("task not stopped: {line}")),
        _ => Ok(()),
    }
}

fn detached_lifecycle(ctr: &Ctr) -> Result<(), String> {
    let id = "pier-test-detached";
    let result = (|| {
        start_detached(ctr, id, &[])?;
        let exec = [
            "task",
            "exec",
            "--exec-id",
            "pier-test-exec",
            id,
            "sh",
            "-c",
            "echo in-exec; exit 5",
        ];
        ctr.cmd(&exec).expect(5, &["in-exec\n"])?;
        ctr.cmd(&["task", "kill", "-s", "SIGKILL", id]).ok()?;
        wait_until(Duration::from_secs(10), || stopped(ctr, id))?;
        let removed = ctr.cmd(&["task", "rm", id]);
        if !removed.stderr.contains("137") {
            return Err(format!("task rm did not report exit code 137: {removed}"));
        }
        ctr.cmd(&["container", "rm", id]).ok()?;
        let left = ctr.cmd(&["container", "ls", "-q"]).ok()?;
        if left.lines().any(|line| line == id) {
            return Err(format!("container still listed after rm: {left}"));
        }
        Ok(())
    })();
    if result.is_err() {
        remove(ctr, id);
    }
    result
}

/// Runs `ctr <args>` on a fresh pty: ctr's `-t` wants a terminal on its own stdin, `script` gives it one.
fn on_pty(ctr: &Ctr, args: &str) -> Outcome {
    let line = format!(
        "{} --address {} --namespace {NAMESPACE} {args}",
        ctr.program.display(),
        ctr.address
    );
    match find_program("script") {
        Some(script) => run(&script, &["-qec", &line, "/dev/null"]),
        None => panic!("script not installed (apt: bsdutils)"),
    }
}

fn terminal(ctr: &Ctr) -> Result<(), String> {
    let args = format!(
        "run --rm -t --runc-binary {} {IMAGE_REF} pier-test-tty sh -c 'tty; echo tty-ok'",
        ctr.runtime
    );
    let result = on_pty(ctr, &args).expect(0, &["/dev/pts/", "tty-ok"]);
    if result.is_err() {
        remove(ctr, "pier-test-tty");
    }
    result
}

fn exec_terminal(ctr: &Ctr) -> Result<(), String> {
    let id = "pier-test-exec-tty";
    let result = start_detached(ctr, id, &[]).and_then(|_| {
        let args = format!("task exec -t --exec-id pier-test-tty {id} sh -c 'tty; echo tty-ok'");
        on_pty(ctr, &args).expect(0, &["/dev/pts/", "tty-ok"])
    });
    remove(ctr, id);
    result
}

fn limits(ctr: &Ctr) -> Result<(), String> {
    let id = "pier-test-limits";
    let result = start_detached(ctr, id, &["--memory-limit", "67108864", "--cpus", "0.5"])
        .and_then(|pid| host_limits(&pid))
        .and_then(|seen| expect_limits(&seen));
    remove(ctr, id);
    result
}
