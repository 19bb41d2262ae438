//! `create`, the runtime's side: from a bundle to an init held before the user program.
//!
//! Theory of operation: everything expensive or fallible that does not need the container's
//! namespaces happens in this process before the fork, so the init's path stays short: the
//! config is parsed once, namespace paths opened, the cgroup created (and recorded in
//! `state.json` right away), the seccomp program taken from the cache or compiled, the console
//! socket connected, the exec fifo made. Then one `clone3` creates the init with its pidfd,
//! directly in the cgroup2 directory, with its new namespaces; the init's first act is to move
//! itself into the v1 hierarchies through `tasks` files opened here (writing `0` there skips the
//! RCU grace period a `cgroup.procs` write of another pid waits for: ~0.05 ms instead of ~6 ms).
//! While the init sets itself up, this process writes the user namespace maps and runs
//! the createRuntime/prestart hooks; only if any of that is needed does the init wait for `Go`.
//! The init answers `Created` or the text of its failure. Any failure undoes everything in
//! reverse ([`Undo`]): kill and reap the init, destroy the cgroup, remove the state directory.
//!
//! Privileges: root (namespaces, cgroups, mounts). Tests: crates/runtime/tests/priv_lifecycle.rs.
use crate::container::{CreateOptions, Error, Runtime, State, Stdio};
use crate::hooks::{self, Phase};
use crate::init::{self, Init};
use crate::listener::Listener;
use crate::namespaces::{self, PidForChildren, Plan};
use crate::process::console;
use crate::spec::{self, Bundle};
use crate::state::{self, Dir, Record, Status};
use crate::sync::{self, Msg};
use nix::sys::stat::Mode;
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use oci_spec::runtime::{Hook, Hooks, Spec};
use pier_cgroups::Cgroup;
use pier_sys::clone::Forked;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

/// A created container, as `run` continues with it.
#[derive(Debug)]
pub struct Created {
    /// Pid of the init (in this process's pid namespace).
    pub pid: i32,
    /// Pidfd of the init (a child of this process).
    pub pidfd: OwnedFd,
}

/// Undoes a half-made container when dropped armed.
#[derive(Debug)]
struct Undo {
    dir: PathBuf,
    cgroup: Option<Cgroup>,
    init: Option<OwnedFd>,
    armed: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Some(pidfd) = &self.init {
            kill_and_reap(pidfd);
        }
        if let Some(cgroup) = &self.cgroup {
            if let Err(e) = cgroup.destroy() {
                log::warn!("cleanup after failed create: destroy cgroup: {e}");
            }
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            log::warn!(
                "cleanup after failed create: remove {}: {e}",
                self.dir.display()
            );
        }
    }
}

/// SIGKILLs a child of ours through its pidfd and reaps it.
pub fn kill_and_reap(pidfd: &OwnedFd) {
    let _ = pier_sys::pidfd::send_signal(pidfd, libc::SIGKILL);
    while let Err(nix::errno::Errno::EINTR) = waitid(Id::PIDFd(pidfd.as_fd()), WaitPidFlag::WEXITED)
    {
    }
}

/// What `create` made before the fork, in the order it made it.
#[derive(Debug)]
struct Staged {
    bundle: Bundle,
    plan: Plan,
    dir: Dir,
    undo: Undo,
    record: Record,
    cgroup: Cgroup,
    cgroup_fd: Option<OwnedFd>,
    self_join: pier_cgroups::SelfJoin,
    seccomp: Option<pier_seccomp::Program>,
    listener: Option<Listener>,
    console: Option<OwnedFd>,
    stdio: Option<Stdio>,
    fifo: OwnedFd,
    parent_sync: sync::Sync,
    child_sync: sync::Sync,
    wait_go: bool,
}

/// `create` (and the first half of `run`, which passes `foreground`); `stdio` replaces the
/// caller's standard streams in the init.
pub fn create(
    rt: &Runtime,
    id: &str,
    opts: &CreateOptions,
    foreground: bool,
    stdio: Option<Stdio>,
) -> Result<Created, Error> {
    let mut staged = stage(rt, id, opts, foreground)?;
    staged.stdio = stdio;
    let pid_ns = match &staged.plan.pid_join {
        Some(join) => Some(PidForChildren::enter(&join.file, &join.path)?),
        None => None,
    };
    let cgroup_fd = staged.cgroup_fd.as_ref().map(|fd| fd.as_fd());
    let forked = pier_sys::clone::fork(staged.plan.clone_flags, cgroup_fd);
    let (pid, pidfd, in_cgroup) = match forked.map_err(Error::Clone)? {
        Forked::Child => {
            // The child stays in the joined pid namespace: no way back, and no need.
            std::mem::forget(pid_ns);
            run_init(staged, opts)
        }
        Forked::Parent {
            pid,
            pidfd,
            in_cgroup,
        } => (pid, pidfd, in_cgroup),
    };
    drop(pid_ns);
    finish(staged, opts, pid, pidfd, in_cgroup)
}

