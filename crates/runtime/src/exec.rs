//! `exec`: a new process in a running container.
//!
//! Theory of operation: a pidfd of the container's init (checked against the recorded start time)
//! is the handle on every namespace of the container. This process enters the container's pid
//! namespace for its children only, forks with `clone3` directly into the container's cgroup2
//! directory and returns to its own pid namespace; the child moves itself into the v1
//! hierarchies, joins all other namespaces in one `setns(pidfd, flags)` (kernel 5.8+) and hands
//! over to `process::exec`. The sync socket is close-on-exec: end-of-file means the program was
//! exec'd, a message is the failure.
//!
//! Privileges: root. Tests: crates/runtime/tests/priv_lifecycle.rs.
use crate::container::{Error, ExecOptions, Runtime, Stdio};
use crate::init::{self, ExecChild};
use crate::listener::Listener;
use crate::namespaces::PidForChildren;
use crate::process::console;
use crate::spec;
use crate::state::{self, Record, Status};
use crate::sync::{self, Msg};
use crate::wait;
use nix::sched::CloneFlags;
use oci_spec::runtime::Spec;
use pier_sys::clone::Forked;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

/// What `exec` prepared before the fork.
#[derive(Debug)]
struct Staged {
    record: Record,
    spec: Spec,
    init: OwnedFd,
    flags: CloneFlags,
    seccomp: Option<pier_seccomp::Program>,
    listener: Option<Listener>,
    state_json: Vec<u8>,
    console: Option<OwnedFd>,
    stdio: Option<Stdio>,
    cgroup_fd: Option<OwnedFd>,
    self_join: Option<pier_cgroups::SelfJoin>,
    parent_sync: sync::Sync,
    child_sync: sync::Sync,
}

/// `exec ID`: returns the exit code, or 0 with `--detach` once the program was exec'd.
pub fn exec(rt: &Runtime, id: &str, opts: &ExecOptions) -> Result<i32, Error> {
    let (_, pidfd) = spawn(rt, id, opts, None)?;
    match opts.detach {
        true => Ok(0),
        false => wait::wait_forwarding(&pidfd),
    }
}

/// Starts the process and returns once it was exec'd: its pid and pidfd (a child of ours).
/// `stdio` replaces the caller's standard streams in the process.
pub fn spawn(
    rt: &Runtime,
    id: &str,
    opts: &ExecOptions,
    stdio: Option<Stdio>,
) -> Result<(i32, OwnedFd), Error> {
    let mut staged = stage(rt, id, opts)?;
    staged.stdio = stdio;
    let pid_ns = match staged.flags.contains(CloneFlags::CLONE_NEWPID) {
        true => {
            let path = PathBuf::from(format!("/proc/{}/ns/pid", staged.record.state.pid));
            Some(PidForChildren::enter(&staged.init, &path)?)
        }
        false => None,
    };
    let forked = pier_sys::clone::fork(0, staged.cgroup_fd.as_ref().map(|fd| fd.as_fd()));
    let (pid, pidfd, in_cgroup) = match forked.map_err(Error::Clone)? {
        Forked::Child => {
            // The child stays in the joined pid namespace: no way back, and no need.
            std::mem::forget(pid_ns);
            run_child(staged, opts)
        }
        Forked::Parent {
            pid,
            pidfd,
            in_cgroup,
        } => (pid, pidfd, in_cgroup),
    };
    drop(pid_ns);
    let Staged {
        record,
        parent_sync,
        child_sync,
        console,
        stdio,
        cgroup_fd,
        ..
    } = staged;
    // Only the child may hold its end: the end-of-file that means "exec'd" needs that.
    drop((child_sync, console, stdio));
    if cgroup_fd.is_some() && !in_cgroup {
        join_v2(&record, pid, &pidfd)?;
    }
    await_exec(&parent_sync, &pidfd)?;
    if let Some(path) = &opts.pid_file {
        state::write_atomic(path, pid.to_string().as_bytes())
            .map_err(|e| Error::io("write pid file", path, e))?;
    }
    Ok((pid, pidfd))
}

