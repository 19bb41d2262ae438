//! What runs in the forked processes: the container's init, and a `pier exec` process.
//!
//! Theory of operation: the child is a copy of the single-threaded runtime, so it uses the
//! already parsed spec and compiled seccomp program without re-reading anything, and never
//! returns: it ends in `execve` or `exit`. The init's path, kept short on purpose: join the v1
//! cgroups → [wait for `Go` if the parent has work first] → setns/unshare → hostname and
//! domainname → `rootfs::setup` (createContainer hooks before the pivot) → console →
//! `rootfs::finalize` → check that the program exists (so `create` fails like runc's) → report
//! `Created` → block reading the exec fifo until `start` writes it → startContainer hooks →
//! `process::exec`. Any failure before `Created` goes back to the parent as text over the sync
//! socket; after it, the parent is gone and the failure is printed on the init's stderr.
//! A panic is caught so that no destructor of the parent's objects runs in the child.
//!
//! Privileges: those of the runtime (root). Tests: crates/runtime/tests/priv_lifecycle.rs.
use crate::container::Stdio;
use crate::hooks::{self, Phase};
use crate::listener::Listener;
use crate::namespaces::{self, Plan};
use crate::process::{self, console, Exec};
use crate::rootfs;
use crate::sync::{Msg, Sync};
use nix::sched::{setns, CloneFlags};
use oci_spec::runtime::{Process, Spec};
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// What the init needs from its parent.
#[derive(Debug)]
pub struct Init<'a> {
    /// The container's spec.
    pub spec: &'a Spec,
    /// Absolute rootfs path.
    pub rootfs: &'a Path,
    /// Namespaces to join/unshare.
    pub plan: &'a Plan,
    /// The container's v1 `tasks` files, joined first.
    pub cgroup: &'a pier_cgroups::SelfJoin,
    /// Child end of the sync socket.
    pub sync: Sync,
    /// The exec fifo, opened read-write: the init blocks reading it.
    pub fifo: OwnedFd,
    /// Connected `--console-socket`.
    pub console: Option<OwnedFd>,
    /// Standard streams replacing the inherited ones (an in-process caller's pipes).
    pub stdio: Option<Stdio>,
    /// Compiled seccomp filter.
    pub seccomp: Option<&'a pier_seccomp::Program>,
    /// The seccomp agent's socket, for a NOTIFY profile.
    pub listener: Option<&'a Listener>,
    /// `--no-pivot`.
    pub no_pivot: bool,
    /// `--no-new-keyring`.
    pub no_new_keyring: bool,
    /// `--preserve-fds`.
    pub preserve_fds: u32,
    /// `LISTEN_FDS` to pass through.
    pub listen_fds: u32,
    /// The parent sends `Go` before the init may continue.
    pub wait_go: bool,
    /// OCI state JSON for container hooks when the parent sends none.
    pub state_json: Vec<u8>,
}

/// Runs the container's init; never returns.
pub fn run(mut init: Init) -> ! {
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| prepare(&mut init)));
    let state_json = match result {
        Ok(Ok(state)) => state,
        Ok(Err(text)) => fail(&init.sync, text),
        Err(_) => fail(&init.sync, "container init panicked".into()),
    };
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| start(&init, &state_json)));
    let text = match err {
        Ok(text) => text,
        Err(_) => "container init panicked".into(),
    };
    report(&text);
    std::process::exit(127)
}

fn fail(sync: &Sync, text: String) -> ! {
    if sync.send(&Msg::Failed(text.clone())).is_err() {
        report(&text);
    }
    std::process::exit(1)
}

/// Writes a failure on stderr directly (not through `eprintln!`, which a test harness may
/// capture in memory that this forked process never hands back).
fn report(text: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("pier: container init: {text}\n").as_bytes());
}