/// Everything before the fork: config, state directory, cgroup (recorded at once), seccomp
/// program, console socket, exec fifo, sync socket.
fn stage(rt: &Runtime, id: &str, opts: &CreateOptions, foreground: bool) -> Result<Staged, Error> {
    state::validate_id(id)?;
    let bundle = spec::load(&opts.bundle)?;
    check_terminal(&bundle.spec, opts, foreground)?;
    let plan = Plan::of(&bundle.spec)?;
    let dir = Dir::create(&rt.root, id)?;
    let mut undo = Undo {
        dir: dir.path.clone(),
        cgroup: None,
        init: None,
        armed: true,
    };
    let mut record = new_record(id, &bundle, opts);
    let cgroup = create_cgroup(rt, id, &bundle.spec)?;
    undo.cgroup = Some(cgroup.clone());
    record.cgroup = Some(cgroup.clone());
    dir.save(&record)?;
    let cgroup_error = |step| move |e| Error::Cgroup { step, source: e };
    let self_join = cgroup
        .self_join()
        .map_err(cgroup_error("open tasks files"))?;
    let seccomp = spec::seccomp_program(&rt.root, &bundle.spec)?;
    let listener = match (&seccomp, spec::seccomp_profile(&bundle.spec)) {
        (Some(program), Some(profile)) if program.needs_listener() => Listener::open(profile)?,
        _ => None,
    };
    let console = match &opts.console_socket {
        Some(path) => Some(console::connect(path).map_err(Error::Console)?),
        None => None,
    };
    let fifo = make_fifo(&dir)?;
    let (parent_sync, child_sync) =
        sync::pair().map_err(|e| Error::io("create sync socket", &dir.path, e))?;
    Ok(Staged {
        // The seccomp agent gets the state with the init's pid, which only `Go` carries.
        wait_go: plan.init_waits() || has_hooks_before_start(&bundle.spec) || listener.is_some(),
        cgroup_fd: cgroup.clone_into_fd(),
        bundle,
        plan,
        dir,
        undo,
        record,
        cgroup,
        self_join,
        seccomp,
        listener,
        console,
        stdio: None,
        fifo,
        parent_sync,
        child_sync,
    })
}

/// In the forked child: drops what belongs to the parent (its lock fd, its sync end, the undo
/// guard, which must never run here) and becomes the init.
fn run_init(staged: Staged, opts: &CreateOptions) -> ! {
    let Staged {
        bundle,
        plan,
        dir,
        undo,
        record,
        self_join,
        seccomp,
        listener,
        console,
        stdio,
        fifo,
        parent_sync,
        child_sync,
        wait_go,
        ..
    } = staged;
    std::mem::forget(undo);
    dir.close_in_child();
    drop(parent_sync);
    init::run(Init {
        spec: &bundle.spec,
        rootfs: &bundle.rootfs,
        plan: &plan,
        cgroup: &self_join,
        sync: child_sync,
        fifo,
        console,
        stdio,
        seccomp: seccomp.as_ref(),
        listener: listener.as_ref(),
        no_pivot: opts.no_pivot,
        no_new_keyring: opts.no_new_keyring,
        preserve_fds: opts.preserve_fds,
        listen_fds: listen_fds(),
        wait_go,
        state_json: record.state_json(Status::Creating),
    })
}

/// In the parent after the fork: id maps, v2 cgroup fallback, runtime hooks and `Go`, then the
/// init's answer, the final state and the pid file.
fn finish(
    mut staged: Staged,
    opts: &CreateOptions,
    pid: i32,
    pidfd: OwnedFd,
    in_cgroup: bool,
) -> Result<Created, Error> {
    drop(staged.child_sync);
    drop(staged.fifo);
    drop(staged.console.take());
    drop(staged.stdio.take());
    staged.undo.init = Some(pidfd);
    let (spec, record) = (&staged.bundle.spec, &mut staged.record);
    record.state.pid = pid;
    if staged.plan.new_user {
        namespaces::write_id_maps(pid, spec)?;
    }
    if staged.cgroup_fd.is_some() && !in_cgroup {
        let add = staged.cgroup.add_process(pid, false);
        add.map_err(|e| Error::Cgroup {
            step: "add the init",
            source: e,
        })?;
    }
    if staged.wait_go {
        let state_json = record.state_json(Status::Creating);
        run_runtime_hooks(spec, &state_json)?;
        let sent = staged.parent_sync.send(&Msg::Go(state_json));
        sent.map_err(|e| Error::io("send go to init", &staged.dir.path, e))?;
    }
    await_created(&staged.parent_sync, &staged.dir)?;
    record.init_start_time = state::proc_stat(pid).map(|s| s.start_time).unwrap_or(0);
    record.state.status = Status::Created.as_str().into();
    staged.dir.save(record)?;
    if let Some(path) = &opts.pid_file {
        state::write_atomic(path, pid.to_string().as_bytes())
            .map_err(|e| Error::io("write pid file", path, e))?;
    }
    staged.undo.armed = false;
    let pidfd = staged.undo.init.take().expect("init pidfd recorded above");
    Ok(Created { pid, pidfd })
}

