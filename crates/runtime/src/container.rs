//! The runtime's public API, one method per runc verb.
//!
//! Theory of operation: each verb is a short sequence over the state directory (`state.rs`), the
//! container's cgroup (pier-cgroups) and pidfds of its processes. `create` lives in `create.rs`
//! (with the init's side in `init.rs`), `exec` in `exec.rs`, foreground waiting in `wait.rs`.
//! Config parsing and the `spec`/`features` documents are in `spec.rs`. Mutating verbs lock the
//! container's directory; status is always derived live (so `start` writes no state). Signals go
//! through a pidfd opened from the recorded pid and checked against the recorded start time, so
//! a recycled pid is never signalled. `delete` SIGKILLs whatever is left (the init, any process
//! still in the cgroup) and waits on pidfds, never by sleeping, then keeps going past teardown
//! failures and reports them all. Error texts follow runc's where callers (containerd, Docker,
//! Podman) match on them.
//!
//! Privileges: root. Tests: crates/runtime/tests/priv_lifecycle.rs.
use crate::hooks::{self, HookError, Phase};
use crate::process::ProcessError;
use crate::state::{self, Dir, Record, Status};
use oci_spec::runtime::{LinuxResources, Process, Spec};
use pier_cgroups::ManagerKind;
use serde::{Deserialize, Serialize};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