/// Checks the container's state and opens everything the child needs.
fn stage(rt: &Runtime, id: &str, opts: &ExecOptions) -> Result<Staged, Error> {
    state::validate_id(id)?;
    let dir = rt.root.join(id);
    let record = state::load(&dir, id)?;
    match state::live_status(&dir, &record) {
        Status::Stopped => return Err(Error::Usage("cannot exec in a stopped container")),
        Status::Paused => return Err(Error::Usage("cannot exec in a paused container")),
        _ => {}
    }
    let terminal = opts.process.terminal().unwrap_or(false);
    if terminal && opts.detach && opts.console_socket.is_none() {
        let text = "cannot allocate tty if runc will detach without setting console socket";
        return Err(Error::Usage(text));
    }
    let init = crate::container::open_init(&record)?;
    let spec = spec::load(&record.state.bundle)?.spec;
    let seccomp = spec::seccomp_program(&rt.root, &spec)?;
    let listener = match (&seccomp, spec::seccomp_profile(&spec)) {
        (Some(program), Some(profile)) if program.needs_listener() => Listener::open(profile)?,
        _ => None,
    };
    let console = match &opts.console_socket {
        Some(path) => Some(console::connect(path).map_err(Error::Console)?),
        None => None,
    };
    let self_join = match &record.cgroup {
        Some(cgroup) => Some(cgroup.self_join().map_err(|e| Error::Cgroup {
            step: "open tasks files",
            source: e,
        })?),
        None => None,
    };
    let (parent_sync, child_sync) =
        sync::pair().map_err(|e| Error::io("create sync socket", &dir, e))?;
    Ok(Staged {
        flags: namespace_flags(&spec, record.state.pid),
        cgroup_fd: record.cgroup.as_ref().and_then(|c| c.clone_into_fd()),
        state_json: record.state_json(Status::Running),
        record,
        spec,
        init,
        seccomp,
        listener,
        console,
        stdio: None,
        self_join,
        parent_sync,
        child_sync,
    })
}

/// In the forked child: becomes the exec'd process.
fn run_child(staged: Staged, opts: &ExecOptions) -> ! {
    let Staged {
        spec,
        init,
        flags,
        seccomp,
        listener,
        state_json,
        console,
        stdio,
        self_join,
        ..
    } = staged;
    let Staged {
        parent_sync,
        child_sync,
        ..
    } = staged;
    drop(parent_sync);
    init::exec_child(ExecChild {
        init: &init,
        ns_flags: flags - CloneFlags::CLONE_NEWPID,
        cgroup: self_join.as_ref(),
        process: &opts.process,
        sync: child_sync,
        console,
        stdio,
        seccomp: seccomp.as_ref(),
        listener: listener.as_ref(),
        state_json: &state_json,
        personality: spec.linux().as_ref().and_then(|l| l.personality().as_ref()),
        preserve_fds: opts.preserve_fds,
    })
}

/// End-of-file on the close-on-exec sync socket: the program runs. A message: the failure.
fn await_exec(sync: &sync::Sync, pidfd: &OwnedFd) -> Result<(), Error> {
    let err = match sync.recv() {
        Ok(None) => return Ok(()),
        Ok(Some(Msg::Failed(text))) => Error::Init(text),
        Ok(Some(_)) => Error::Init("unexpected message from the exec process".into()),
        Err(e) => Error::Wait(e),
    };
    Err(fail(pidfd, err))
}

/// Fallback when clone3 could not place the process in the cgroup2 directory.
fn join_v2(record: &Record, pid: i32, pidfd: &OwnedFd) -> Result<(), Error> {
    let Some(cgroup) = &record.cgroup else {
        return Ok(());
    };
    cgroup.add_process(pid, false).map_err(|e| {
        fail(
            pidfd,
            Error::Cgroup {
                step: "add the exec process",
                source: e,
            },
        )
    })
}

fn fail(pidfd: &OwnedFd, err: Error) -> Error {
    crate::create::kill_and_reap(pidfd);
    err
}

/// The namespaces of the spec, minus a user namespace that is already ours (setns would refuse).
fn namespace_flags(spec: &Spec, init_pid: i32) -> CloneFlags {
    let namespaces = spec.linux().as_ref().and_then(|l| l.namespaces().as_ref());
    let mut flags = CloneFlags::empty();
    for ns in namespaces.into_iter().flatten() {
        flags |= CloneFlags::from_bits_retain(ns.typ() as i32);
    }
    if flags.contains(CloneFlags::CLONE_NEWUSER) && same_user_ns(init_pid) {
        flags -= CloneFlags::CLONE_NEWUSER;
    }
    flags
}

fn same_user_ns(pid: i32) -> bool {
    let ino = |p: String| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    ino("/proc/self/ns/user".into()) == ino(format!("/proc/{pid}/ns/user"))
}
