//! The container process's last mile: from a process whose root is final to the user's program.
//!
//! Theory of operation: [`exec`] runs in the container's init (single-threaded, made by clone3,
//! already pivoted) or in a `pier exec` process that joined the container's namespaces, and
//! applies the spec's `process` in runc's order, one step per syscall, each failure a
//! [`ProcessError`] variant naming the step and value:
//!
//! 1. argv/envp are built and checked first (no allocation is needed after seccomp);
//! 2. session keyring, oomScoreAdj, rlimits, scheduler, ioPriority, personality (`sched`, `user`,
//!    `rlimit`), all while still fully privileged;
//! 3. seccomp, when noNewPrivileges is false: installing a filter then needs CAP_SYS_ADMIN, so
//!    it goes before the capability drop (the filter then sees pier's remaining syscalls);
//! 4. bounding set narrowed, keep-caps, setgroups/setgid/setuid, umask, then capset and the
//!    ambient set (`caps`, `user`); the bounding drop comes before setuid because it needs
//!    CAP_SETPCAP, which a non-root uid has lost after the switch;
//! 5. noNewPrivileges, AppArmor/SELinux exec labels (`lsm`), cwd, PATH lookup of args[0] in the
//!    container's environment (as the container user, after chdir, like runc);
//! 6. every fd past stdio + preserved + listen fds marked close-on-exec (`fds`);
//! 7. seccomp, when noNewPrivileges is true: as late as possible, right before execve; a NOTIFY
//!    listener fd goes to `on_listener_fd`; then execve.
//!
//! [`console`] implements runc's `--console-socket` protocol on both sides.
//!
//! Privileges: root in the container's user namespace (CAP_SETUID, CAP_SETGID, CAP_SETPCAP,
//! CAP_SYS_ADMIN for seccomp without NNP, CAP_SYS_RESOURCE/CAP_SYS_NICE for some values).
//! Tests: unit tests in each submodule; `tests/priv_process.rs` re-executes the test binary as a
//! child that calls [`exec`] and checks what the exec'd busybox sees.
pub(crate) mod caps;
mod command;
pub mod console;
mod error;
mod fds;
mod lsm;
mod rlimit;
mod sched;
mod user;

pub use error::ProcessError;

use oci_spec::runtime::{LinuxPersonality, Process};
use std::convert::Infallible;
use std::ffi::CString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;

/// Everything `exec` needs besides the spec's `process`.
#[derive(Debug)]
pub struct Exec<'a> {
    /// The spec's `process` (or the one given to `pier exec`).
    pub process: &'a Process,
    /// The spec's `linux.personality` (it lives outside `process` in the spec).
    pub personality: Option<&'a LinuxPersonality>,
    /// The compiled filter to install, if the spec has `linux.seccomp`.
    pub seccomp: Option<&'a pier_seccomp::Program>,
    /// `--preserve-fds N`: fds 3..3+N stay open in the container process.
    pub preserve_fds: u32,
    /// `LISTEN_FDS` passed through from the runtime's environment (systemd socket activation):
    /// that many fds after the preserved ones stay open and LISTEN_FDS/LISTEN_PID are set.
    pub listen_fds: u32,
    /// `--no-new-keyring`: keep the caller's session keyring instead of joining a new one.
    pub no_new_keyring: bool,
}

/// Makes a raw `process` JSON object parseable by oci-spec without losing the config: unknown
/// capability names are removed with a warning (the spec says they are not errors) and the
/// spec's `SCHED_FLAG_DL_OVERRUN` is respelled as oci-spec 0.10 expects. Call it before
/// deserializing the config; returns the capability names removed.
pub fn normalize_json(process: &mut serde_json::Value) -> Vec<String> {
    sched::normalize_flags_json(process);
    caps::retain_known(process)
}

/// Callback receiving the seccomp NOTIFY listener fd (it forwards it to the runtime).
type OnListenerFd<'f> = &'f mut dyn FnMut(OwnedFd) -> Result<(), String>;