/// What failed in a runtime operation. Variants name the step and carry the id/path/value;
/// `Display` texts follow runc's where callers match on them ("container not running",
/// "does not exist").
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The id does not match `^[\w+\-\.]+$` (or is `.`, `..`, or reserved).
    #[error("invalid container id format: {0:?}")]
    InvalidId(String),
    /// `create` with an id in use.
    #[error("container with id exists: {0}")]
    Exists(String),
    /// No state directory for the id.
    #[error("container {0} does not exist")]
    NotExist(String),
    /// config.json is malformed or unsupported.
    #[error("{}: {msg}", path.display())]
    Spec {
        /// The config file.
        path: PathBuf,
        /// What is wrong, naming the field.
        msg: String,
    },
    /// `root.path` does not exist.
    #[error("rootfs {} does not exist", .0.display())]
    RootfsMissing(PathBuf),
    /// A file system step failed.
    #[error("{step} {}: {source}", path.display())]
    Io {
        /// The step.
        step: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A cgroup operation failed.
    #[error("cgroup: {step}: {source}")]
    Cgroup {
        /// The step.
        step: &'static str,
        /// The error.
        source: pier_cgroups::Error,
    },
    /// Compiling or caching the seccomp filter failed.
    #[error("seccomp: {0}")]
    Seccomp(pier_seccomp::Error),
    /// Connecting the console socket failed.
    #[error("console socket: {0}")]
    Console(ProcessError),
    /// A runtime-namespace hook failed.
    #[error(transparent)]
    Hook(#[from] HookError),
    /// `clone3` of the init or exec process failed.
    #[error("clone3: {0}")]
    Clone(io::Error),
    /// The init (or exec process) reported a failure before the user program.
    #[error("container init: {0}")]
    Init(String),
    /// A configuration this version does not support.
    #[error("unsupported configuration: {0}")]
    Unsupported(&'static str),
    /// A verb called in the wrong state, with runc's text.
    #[error("{0}")]
    Usage(&'static str),
    /// The container has no running process.
    #[error("container not running")]
    NotRunning,
    /// `delete` without `--force` of a live container.
    #[error("cannot delete container {id} that is not stopped: {status}")]
    NotStopped {
        /// Container id.
        id: String,
        /// Its status.
        status: Status,
    },
    /// Sending a signal failed.
    #[error("kill pid {pid} with signal {signal}: {source}")]
    Signal {
        /// Target pid.
        pid: i32,
        /// Signal number.
        signal: i32,
        /// The error.
        source: io::Error,
    },
    /// Waiting for a process failed.
    #[error("wait for the container process: {0}")]
    Wait(io::Error),
    /// Teardown steps that failed (all were attempted).
    #[error("delete {id}: {}", join(.errors))]
    Teardown {
        /// Container id.
        id: String,
        /// Each failure.
        errors: Vec<Error>,
    },
}

fn join(errors: &[Error]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

impl Error {
    pub(crate) fn io(step: &'static str, path: impl AsRef<Path>, source: io::Error) -> Error {
        Error::Io {
            step,
            path: path.as_ref().to_owned(),
            source,
        }
    }
}

/// The runtime, configured by the global flags.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// `--root` (default `/run/pier`): one directory per container holds its state.
    pub root: PathBuf,
    /// `--cgroup-manager` / `--systemd-cgroup`.
    pub cgroup_manager: ManagerKind,
}

/// Flags of `create` (and `run`).
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// `--bundle` (absolute after the front end resolved it).
    pub bundle: PathBuf,
    /// `--pid-file`: written with the init's pid (as the caller's pid namespace sees it).
    pub pid_file: Option<PathBuf>,
    /// `--console-socket`: AF_UNIX socket that receives the pty master.
    pub console_socket: Option<PathBuf>,
    /// `--no-pivot`.
    pub no_pivot: bool,
    /// `--no-new-keyring`.
    pub no_new_keyring: bool,
    /// `--preserve-fds N`.
    pub preserve_fds: u32,
}

/// Standard streams for a container's init in place of the caller's own (the engine's monitor
/// gives pipes it logs). Close-on-exec in the caller is fine: the init dup2s them onto 0, 1, 2.
#[derive(Debug)]
pub struct Stdio {
    /// fd 0 of the container.
    pub stdin: OwnedFd,
    /// fd 1 of the container.
    pub stdout: OwnedFd,
    /// fd 2 of the container.
    pub stderr: OwnedFd,
}

/// A created container's init, a child of the calling process (for in-process callers).
#[derive(Debug)]
pub struct Child {
    /// Pid of the init in the caller's pid namespace.
    pub pid: i32,
    /// Pidfd of the init: wait on it and reap with `waitid(P_PIDFD)`.
    pub pidfd: OwnedFd,
}

/// Flags of `exec`.
#[derive(Debug, Clone)]
pub struct ExecOptions {
    /// The process to start (from `--process FILE` or built from the command line flags).
    pub process: Process,
    /// `--detach`: return once the process started instead of waiting for it.
    pub detach: bool,
    /// `--pid-file`.
    pub pid_file: Option<PathBuf>,
    /// `--console-socket`.
    pub console_socket: Option<PathBuf>,
    /// `--preserve-fds N`.
    pub preserve_fds: u32,
}

/// The OCI state of a container, as `state` prints it (runc's extra fields included).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct State {
    /// Spec version of the bundle.
    pub oci_version: String,
    /// Container id.
    pub id: String,
    /// creating | created | running | paused | stopped.
    pub status: String,
    /// Init pid (0 when stopped).
    pub pid: i32,
    /// Absolute bundle path.
    pub bundle: PathBuf,
    /// Absolute rootfs path.
    pub rootfs: PathBuf,
    /// RFC 3339 creation time.
    pub created: String,
    /// Owner user name.
    pub owner: String,
    /// `annotations` of config.json.
    #[serde(default, skip_serializing_if = "std::collections::HashMap::is_empty")]
    pub annotations: std::collections::HashMap<String, String>,
}

/// A pidfd of the recorded init, checked to be that process (not a recycled pid).
pub(crate) fn open_init(record: &Record) -> Result<OwnedFd, Error> {
    let pidfd = pier_sys::pidfd::open(record.state.pid).map_err(|_| Error::NotRunning)?;
    if !state::init_alive(record) {
        return Err(Error::NotRunning);
    }
    Ok(pidfd)
}

impl Runtime {
    /// `create ID`.
    pub fn create(&self, id: &str, opts: &CreateOptions) -> Result<(), Error> {
        crate::create::create(self, id, opts, false, None).map(drop)
    }

    /// `create ID` for a caller that stays in-process and becomes the init's parent (pier's
    /// engine): returns the init's pid and pidfd. `stdio`, when given, replaces the caller's
    /// standard streams in the container. A terminal needs `opts.console_socket`.
    /// The caller must be single-threaded (the init is forked with `clone3`).
    pub fn create_child(
        &self,
        id: &str,
        opts: &CreateOptions,
        stdio: Option<Stdio>,
    ) -> Result<Child, Error> {
        let created = crate::create::create(self, id, opts, true, stdio)?;
        Ok(Child {
            pid: created.pid,
            pidfd: created.pidfd,
        })
    }

    /// `start ID`.
    pub fn start(&self, id: &str) -> Result<(), Error> {
        let dir = Dir::open(&self.root, id)?;
        let record = dir.load(id)?;
        match state::live_status(&dir.path, &record) {
            Status::Created => {}
            Status::Stopped => {
                return Err(Error::Usage("cannot start a container that has stopped"))
            }
            _ => return Err(Error::Usage("cannot start an already running container")),
        }
        // No state write: with the fifo gone, the live status is `running`.
        release_init(&dir)?;
        self.poststart(&record);
        Ok(())
    }

    fn poststart(&self, record: &Record) {
        if record.poststart.is_empty() {
            return;
        }
        let state = record.state_json(Status::Running);
        if let Err(e) = hooks::run(Phase::Poststart, &record.poststart, &state) {
            log::warn!("poststart hook failed: {e}");
        }
    }

    /// `run ID`: create + start; unless `detach`, waits and returns the exit code (128+signal
    /// when killed) after deleting the container.
    pub fn run(&self, id: &str, opts: &CreateOptions, detach: bool) -> Result<i32, Error> {
        let created = crate::create::create(self, id, opts, !detach, None)?;
        if let Err(e) = self.start(id) {
            crate::create::kill_and_reap(&created.pidfd);
            let _ = self.delete(id, true);
            return Err(e);
        }
        if detach {
            return Ok(0);
        }
        let code = crate::wait::wait_forwarding(&created.pidfd);
        let deleted = self.delete(id, true);
        let code = code?;
        deleted.map(|()| code)
    }

    /// `state ID`.
    pub fn state(&self, id: &str) -> Result<State, Error> {
        state::validate_id(id)?;
        let dir = self.root.join(id);
        let record = state::load(&dir, id)?;
        Ok(live_state(&dir, record))
    }

    /// `kill [--all] ID SIGNAL`.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), Error> {
        state::validate_id(id)?;
        let dir = self.root.join(id);
        let record = state::load(&dir, id)?;
        if state::live_status(&dir, &record) == Status::Stopped {
            return Err(Error::NotRunning);
        }
        if all {
            return signal_all(&record, signal);
        }
        let pidfd = open_init(&record)?;
        let pid = record.state.pid;
        pier_sys::pidfd::send_signal(&pidfd, signal).map_err(|source| Error::Signal {
            pid,
            signal,
            source,
        })
    }

    /// `delete [--force] ID`.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), Error> {
        let dir = Dir::open(&self.root, id)?;
        let record = match dir.load(id) {
            // A create that crashed before its first state write left only the directory.
            Err(Error::NotExist(_)) => {
                return std::fs::remove_dir_all(&dir.path)
                    .map_err(|e| Error::io("remove state directory", &dir.path, e));
            }
            other => other?,
        };
        let status = state::live_status(&dir.path, &record);
        if matches!(status, Status::Running | Status::Paused) && !force {
            let id = id.to_owned();
            return Err(Error::NotStopped { id, status });
        }
        // Also for a stopped container: processes left in its cgroup (no pid namespace of its
        // own, or an init a crashed `create` never recorded) go before the cgroup does.
        kill_all(&record, status == Status::Paused)?;
        let errors = teardown(&dir, &record);
        match errors.is_empty() {
            true => Ok(()),
            false => Err(Error::Teardown {
                id: id.to_owned(),
                errors,
            }),
        }
    }

    /// `exec ID`: returns the exit code (0 with `detach`).
    pub fn exec(&self, id: &str, opts: &ExecOptions) -> Result<i32, Error> {
        crate::exec::exec(self, id, opts)
    }

    /// `ps ID`: host pids of the container's processes.
    pub fn ps(&self, id: &str) -> Result<Vec<i32>, Error> {
        state::validate_id(id)?;
        let record = state::load(&self.root.join(id), id)?;
        match &record.cgroup {
            Some(cgroup) => cgroup.pids().map_err(|e| Error::Cgroup {
                step: "list pids",
                source: e,
            }),
            None => Ok(Vec::new()),
        }
    }

    /// `list`: every container under the root.
    pub fn list(&self) -> Result<Vec<State>, Error> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(Error::io("read root directory", &self.root, e)),
        };
        let mut states = Vec::new();
        for entry in entries.flatten() {
            let id = entry.file_name().to_string_lossy().into_owned();
            if let Ok(record) = state::load(&entry.path(), &id) {
                states.push(live_state(&entry.path(), record));
            }
        }
        states.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(states)
    }

    /// `pause ID`.
    pub fn pause(&self, id: &str) -> Result<(), Error> {
        self.freezer(id, Status::Running, Status::Paused)
    }

    /// `resume ID`.
    pub fn resume(&self, id: &str) -> Result<(), Error> {
        self.freezer(id, Status::Paused, Status::Running)
    }

    fn freezer(&self, id: &str, from: Status, to: Status) -> Result<(), Error> {
        let dir = Dir::open(&self.root, id)?;
        let mut record = dir.load(id)?;
        let status = state::live_status(&dir.path, &record);
        if status != from {
            return Err(match from {
                Status::Paused => Error::Usage("container not paused"),
                _ => Error::NotRunning,
            });
        }
        let cgroup = record
            .cgroup
            .as_ref()
            .ok_or(Error::Unsupported("pause without a cgroup"))?;
        let done = if to == Status::Paused {
            cgroup.freeze()
        } else {
            cgroup.thaw()
        };
        done.map_err(|e| Error::Cgroup {
            step: if to == Status::Paused {
                "freeze"
            } else {
                "thaw"
            },
            source: e,
        })?;
        record.state.status = to.as_str().into();
        dir.save(&record)
    }

    /// `update ID --resources`.
    pub fn update(&self, id: &str, resources: &LinuxResources) -> Result<(), Error> {
        let dir = Dir::open(&self.root, id)?;
        let record = dir.load(id)?;
        if state::live_status(&dir.path, &record) == Status::Stopped {
            return Err(Error::NotRunning);
        }
        let cgroup = record
            .cgroup
            .as_ref()
            .ok_or(Error::Unsupported("update without a cgroup"))?;
        cgroup.apply(resources).map_err(|e| Error::Cgroup {
            step: "update resources",
            source: e,
        })
    }
}

