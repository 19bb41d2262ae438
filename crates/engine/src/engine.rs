//! The engine's verbs: run, ps, inspect, logs, stop, kill, rm, exec, wait, port, gc.
//!
//! Theory of operation: there is no daemon; every verb reads the container records of the
//! store (`store.rs`) and acts on the processes they name. `run` (in `run.rs`) registers the
//! container (id, name, record: status creating, the caller responsible), then makes each
//! object only after recording it: root filesystem (fixed overlay path) → network plan
//! (attachments: links and leases) → publish plan (entries) → /etc files and config.json →
//! the runtime id → pier-runtime `create` in-process (the init held before its program; its
//! pid and start time recorded) → loopback and network attach inside the init's netns →
//! publish apply → runtime `start` → status running. A failure tears down what the record
//! names and removes the record. The process that ran these steps is the container's
//! responsible process until the end: the foreground `pier run`, or for `-d` the monitor
//! (`monitor.rs`), which reaps the init, records the exit code, tears down (`gc::teardown`)
//! and removes the container with `--rm`. `stop` and `kill` signal the init through a pidfd
//! checked against its start time; `stop` and `rm -f` then wait (inotify on the container
//! directory plus the responsible process's pidfd, no polling) until the record says torn
//! down; when the responsible process is dead they settle the container themselves. `gc` (and
//! every `Engine::open`) settles containers whose responsible process died (`gc.rs`). `exec`
//! forks the process in-process with pier-runtime and waits like `run`; `-t` (run and exec)
//! receives the pty master over a console socket (`tty.rs`).
//! Locks: the store's global lock only around name changes; a container's directory lock
//! around its teardown.
//! Privileges: root. Tests: crates/engine/tests/priv_engine.rs.
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::time::Duration;

use crate::network::{NetworkError, Networks};
use crate::store::{Record, Status, Store, StoreError};
use crate::Paths;
use pier_runtime::Runtime;

/// What `run` ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// `-d`: the container runs under its monitor; its full id.
    Detached { id: String },
    /// Foreground: the container's exit code (128+signal when killed).
    Exited { code: i32 },
}

/// One line of `pier ps` (also its `--format json` object).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub id: String,
    pub name: String,
    pub rootfs: String,
    pub command: String,
    pub created: String,
    /// `running`, `exited (CODE)`, `created`.
    pub status: String,
    /// `0.0.0.0:8080->80/tcp, …`
    pub ports: String,
    pub networks: String,
}

/// `pier exec` flags.
#[derive(Debug, Clone, Default)]
pub struct ExecArgs {
    pub interactive: bool,
    pub tty: bool,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub detach: bool,
    pub command: Vec<String>,
}

/// `pier gc`'s report: what was found left behind and removed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GcReport {
    pub removed: Vec<String>,
}

/// Why an engine verb failed; variants name the step and the culprit.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no such container: {0}")]
    NoSuchContainer(String),
    #[error("{0}")]
    Other(String),
    #[error(transparent)]
    Store(StoreError),
    #[error("{step}: {source}")]
    Runtime {
        step: &'static str,
        source: pier_runtime::Error,
    },
    #[error("{step}: {source}")]
    Network {
        step: &'static str,
        source: NetworkError,
    },
    #[error("{step}: {source}")]
    Publish {
        step: &'static str,
        source: pier_publish::engine::PublishError,
    },
    #[error("root filesystem: {0}")]
    Rootfs(#[from] crate::rootfs::RootfsError),
    #[error("container config: {0}")]
    Spec(#[from] crate::spec::SpecError),
    #[error("monitor: {0}")]
    Monitor(#[from] crate::monitor::MonitorError),
    #[error("logs: {0}")]
    Log(#[from] crate::logs::LogError),
    #[error("terminal: {0}")]
    Tty(#[from] crate::tty::TtyError),
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("container {0} is running: stop it first, or use rm -f")]
    Running(String),
    #[error("container {0} is not running")]
    NotRunning(String),
    #[error("{0}")]
    Usage(String),
    #[error("teardown of container {id} incomplete (`pier gc` retries): {errors}")]
    Teardown { id: String, errors: String },
}

impl From<StoreError> for EngineError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NoSuchContainer(c) => EngineError::NoSuchContainer(c),
            other => EngineError::Store(other),
        }
    }
}

/// The engine over one state directory.
#[derive(Debug)]
pub struct Engine {
    pub(crate) paths: Paths,
    pub(crate) networks: Networks,
    pub(crate) store: Store,
    pub(crate) runtime: Runtime,
    pub(crate) publish: pier_publish::engine::Settings,
}

