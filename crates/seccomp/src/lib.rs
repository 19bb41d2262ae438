//! pier-seccomp: OCI `linux.seccomp` -> classic BPF, with an on-disk cache.
//!
//! Theory of operation: [`from_json`] checks the raw profile with errors naming rule and field
//! (validate.rs); [`compile`] resolves syscall names through a perfect hash (names.rs), groups
//! the rules per syscall and emits a binary-search dispatch on the syscall number with 64-bit
//! argument compares (compile.rs, bpf.rs); [`Cache`] keys compiled programs by a SHA-256 of
//! everything that changes them (cache.rs); [`Program::install`] loads the filter with
//! seccomp(2) through pier-sys; [`send_to_listener`] hands a NOTIFY listener fd to the agent
//! (notify.rs). The runtime decides the ordering (no_new_privs, capabilities) around install.
//!
//! Semantics follow libseccomp as runc and crun use it (the tests compare verdicts with it):
//! calls from an architecture outside the profile get KILL_PROCESS; rules whose action equals
//! the default are dropped; per syscall, conditional rules are tried in profile order before
//! the unconditional one. Privileges: installing needs no_new_privs or CAP_SYS_ADMIN.
//! Tests: unit tests per module, tests/oracle.rs (libseccomp), tests/priv_load.rs (kernel).
pub mod arch;
pub mod bpf;
mod cache;
mod compile;
mod names;
mod notify;
mod validate;

pub use cache::{profile_key, Cache, COMPILER_VERSION, DEFAULT_MAX_BYTES};
pub use compile::BAD_ARCH_ACTION;

/// Docker's default profile in the OCI form dockerd hands a runtime on x86_64 (see
/// `profiles/README.md` for its origin and licence): the engine's default and the benchmark's.
pub const DOCKER_DEFAULT_PROFILE: &str = include_str!("../profiles/docker-default.json");

use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompFilterFlag};
use pier_sys::seccomp as sys;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// What failed while validating, compiling, caching or installing a filter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The profile is malformed; names the rule (index and syscalls) or "profile", and the field.
    #[error("seccomp profile: {location}: field `{field}`: {reason}")]
    Invalid {
        location: String,
        field: String,
        reason: String,
    },
    /// The JSON passed the checks but oci-spec could not parse it.
    #[error("seccomp profile: parsing linux.seccomp: {0}")]
    Parse(#[source] serde_json::Error),
    /// The program exceeds BPF_MAXINSNS.
    #[error("seccomp profile compiles to {len} instructions, over the kernel's limit of 4096: simplify the profile")]
    ProgramTooLong { len: usize },
    /// seccomp(2) refused for lack of privilege.
    #[error("installing the seccomp filter: permission denied (EACCES): set process.noNewPrivileges or keep CAP_SYS_ADMIN until the filter is installed")]
    InstallDenied,
    /// seccomp(SECCOMP_SET_MODE_FILTER) failed.
    #[error("installing the seccomp filter (seccomp(SECCOMP_SET_MODE_FILTER), flags {flags:#x}): {source}")]
    Install { flags: u32, source: std::io::Error },
    /// `listenerPath` could not be reached.
    #[error("seccomp profile: field `listenerPath`: connecting to {path}: {source}")]
    ListenerConnect { path: PathBuf, source: nix::Error },
    /// Sending the listener fd and state failed.
    #[error("sending the seccomp listener fd to {path}: {source}")]
    ListenerSend { path: PathBuf, source: nix::Error },
}

/// A compiled classic-BPF program, ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    insns: Vec<bpf::Insn>,
    flags: u32,
    notify: bool,
}

impl Program {
    /// True when the profile uses SCMP_ACT_NOTIFY, so `install` returns a listener fd.
    pub fn needs_listener(&self) -> bool {
        self.notify
    }

    /// The instructions.
    pub fn instructions(&self) -> &[bpf::Insn] {
        &self.insns
    }

    /// The seccomp(2) flags `install` asks for (optional ones may be dropped by the kernel).
    pub fn flags(&self) -> u32 {
        self.flags
    }

    /// Installs the filter on the calling thread (all threads with TSYNC), with the profile's
    /// flags; returns the user-notification listener fd when the profile uses NOTIFY.
    pub fn install(&self) -> Result<Option<OwnedFd>, Error> {
        let filter: Vec<sys::sock_filter> = self
            .insns
            .iter()
            .map(|i| sys::sock_filter {
                code: i.code,
                jt: i.jt,
                jf: i.jf,
                k: i.k,
            })
            .collect();
        match sys::set_mode_filter(&filter, self.flags) {
            Ok(done) => {
                if done.flags & !sys::FLAG_TSYNC_ESRCH != self.flags {
                    log::warn!(
                        "seccomp: kernel refused flags {:#x}; installed without them",
                        self.flags & !done.flags
                    );
                }
                Ok(done.listener)
            }
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => Err(Error::InstallDenied),
            Err(source) => Err(Error::Install {
                flags: self.flags,
                source,
            }),
        }
    }

    fn from_parts(insns: Vec<bpf::Insn>, flags: u32, notify: bool) -> Self {
        Self {
            insns,
            flags,
            notify,
        }
    }
}

/// Validates `linux.seccomp` as raw JSON, with errors naming the rule index, its syscalls and
/// the field. Call this before handing the config to oci-spec (which would reject an unknown
/// action without saying where).
pub fn from_json(value: &serde_json::Value) -> Result<LinuxSeccomp, Error> {
    validate::from_json(value)
}

/// Compiles a profile for its architectures (the host's when the list is empty).
pub fn compile(profile: &LinuxSeccomp) -> Result<Program, Error> {
    let arches = validate::check(profile)?;
    let out = compile::compile(profile, &arches)?;
    let mut flags = if out.notify {
        sys::FLAG_NEW_LISTENER
    } else {
        0
    };
    for flag in profile.flags().as_deref().unwrap_or_default() {
        flags |= match flag {
            LinuxSeccompFilterFlag::SeccompFilterFlagTsync => sys::FLAG_TSYNC,
            LinuxSeccompFilterFlag::SeccompFilterFlagLog => sys::FLAG_LOG,
            LinuxSeccompFilterFlag::SeccompFilterFlagSpecAllow => sys::FLAG_SPEC_ALLOW,
            LinuxSeccompFilterFlag::SeccompFilterFlagWaitKillableRecv if out.notify => {
                sys::FLAG_WAIT_KILLABLE_RECV
            }
            LinuxSeccompFilterFlag::SeccompFilterFlagWaitKillableRecv => 0,
        };
    }
    Ok(Program::from_parts(out.insns, flags, out.notify))
}

/// The number of syscall `name` on `arch` as a filter sees it (x32 numbers carry the x32 bit),
/// or `None` when `arch` has no such syscall.
pub fn syscall_number(name: &str, arch: arch::Arch) -> Option<u32> {
    names::resolve(name, arch)
}

/// Every syscall name pier knows on x86_64, x86 or x32 (in no particular order).
pub fn known_syscalls() -> impl Iterator<Item = &'static str> {
    names::all()
}

/// Sends the listener fd and the container process state (OCI `ContainerProcessState` JSON) to
/// the `listenerPath` socket, as the OCI runtime spec describes.
pub fn send_to_listener(
    listener_path: &Path,
    fd: BorrowedFd<'_>,
    state_json: &[u8],
) -> Result<(), Error> {
    notify::send_to_listener(listener_path, fd, state_json)
}