/// Runs in the container's init (or in a `pier exec` process) after the root is final: applies
/// session keyring, oomScoreAdj, rlimits, scheduler, ioPriority, personality, user/groups/umask,
/// capabilities, noNewPrivileges, AppArmor/SELinux exec labels, cwd, env, closes fds that are
/// not preserved, installs seccomp (handing a NOTIFY listener fd to `on_listener_fd`, which
/// forwards it to the runtime) and execs `process.args`. Returns only on failure.
pub fn exec(e: &Exec, on_listener_fd: OnListenerFd<'_>) -> ProcessError {
    match run(e, on_listener_fd) {
        Err(err) => err,
        Ok(never) => match never {},
    }
}

fn run(e: &Exec, on_listener_fd: OnListenerFd<'_>) -> Result<Infallible, ProcessError> {
    let p = e.process;
    let args = p.args().as_deref().unwrap_or_default();
    let env = command::environment(p.env().as_deref().unwrap_or_default(), e.listen_fds);
    let program = command::prepare(args, &env)?;
    user::check_username(p.user())?;
    let nnp = p.no_new_privileges().unwrap_or(false);
    apply_attributes(e)?;
    if !nnp {
        install_seccomp(e, on_listener_fd)?;
    }
    apply_identity(p)?;
    if nnp {
        nix::sys::prctl::set_no_new_privs()
            .map_err(|e| ProcessError::NoNewPrivileges { source: e.into() })?;
    }
    apply_labels(p)?;
    nix::unistd::chdir(p.cwd()).map_err(|err| ProcessError::Cwd {
        path: p.cwd().clone(),
        source: err.into(),
    })?;
    let path = command::resolve(&args[0], &env)?;
    let path = CString::new(path.into_os_string().into_vec()).map_err(|_| ProcessError::Nul {
        field: "args",
        value: args[0].clone(),
    })?;
    let first_closed = fds::first_closed(e.preserve_fds, e.listen_fds);
    fds::keep_below(first_closed)?;
    fds::close_on_exec_from(first_closed)?;
    if nnp {
        install_seccomp(e, on_listener_fd)?;
    }
    Err(program.exec(&path))
}

/// Keyring, oomScoreAdj, rlimits, scheduler, ioPriority and personality.
fn apply_attributes(e: &Exec) -> Result<(), ProcessError> {
    let p = e.process;
    if !e.no_new_keyring {
        user::join_session_keyring()?;
    }
    if let Some(value) = p.oom_score_adj() {
        sched::set_oom_score_adj(value)?;
    }
    rlimit::apply(p.rlimits().as_deref().unwrap_or_default())?;
    if let Some(s) = p.scheduler() {
        sched::set_scheduler(s)?;
    }
    if let Some(io) = p.io_priority() {
        sched::set_io_priority(io)?;
    }
    e.personality.map_or(Ok(()), sched::set_personality)
}

/// Bounding set, user switch with keep-caps, umask, then the remaining capability sets.
fn apply_identity(p: &Process) -> Result<(), ProcessError> {
    let last = caps::last_cap()?;
    let masks = p.capabilities().as_ref().map(|c| caps::masks(c, last));
    if let Some(m) = &masks {
        caps::drop_bounding(m, last)?;
    }
    nix::sys::prctl::set_keepcaps(true).map_err(|e| ProcessError::KeepCaps { source: e.into() })?;
    user::switch(p.user())?;
    user::set_umask(p.user());
    masks.map_or(Ok(()), |m| caps::set_and_raise_ambient(&m, last))
}

/// AppArmor profile and SELinux label for the coming execve.
fn apply_labels(p: &Process) -> Result<(), ProcessError> {
    if let Some(profile) = p.apparmor_profile().as_deref().filter(|s| !s.is_empty()) {
        lsm::apply_apparmor(profile)?;
    }
    match p.selinux_label().as_deref().filter(|s| !s.is_empty()) {
        Some(label) => lsm::apply_selinux(label),
        None => Ok(()),
    }
}

/// Installs the filter (if any) and hands a NOTIFY listener fd to the runtime.
fn install_seccomp(e: &Exec, on_listener_fd: OnListenerFd<'_>) -> Result<(), ProcessError> {
    let Some(program) = e.seccomp else {
        return Ok(());
    };
    match program
        .install()
        .map_err(|source| ProcessError::Seccomp { source })?
    {
        Some(fd) => on_listener_fd(fd).map_err(|reason| ProcessError::ListenerFd { reason }),
        None => Ok(()),
    }
}