/// Everything up to `Created`; returns the state JSON for the startContainer hooks.
fn prepare(init: &mut Init) -> Result<Vec<u8>, String> {
    if let Some(stdio) = init.stdio.take() {
        set_stdio(stdio)?;
    }
    init.cgroup.join().map_err(|e| e.to_string())?;
    let mut state_json = init.state_json.clone();
    if init.wait_go {
        match init
            .sync
            .recv()
            .map_err(|e| format!("read sync socket: {e}"))?
        {
            Some(Msg::Go(state)) => state_json = state,
            _ => std::process::exit(1),
        }
    }
    namespaces::become_root(init.plan)?;
    namespaces::enter(init.plan, init.spec)?;
    namespaces::unshare_cgroup(init.plan)?;
    set_names(init.spec, init.plan)?;
    let container_hooks = init
        .spec
        .hooks()
        .as_ref()
        .and_then(|h| h.create_container().clone());
    let mut before_pivot = || match &container_hooks {
        Some(list) => {
            hooks::run(Phase::CreateContainer, list, &state_json).map_err(|e| e.to_string())
        }
        None => Ok(()),
    };
    let opts = rootfs::Options {
        no_pivot: init.no_pivot,
    };
    rootfs::setup(init.spec, init.rootfs, &opts, &mut before_pivot).map_err(|e| e.to_string())?;
    // Taken, so the socket closes once the master is sent (the caller may wait for that).
    if let Some(socket) = init.console.take() {
        let size = init.spec.process().as_ref().and_then(|p| p.console_size());
        console::setup_in_container_sized(socket, size.as_ref()).map_err(|e| e.to_string())?;
    }
    rootfs::finalize(init.spec).map_err(|e| e.to_string())?;
    if let Some(process) = init.spec.process() {
        check_executable(process)?;
    }
    init.sync
        .send(&Msg::Created)
        .map_err(|e| format!("report created: {e}"))?;
    Ok(state_json)
}

/// Makes the given streams fds 0, 1 and 2 (dup2 clears close-on-exec on the copies).
fn set_stdio(stdio: Stdio) -> Result<(), String> {
    use nix::unistd::{dup2_stderr, dup2_stdin, dup2_stdout};
    dup2_stdin(&stdio.stdin).map_err(|e| format!("dup2 stdin: {e}"))?;
    dup2_stdout(&stdio.stdout).map_err(|e| format!("dup2 stdout: {e}"))?;
    dup2_stderr(&stdio.stderr).map_err(|e| format!("dup2 stderr: {e}"))
}

/// After `Created`: waits for `start`, runs startContainer hooks, execs. Returns the failure.
fn start(init: &Init, state_json: &[u8]) -> String {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(init.fifo.as_fd(), &mut byte) {
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return format!("wait on exec fifo: {e}"),
            Ok(_) => break,
        }
    }
    if let Some(list) = init
        .spec
        .hooks()
        .as_ref()
        .and_then(|h| h.start_container().as_ref())
    {
        if let Err(e) = hooks::run(Phase::StartContainer, list, state_json) {
            return e.to_string();
        }
    }
    let Some(process) = init.spec.process().as_ref() else {
        return "config.json: process: missing".into();
    };
    let exec = Exec {
        process,
        personality: init
            .spec
            .linux()
            .as_ref()
            .and_then(|l| l.personality().as_ref()),
        seccomp: init.seccomp,
        preserve_fds: init.preserve_fds,
        listen_fds: init.listen_fds,
        no_new_keyring: init.no_new_keyring,
    };
    exec_process(&exec, init.listener, state_json)
}

/// `process::exec`, handing a seccomp NOTIFY listener to the agent; returns the failure.
fn exec_process(exec: &Exec, listener: Option<&Listener>, state_json: &[u8]) -> String {
    let mut on_listener = |fd: OwnedFd| match listener {
        Some(listener) => listener.send(fd, state_json),
        None => Err("SCMP_ACT_NOTIFY needs linux.seccomp.listenerPath".to_string()),
    };
    process::exec(exec, &mut on_listener).to_string()
}