/// Where the publish engines keep their host-wide objects (`PIER_BPF_PIN_DIR`,
/// `PIER_BPF_CGROUP` override the defaults); the proxy binary is pier itself; `PIER_REMOTE_TC=0`
/// turns off auto's tc fast path for remote clients (nft DNAT alone serves them then).
fn publish_settings() -> pier_publish::engine::Settings {
    let env = |name: &str, default: &str| {
        PathBuf::from(std::env::var_os(name).unwrap_or_else(|| default.into()))
    };
    pier_publish::engine::Settings {
        bpf_pin_dir: env("PIER_BPF_PIN_DIR", "/sys/fs/bpf/pier"),
        bpf_cgroup: env("PIER_BPF_CGROUP", "/sys/fs/cgroup/unified"),
        proxy_binary: std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into()),
        remote_tc: std::env::var_os("PIER_REMOTE_TC").is_none_or(|v| v != "0"),
    }
}

impl Engine {
    /// Opens the state directory (creating it) and removes what crashed commands left behind.
    pub fn open(paths: Paths) -> Result<Engine, EngineError> {
        let networks = Networks::new(&paths);
        let store = Store::open(&paths)?;
        let runtime = Runtime {
            root: paths.runtime_root(),
            cgroup_manager: pier_cgroups::ManagerKind::Cgroupfs,
        };
        let engine = Engine {
            paths,
            networks,
            store,
            runtime,
            publish: publish_settings(),
        };
        crate::gc::collect(&engine, false)?;
        Ok(engine)
    }

    pub fn networks(&self) -> &Networks {
        &self.networks
    }

    pub fn ps(&self, all: bool) -> Result<Vec<Summary>, EngineError> {
        let records = self.store.list()?;
        Ok(records
            .iter()
            .filter(|r| all || r.running())
            .map(summary)
            .collect())
    }

    pub fn inspect(&self, container: &str) -> Result<serde_json::Value, EngineError> {
        let record = self.store.load(&self.store.resolve(container)?)?;
        Ok(crate::run::inspect(&record, &self.store.dir(&record.id)))
    }