fn live_state(dir: &Path, record: Record) -> State {
    let status = state::live_status(dir, &record);
    let mut state = record.state;
    state.status = status.as_str().into();
    if status == Status::Stopped {
        state.pid = 0;
    }
    state
}

/// Opens `exec.fifo` for writing (the held init has it open, so this does not block; ENXIO means
/// the init is gone), writes the byte the init waits for, removes the fifo.
fn release_init(dir: &Dir) -> Result<(), Error> {
    use nix::fcntl::OFlag;
    let path = dir.fifo();
    let flags = OFlag::O_WRONLY | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fifo = match nix::fcntl::open(&path, flags, nix::sys::stat::Mode::empty()) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENXIO) => {
            return Err(Error::Usage("cannot start a container that has stopped"))
        }
        Err(e) => return Err(Error::io("open", &path, e.into())),
    };
    nix::unistd::write(&fifo, &[0]).map_err(|e| Error::io("write", &path, e.into()))?;
    std::fs::remove_file(&path).map_err(|e| Error::io("remove", &path, e))
}

fn signal_all(record: &Record, signal: i32) -> Result<(), Error> {
    let cgroup = record
        .cgroup
        .as_ref()
        .ok_or(Error::Unsupported("kill --all without a cgroup"))?;
    let pids = cgroup.pids().map_err(|e| Error::Cgroup {
        step: "list pids",
        source: e,
    })?;
    for pid in pids {
        let sent =
            pier_sys::pidfd::open(pid).and_then(|fd| pier_sys::pidfd::send_signal(&fd, signal));
        match sent {
            Err(e) if e.raw_os_error() != Some(libc::ESRCH) => {
                return Err(Error::Signal {
                    pid,
                    signal,
                    source: e,
                })
            }
            _ => {}
        }
    }
    Ok(())
}