fn check_terminal(spec: &Spec, opts: &CreateOptions, foreground: bool) -> Result<(), Error> {
    let terminal = spec
        .process()
        .as_ref()
        .and_then(|p| p.terminal())
        .unwrap_or(false);
    match (terminal, opts.console_socket.is_some()) {
        (true, false) if !foreground => Err(Error::Usage(
            "cannot allocate tty if runc will detach without setting console socket",
        )),
        (false, true) => Err(Error::Usage(
            "cannot use console socket if runc will not detach or allocate tty",
        )),
        _ => Ok(()),
    }
}

fn new_record(id: &str, bundle: &Bundle, opts: &CreateOptions) -> Record {
    let spec = &bundle.spec;
    Record {
        state: State {
            oci_version: spec.version().clone(),
            id: id.to_owned(),
            status: Status::Creating.as_str().into(),
            pid: 0,
            bundle: opts.bundle.clone(),
            rootfs: bundle.rootfs.clone(),
            created: state::rfc3339_now(),
            owner: String::new(),
            annotations: spec.annotations().clone().unwrap_or_default(),
        },
        init_start_time: 0,
        cgroup: None,
        poststart: hook_list(spec, |h| h.poststart()),
        poststop: hook_list(spec, |h| h.poststop()),
    }
}

fn hook_list(spec: &Spec, phase: impl Fn(&Hooks) -> &Option<Vec<Hook>>) -> Vec<Hook> {
    spec.hooks()
        .as_ref()
        .and_then(|h| phase(h).clone())
        .unwrap_or_default()
}

fn create_cgroup(rt: &Runtime, id: &str, spec: &Spec) -> Result<Cgroup, Error> {
    let linux = spec.linux().as_ref();
    let path = linux.and_then(|l| l.cgroups_path().as_deref());
    let resources = spec::cgroup_resources(spec);
    Cgroup::create(id, path, rt.cgroup_manager, resources.as_ref()).map_err(|e| Error::Cgroup {
        step: "create",
        source: e,
    })
}

/// Makes `exec.fifo` and opens it read-write (an open that does not block): the init inherits it
/// and blocks reading until `start` writes a byte.
fn make_fifo(dir: &Dir) -> Result<OwnedFd, Error> {
    let path = dir.fifo();
    nix::unistd::mkfifo(&path, Mode::from_bits_truncate(0o622))
        .map_err(|e| Error::io("mkfifo", &path, e.into()))?;
    let flags = nix::fcntl::OFlag::O_RDWR | nix::fcntl::OFlag::O_CLOEXEC;
    nix::fcntl::open(&path, flags, Mode::empty()).map_err(|e| Error::io("open", &path, e.into()))
}

fn has_hooks_before_start(spec: &Spec) -> bool {
    let Some(h) = spec.hooks().as_ref() else {
        return false;
    };
    let some = |list: &Option<Vec<Hook>>| list.as_ref().is_some_and(|l| !l.is_empty());
    some(h.prestart())
        || some(h.create_runtime())
        || some(h.create_container())
        || some(h.start_container())
}

fn run_runtime_hooks(spec: &Spec, state_json: &[u8]) -> Result<(), Error> {
    let Some(h) = spec.hooks().as_ref() else {
        return Ok(());
    };
    for (phase, list) in [
        (Phase::Prestart, h.prestart()),
        (Phase::CreateRuntime, h.create_runtime()),
    ] {
        if let Some(list) = list {
            hooks::run(phase, list, state_json)?;
        }
    }
    Ok(())
}

fn await_created(sync: &sync::Sync, dir: &Dir) -> Result<(), Error> {
    match sync
        .recv()
        .map_err(|e| Error::io("read sync socket", &dir.path, e))?
    {
        Some(Msg::Created) => Ok(()),
        Some(Msg::Failed(text)) => Err(Error::Init(text)),
        Some(Msg::Go(_)) | None => Err(Error::Init("the init exited before reporting".into())),
    }
}

/// `LISTEN_FDS` of the runtime's environment (systemd socket activation), passed through.
fn listen_fds() -> u32 {
    std::env::var("LISTEN_FDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
