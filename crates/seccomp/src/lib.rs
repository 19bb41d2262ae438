//! pier-seccomp. INTERFACE STUB: the seccomp helper replaces the bodies and adds the modules.
use oci_spec::runtime::LinuxSeccomp;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

/// What failed while validating, compiling, caching or installing a filter.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Placeholder until the compiler lands.
    #[error("seccomp compiler is not built yet")]
    NotBuilt,
}

/// A compiled classic-BPF program, ready for `seccomp(SECCOMP_SET_MODE_FILTER)`.
#[derive(Debug, Clone)]
pub struct Program {
    _private: (),
}

impl Program {
    /// True when the profile uses SCMP_ACT_NOTIFY, so `install` returns a listener fd.
    pub fn needs_listener(&self) -> bool {
        false
    }

    /// Installs the filter on the calling thread (all threads with TSYNC), with the profile's
    /// flags; returns the user-notification listener fd when the profile uses NOTIFY.
    pub fn install(&self) -> Result<Option<OwnedFd>, Error> {
        Err(Error::NotBuilt)
    }
}

/// Validates `linux.seccomp` as raw JSON, with errors naming the rule index, its syscalls and
/// the field. Call this before handing the config to oci-spec (which would reject an unknown
/// action without saying where).
pub fn from_json(value: &serde_json::Value) -> Result<LinuxSeccomp, Error> {
    let _ = value;
    Err(Error::NotBuilt)
}

/// Compiles a profile for its architectures (the host's when the list is empty).
pub fn compile(profile: &LinuxSeccomp) -> Result<Program, Error> {
    let _ = profile;
    Err(Error::NotBuilt)
}

/// The on-disk cache of compiled filters under the runtime root.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache stored in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Returns the cached program for `profile` or compiles and stores it.
    pub fn get_or_compile(&self, profile: &LinuxSeccomp) -> Result<Program, Error> {
        let _ = &self.dir;
        compile(profile)
    }
}

/// Sends the listener fd and the container process state (OCI `ContainerProcessState` JSON) to
/// the `listenerPath` socket, as the OCI runtime spec describes.
pub fn send_to_listener(listener_path: &Path, fd: BorrowedFd<'_>, state_json: &[u8]) -> Result<(), Error> {
    let _ = (listener_path, fd, state_json);
    Err(Error::NotBuilt)
}