/// Fails `create` (not the later `start`) when the program does not exist, with runc's texts:
/// Docker and containerd turn them into exit code 127.
fn check_executable(process: &Process) -> Result<(), String> {
    let Some(name) = process.args().as_ref().and_then(|a| a.first()) else {
        return Err("config.json: process.args: empty".into());
    };
    if name.contains('/') {
        let path = process.cwd().join(name);
        return match path.exists() {
            true => Ok(()),
            false => Err(format!(
                "exec: {name:?}: stat {name}: no such file or directory"
            )),
        };
    }
    let env = process.env().as_deref().unwrap_or_default();
    let path = env.iter().rev().find_map(|e| e.strip_prefix("PATH="));
    let found = path
        .unwrap_or("/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
        .split(':')
        .any(|dir| dir.starts_with('/') && Path::new(dir).join(name).is_file());
    match found {
        true => Ok(()),
        false => Err(format!(
            "exec: {name:?}: executable file not found in $PATH"
        )),
    }
}

fn set_names(spec: &Spec, plan: &Plan) -> Result<(), String> {
    if !plan.new_uts {
        return Ok(());
    }
    if let Some(name) = spec.hostname().as_deref() {
        nix::unistd::sethostname(name).map_err(|e| format!("sethostname {name:?}: {e}"))?;
    }
    if let Some(name) = spec.domainname().as_deref() {
        // Per-uts-namespace sysctl: the same as setdomainname(2) without an unsafe wrapper.
        std::fs::write("/proc/sys/kernel/domainname", name)
            .map_err(|e| format!("setdomainname {name:?}: {e}"))?;
    }
    Ok(())
}

/// What a `pier exec` process needs.
#[derive(Debug)]
pub struct ExecChild<'a> {
    /// Pidfd of the container's init.
    pub init: &'a OwnedFd,
    /// Namespaces to join through it (pid excluded: the parent joined it for its children).
    pub ns_flags: CloneFlags,
    /// The container's v1 `tasks` files.
    pub cgroup: Option<&'a pier_cgroups::SelfJoin>,
    /// The process to run.
    pub process: &'a Process,
    /// Child end of the sync socket (end-of-file tells the parent the exec happened).
    pub sync: Sync,
    /// Connected `--console-socket`.
    pub console: Option<OwnedFd>,
    /// The container's seccomp filter.
    pub seccomp: Option<&'a pier_seccomp::Program>,
    /// The seccomp agent's socket, for a NOTIFY profile.
    pub listener: Option<&'a Listener>,
    /// The container's OCI state JSON (for the seccomp agent).
    pub state_json: &'a [u8],
    /// The container's `linux.personality`.
    pub personality: Option<&'a oci_spec::runtime::LinuxPersonality>,
    /// `--preserve-fds`.
    pub preserve_fds: u32,
}

/// Runs an exec'd process: joins the container in one setns, then execs; never returns.
pub fn exec_child(mut child: ExecChild) -> ! {
    let result =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| enter_and_exec(&mut child)));
    let text = result.unwrap_or_else(|_| "exec process panicked".into());
    fail(&child.sync, text)
}

fn enter_and_exec(child: &mut ExecChild) -> String {
    if let Some(Err(e)) = child.cgroup.map(|c| c.join()) {
        return e.to_string();
    }
    if !child.ns_flags.is_empty() {
        if let Err(e) = setns(child.init.as_fd(), child.ns_flags) {
            return format!("setns into the container ({:?}): {e}", child.ns_flags);
        }
    }
    if let Some(socket) = child.console.take() {
        let size = child.process.console_size();
        if let Err(e) = console::setup_for_exec(socket, size.as_ref()) {
            return e.to_string();
        }
    }
    let exec = Exec {
        process: child.process,
        personality: child.personality,
        seccomp: child.seccomp,
        preserve_fds: child.preserve_fds,
        listen_fds: 0,
        no_new_keyring: true,
    };
    exec_process(&exec, child.listener, child.state_json)
}
