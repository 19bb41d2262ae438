//! Black-box tests of the container lifecycle through the pier binary, driven the way
//! containerd's shim and conmon drive runc: create/state/start/ps/kill/delete, run with an exit
//! code, run -d with exec, pause/resume, update, delete --force, list. Needs root (skips outside
//! CI without it).
mod support;

use serde_json::{json, Value};
use std::io::Write;
use std::process::Stdio;
use support::{assert_no_trace, cgroup_v1_dir, describe, require_root, unique_id, Bundle, Pier};

fn arg(path: &std::path::Path) -> &str {
    path.to_str().expect("UTF-8 path")
}

#[test]
fn create_state_start_ps_kill_delete() {
    if !require_root("create_state_start_ps_kill_delete") {
        return;
    }
    let bundle = Bundle::busybox(&["sleep", "1000"]);
    let pier = Pier::new();
    let id = unique_id("life");
    // Relative --bundle and --pid-file, resolved against the caller's directory.
    let out = support::finish(
        pier.command(&["create", "--bundle", ".", "--pid-file", "init.pid", &id])
            .current_dir(bundle.path()),
    );
    assert!(out.status.success(), "{}", describe(&out));
    let pid: i64 = std::fs::read_to_string(bundle.path().join("init.pid"))
        .expect("the pid file is written")
        .trim()
        .parse()
        .expect("the pid file holds a number");
    let state = pier.state(&id);
    assert_eq!(state["status"], "created", "{state}");
    assert_eq!(state["id"], Value::from(id.as_str()));
    assert_eq!(state["pid"], pid);
    assert_eq!(state["bundle"], Value::from(arg(bundle.path())));
    assert!(state["ociVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("1.")));

    pier.ok(&["start", &id]);
    pier.wait_status(&id, "running");

    let out = pier.run(&["ps", "--format", "json", &id]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        out.stderr.is_empty(),
        "ps json wrote to stderr: {}",
        describe(&out)
    );
    let pids: Vec<i64> = serde_json::from_slice(&out.stdout).expect("ps prints a JSON array");
    assert_eq!(pids, vec![pid]);
    let table = pier.ok(&["ps", &id]);
    assert!(
        table.lines().next().unwrap_or_default().contains("PID"),
        "{table}"
    );
    assert!(table.contains("sleep 1000"), "{table}");

    let stderr = pier.fails(&["delete", &id]);
    assert!(
        stderr.contains("running"),
        "delete of a running container: {stderr}"
    );
    pier.ok(&["kill", &id, "KILL"]);
    pier.wait_status(&id, "stopped");
    pier.ok(&["delete", &id]);
    let stderr = pier.fails(&["state", &id]);
    assert!(stderr.contains("does not exist"), "{stderr}");
    let stderr = pier.fails(&["delete", &id]);
    assert!(stderr.contains("does not exist"), "{stderr}");
    pier.ok(&["delete", "--force", &id]);
    assert_no_trace(&pier, &bundle, &id);
}

#[test]
fn delete_of_a_created_container() {
    if !require_root("delete_of_a_created_container") {
        return;
    }
    let bundle = Bundle::busybox(&["true"]);
    let pier = Pier::new();
    let id = unique_id("created");
    pier.ok(&["create", "--bundle", arg(bundle.path()), &id]);
    pier.ok(&["delete", &id]);
    assert_no_trace(&pier, &bundle, &id);
}

#[test]
fn run_returns_output_and_exit_code() {
    if !require_root("run_returns_output_and_exit_code") {
        return;
    }
    let pier = Pier::new();
    let bundle = Bundle::busybox(&["sh", "-c", "echo hello from pier; exit 7"]);
    let id = unique_id("run");
    let out = pier.run(&["run", "--bundle", arg(bundle.path()), &id]);
    assert_eq!(out.status.code(), Some(7), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello from pier\n");
    assert_no_trace(&pier, &bundle, &id);

    // Killed from outside while `run` waits (a pid-namespace init ignores its own SIGKILL).
    let sleeper = Bundle::busybox(&["sleep", "1000"]);
    let id = unique_id("run");
    let stdio = || tempfile::tempfile().unwrap();
    let mut run = pier
        .command(&["run", "--bundle", arg(sleeper.path()), &id])
        .stdout(stdio())
        .stderr(stdio())
        .spawn()
        .unwrap();
    pier.wait_status(&id, "running");
    pier.ok(&["kill", &id, "KILL"]);
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(128 + 9), "{status}");
    assert_no_trace(&pier, &sleeper, &id);
}

#[test]
fn run_detached_then_exec_pause_update_list_delete_force() {
    if !require_root("run_detached_then_exec_pause_update_list_delete_force") {
        return;
    }
    let bundle = Bundle::busybox(&["sleep", "1000"]);
    bundle.edit_config(|c| {
        c["process"]["env"] = json!(["PATH=/bin", "GREETING=hello"]);
    });
    let pier = Pier::new();
    let id = unique_id("detach");
    pier.ok(&["run", "-d", "--bundle", arg(bundle.path()), &id]);
    pier.wait_status(&id, "running");
    let pid = pier.state(&id)["pid"].as_i64().unwrap();

    check_exec(&pier, &id, &bundle);
    check_pause_resume(&pier, &id);
    check_update(&pier, &id, pid);
    check_list(&pier, &id, pid);

    pier.ok(&["delete", "--force", &id]);
    assert_no_trace(&pier, &bundle, &id);
}

fn check_exec(pier: &Pier, id: &str, bundle: &Bundle) {
    assert_eq!(pier.ok(&["exec", id, "echo", "hi"]), "hi\n");
    let out = pier.ok(&[
        "exec",
        "-e",
        "GREETING=bonjour",
        "--cwd",
        "/tmp",
        id,
        "sh",
        "-c",
        "echo $GREETING $PATH $(pwd)",
    ]);
    assert_eq!(out, "bonjour /bin /tmp\n");
    assert_eq!(
        pier.ok(&["exec", "-u", "1000:1000", id, "id", "-u"]),
        "1000\n"
    );
    let out = pier.run(&["exec", id, "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3), "{}", describe(&out));

    // As containerd's shim does it: --process FILE --detach --pid-file.
    let process = json!({"args": ["sleep", "500"], "cwd": "/", "env": ["PATH=/bin"],
                         "user": {"uid": 0, "gid": 0}, "terminal": false});
    let process_file = bundle.path().join("process.json");
    std::fs::write(&process_file, process.to_string()).unwrap();
    let pid_file = bundle.path().join("exec.pid");
    pier.ok(&[
        "exec",
        "--process",
        arg(&process_file),
        "--detach",
        "--pid-file",
        arg(&pid_file),
        id,
    ]);
    let exec_pid: i64 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pids: Vec<i64> = serde_json::from_str(&pier.ok(&["ps", "--format", "json", id])).unwrap();
    assert!(pids.contains(&exec_pid), "{exec_pid} not in {pids:?}");

    let stderr = pier.fails(&["exec", "--process", "/pier-test-no-such-process.json", id]);
    assert!(
        stderr.contains("/pier-test-no-such-process.json"),
        "{stderr}"
    );
}

fn check_pause_resume(pier: &Pier, id: &str) {
    pier.ok(&["pause", id]);
    assert_eq!(pier.state(id)["status"], "paused");
    pier.ok(&["resume", id]);
    assert_eq!(pier.state(id)["status"], "running");
}

fn check_update(pier: &Pier, id: &str, pid: i64) {
    pier.ok(&["update", "--pids-limit", "50", "--memory", "64m", id]);
    let pids_max = cgroup_v1_dir(pid, "pids").join("pids.max");
    assert_eq!(std::fs::read_to_string(&pids_max).unwrap().trim(), "50");
    let memory_limit = cgroup_v1_dir(pid, "memory").join("memory.limit_in_bytes");
    assert_eq!(
        std::fs::read_to_string(&memory_limit).unwrap().trim(),
        (64 << 20).to_string()
    );

    let mut child = pier
        .command(&["update", "--resources", "-", id])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(br#"{"pids": {"limit": 60}}"#).unwrap();
    drop(stdin);
    let status = child.wait().unwrap();
    assert!(status.success(), "update --resources - failed: {status}");
    assert_eq!(std::fs::read_to_string(&pids_max).unwrap().trim(), "60");
}

fn check_list(pier: &Pier, id: &str, pid: i64) {
    let list: Value = serde_json::from_str(&pier.ok(&["list", "--format", "json"])).unwrap();
    let entries = list.as_array().expect("list json is an array");
    assert_eq!(entries.len(), 1, "{list}");
    assert_eq!(entries[0]["id"], Value::from(id));
    assert_eq!(entries[0]["pid"], pid);
    assert_eq!(entries[0]["status"], "running");
    assert_eq!(pier.ok(&["list", "-q"]), format!("{id}\n"));
    let table = pier.ok(&["list"]);
    assert!(table.starts_with("ID "), "{table}");
    assert!(table.contains(&format!("{id} {pid} running")), "{table}");
}

#[test]
fn kill_all_reaches_every_process() {
    if !require_root("kill_all_reaches_every_process") {
        return;
    }
    let bundle = Bundle::busybox(&["sh", "-c", "sleep 1000 & sleep 1000 & wait"]);
    let pier = Pier::new();
    let id = unique_id("killall");
    pier.ok(&["run", "-d", "--bundle", arg(bundle.path()), &id]);
    pier.ok(&["kill", "--all", &id, "9"]);
    pier.wait_status(&id, "stopped");
    pier.ok(&["delete", &id]);
    assert_no_trace(&pier, &bundle, &id);
}

/// Receives the pty master on a console socket (as containerd's shim and conmon do) and prints
/// what the container writes to its terminal. Python's `socket.recv_fds` does the SCM_RIGHTS
/// part, which keeps this test free of unsafe fd handling.
const CONSOLE_RECEIVER: &str = r#"
import os, select, socket, sys
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(sys.argv[1])
server.listen(1)
print("ready", flush=True)
server.settimeout(20)
conn, _ = server.accept()
_, fds, _, _ = socket.recv_fds(conn, 1024, 1)
out = b""
while select.select([fds[0]], [], [], 20)[0]:
    try:
        chunk = os.read(fds[0], 4096)
    except OSError:
        break
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.decode(errors="replace"))
"#;

/// The console receiver, killed if the test ends before it does.
struct Receiver(std::process::Child);

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn terminal_through_console_socket() {
    if !require_root("terminal_through_console_socket") {
        return;
    }
    let bundle = Bundle::busybox(&["sh", "-c", "tty; echo hello-tty"]);
    bundle.edit_config(|c| c["process"]["terminal"] = Value::Bool(true));
    let socket = bundle.path().join("console.sock");
    let mut receiver = Receiver(
        std::process::Command::new("python3")
            .args(["-c", CONSOLE_RECEIVER, arg(&socket)])
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 runs the console receiver"),
    );
    let mut stdout = std::io::BufReader::new(receiver.0.stdout.take().unwrap());
    let mut ready = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut ready).unwrap();
    assert_eq!(ready, "ready\n");

    let pier = Pier::new();
    let id = unique_id("tty");
    pier.ok(&[
        "create",
        "--console-socket",
        arg(&socket),
        "--bundle",
        arg(bundle.path()),
        &id,
    ]);
    pier.ok(&["start", &id]);
    let mut screen = String::new();
    std::io::Read::read_to_string(&mut stdout, &mut screen).unwrap();
    assert!(receiver.0.wait().unwrap().success());
    assert!(
        screen.contains("/dev/pts/"),
        "tty printed no pty: {screen:?}"
    );
    assert!(screen.contains("hello-tty"), "{screen:?}");
    pier.wait_status(&id, "stopped");
    pier.ok(&["delete", &id]);
    assert_no_trace(&pier, &bundle, &id);
}