    pub fn logs(
        &self,
        container: &str,
        follow: bool,
        tail: Option<usize>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<(), EngineError> {
        let record = self.store.load(&self.store.resolve(container)?)?;
        let monitor = match follow && record.status != Status::Exited {
            true => record.responsible.and_then(|p| p.pidfd()),
            false => None,
        };
        let dir = self.store.dir(&record.id);
        Ok(crate::logs::read(&dir, tail, monitor, stdout, stderr)?)
    }

    /// Returns the container's full id.
    pub fn stop(&self, container: &str, timeout: Duration) -> Result<String, EngineError> {
        let id = self.store.resolve(container)?;
        let Some(record) = self.started(&id)? else {
            return Ok(id);
        };
        if let Some(init) = record
            .init
            .filter(|_| record.running())
            .and_then(|p| p.pidfd())
        {
            let _ = pier_sys::pidfd::send_signal(&init, libc::SIGTERM);
            crate::crash::point("stop:signalled");
            if !readable(&init, Some(timeout)) {
                let _ = pier_sys::pidfd::send_signal(&init, libc::SIGKILL);
                crate::crash::point("stop:killed");
            }
        }
        self.await_teardown(&id)?;
        Ok(id)
    }

    pub fn kill(&self, container: &str, signal: i32) -> Result<String, EngineError> {
        let id = self.store.resolve(container)?;
        let record = self.store.load(&id)?;
        let init = record
            .init
            .filter(|_| record.running())
            .and_then(|p| p.pidfd());
        let Some(init) = init else {
            return Err(EngineError::NotRunning(container.to_owned()));
        };
        pier_sys::pidfd::send_signal(&init, signal).map_err(|source| EngineError::Io {
            step: "signal the container's init",
            path: format!("/proc/{}", record.init.map_or(0, |p| p.pid)).into(),
            source,
        })?;
        Ok(id)
    }

    pub fn rm(&self, container: &str, force: bool) -> Result<String, EngineError> {
        let id = self.store.resolve(container)?;
        let record = self.store.load(&id)?;
        let busy =
            record.running() || (record.status != Status::Exited && record.responsible_alive());
        if busy && !force {
            return Err(EngineError::Running(container.to_owned()));
        }
        let Some(record) = self.started(&id)? else {
            return Ok(id);
        };
        if let Some(init) = record
            .init
            .filter(|_| record.running())
            .and_then(|p| p.pidfd())
        {
            let _ = pier_sys::pidfd::send_signal(&init, libc::SIGKILL);
            crate::crash::point("rm:killed");
        }
        if !self.await_teardown(&id)? {
            return Ok(id);
        }
        let record = self.store.load(&id)?;
        crate::crash::point("rm:torn-down");
        self.store.remove(&id, &record.name)?;
        Ok(id)
    }

    /// Returns the exit code of the process (0 with `detach`).
    pub fn exec(&self, container: &str, args: &ExecArgs) -> Result<i32, EngineError> {
        let id = self.store.resolve(container)?;
        let record = self.store.load(&id)?;
        if !record.running() {
            return Err(EngineError::NotRunning(container.to_owned()));
        }
        crate::run::exec(self, &record, args)
    }

    /// Blocks until the container exits; its exit code.
    pub fn wait(&self, container: &str) -> Result<i32, EngineError> {
        let id = self.store.resolve(container)?;
        let exited = |r: &Record| r.status == Status::Exited;
        match self.await_record(&id, exited)? {
            Some(Record {
                exit_code: Some(code),
                ..
            }) => Ok(code),
            Some(_) => Err(EngineError::Other(format!(
                "container {container}: exit code unknown (its monitor died)"
            ))),
            // Removed meanwhile (`--rm`): its exit code was kept.
            None => self
                .store
                .exit_code(&id)
                .ok_or_else(|| EngineError::NoSuchContainer(container.to_owned())),
        }
    }

    /// `pier port`: `80/tcp -> 0.0.0.0:32768` lines.
    pub fn port(&self, container: &str) -> Result<Vec<String>, EngineError> {
        let record = self.store.load(&self.store.resolve(container)?)?;
        Ok(crate::run::port_lines(&record))
    }

    pub fn gc(&self) -> Result<GcReport, EngineError> {
        crate::gc::collect(self, true)
    }

    /// The record once its start is over (a `run` in progress finishes or fails first);
    /// `None` when it is gone.
    fn started(&self, id: &str) -> Result<Option<Record>, EngineError> {
        self.await_record(id, |r| r.status != Status::Creating)
    }

    /// Waits until the container is torn down (settling it if its responsible process died);
    /// false when the record is gone (`--rm`).
    fn await_teardown(&self, id: &str) -> Result<bool, EngineError> {
        let done = |r: &Record| r.status == Status::Exited && r.torn_down;
        Ok(self.await_record(id, done)?.is_some())
    }

    /// Waits until the record satisfies `done` or is removed (`None`). Watches the container
    /// directory (inotify) and the responsible process (pidfd); when that process is dead, the
    /// container is settled here.
    fn await_record(
        &self,
        id: &str,
        done: impl Fn(&Record) -> bool,
    ) -> Result<Option<Record>, EngineError> {
        let dir = self.store.dir(id);
        let watch = watch_dir(&dir)?;
        loop {
            let record = match self.store.load(id) {
                Err(StoreError::NoSuchContainer(_)) => return Ok(None),
                other => other?,
            };
            if done(&record) {
                return Ok(Some(record));
            }
            let Some(responsible) = record.responsible.and_then(|p| p.pidfd()) else {
                self.settle(id)?;
                continue;
            };
            let mut fds = [
                PollFd::new(responsible.as_fd(), PollFlags::POLLIN),
                PollFd::new(watch.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Err(nix::errno::Errno::EINTR) | Ok(_) => {}
                Err(e) => return Err(io_error("poll", &dir, e.into())),
            }
            while watch.read_events().is_ok_and(|e| !e.is_empty()) {}
        }
    }

    /// Settles a container whose responsible process is dead (under its lock).
    fn settle(&self, id: &str) -> Result<(), EngineError> {
        let Some(_lock) = self.store.lock_container(id, true) else {
            return Ok(());
        };
        let mut record = match self.store.load(id) {
            Err(StoreError::NoSuchContainer(_)) => return Ok(()),
            other => other?,
        };
        if record.responsible_alive() || (record.status == Status::Exited && record.torn_down) {
            return Ok(());
        }
        crate::gc::settle_orphan(self, &mut record)
    }
}

pub(crate) fn io_error(
    step: &'static str,
    path: &std::path::Path,
    e: std::io::Error,
) -> EngineError {
    EngineError::Io {
        step,
        path: path.to_owned(),
        source: e,
    }
}

fn watch_dir(dir: &std::path::Path) -> Result<Inotify, EngineError> {
    let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK)
        .map_err(|e| io_error("inotify_init", dir, e.into()))?;
    let mask = AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_DELETE_SELF;
    match inotify.add_watch(dir, mask) {
        Ok(_) | Err(nix::errno::Errno::ENOENT) => Ok(inotify),
        Err(e) => Err(io_error("inotify_add_watch", dir, e.into())),
    }
}

/// True when the pidfd turned readable (the process exited) within `timeout`.
fn readable(pidfd: &std::os::fd::OwnedFd, timeout: Option<Duration>) -> bool {
    let timeout = match timeout {
        None => PollTimeout::NONE,
        Some(t) => PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX),
    };
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, timeout) {
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(n) => return n > 0,
            Err(_) => return false,
        }
    }
}

fn summary(record: &Record) -> Summary {
    let config = &record.config;
    let rootfs = match &config.rootfs {
        crate::config::Rootfs::Host => "host".to_owned(),
        crate::config::Rootfs::Dir(path) => path.display().to_string(),
    };
    let networks = match &config.network {
        crate::config::NetworkMode::Named(name) => name.clone(),
        crate::config::NetworkMode::Host => "host".into(),
        crate::config::NetworkMode::None => "none".into(),
        crate::config::NetworkMode::Container(c) => format!("container:{c}"),
    };
    Summary {
        id: record.id[..12].to_owned(),
        name: record.name.clone(),
        rootfs,
        command: config.args.join(" "),
        created: record.created.clone(),
        status: crate::run::status_text(record),
        ports: crate::run::ports_text(record),
        networks,
    }
}