/// SIGKILLs the container's init and every process of its cgroup (thawing a frozen one), then
/// waits on their pidfds until all have exited.
fn kill_all(record: &Record, frozen: bool) -> Result<(), Error> {
    let mut pidfds = Vec::new();
    if let Ok(pidfd) = open_init(record) {
        let pid = record.state.pid;
        let sent = pier_sys::pidfd::send_signal(&pidfd, libc::SIGKILL);
        sent.map_err(|source| Error::Signal {
            pid,
            signal: libc::SIGKILL,
            source,
        })?;
        pidfds.push(pidfd);
    }
    if let Some(cgroup) = &record.cgroup {
        for pid in cgroup.pids().unwrap_or_default() {
            let Ok(pidfd) = pier_sys::pidfd::open(pid) else {
                continue;
            };
            if pier_sys::pidfd::send_signal(&pidfd, libc::SIGKILL).is_ok() {
                pidfds.push(pidfd);
            }
        }
        if frozen {
            cgroup.thaw().map_err(|e| Error::Cgroup {
                step: "thaw",
                source: e,
            })?;
        }
    }
    for pidfd in &pidfds {
        pier_sys::pidfd::wait_exited(pidfd).map_err(Error::Wait)?;
    }
    Ok(())
}

/// Destroys the cgroup, runs poststop hooks (failures are warnings), removes the state
/// directory unless the cgroup is still there; returns every failure.
fn teardown(dir: &Dir, record: &Record) -> Vec<Error> {
    let mut errors = Vec::new();
    if let Some(cgroup) = &record.cgroup {
        if let Err(e) = cgroup.destroy() {
            errors.push(Error::Cgroup {
                step: "destroy",
                source: e,
            });
        }
    }
    if !record.poststop.is_empty() {
        if let Err(e) = hooks::run(
            Phase::Poststop,
            &record.poststop,
            &record.state_json(Status::Stopped),
        ) {
            // The spec: a failing poststop hook is a warning; the lifecycle continues.
            log::warn!("poststop hook failed: {e}");
        }
    }
    // A cgroup that could not be removed stays recorded, so that `delete` can be retried.
    if errors.is_empty() {
        if let Err(e) = std::fs::remove_dir_all(&dir.path) {
            errors.push(Error::io("remove state directory", &dir.path, e));
        }
    }
    errors
}

/// The config.json `spec` writes (runc's default: `sh`, terminal, default namespaces, masked
/// and readonly paths).
pub fn default_spec() -> Spec {
    crate::spec::default_spec()
}

/// The OCI `features` document of this runtime.
pub fn features() -> serde_json::Value {
    crate::spec::features()
}
