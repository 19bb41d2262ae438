//! The runtime's public API, one method per runc verb. INTERFACE STUB: the core helper replaces
//! the bodies (and adds state.rs, spec.rs, namespaces.rs, init.rs, ... beside it).
//!
//! Owner: core.
use oci_spec::runtime::{LinuxResources, Process, Spec};
use pier_cgroups::ManagerKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What failed in a runtime operation. Variants name the step and carry the id/path/value;
/// `Display` texts follow runc's where callers match on them ("container not running",
/// "does not exist").
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Placeholder until the core lands.
    #[error("the runtime core is not built yet")]
    NotBuilt,
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

impl Runtime {
    /// `create ID`.
    pub fn create(&self, id: &str, opts: &CreateOptions) -> Result<(), Error> {
        let _ = (id, opts);
        Err(Error::NotBuilt)
    }
    /// `start ID`.
    pub fn start(&self, id: &str) -> Result<(), Error> {
        let _ = id;
        Err(Error::NotBuilt)
    }
    /// `run ID`: create + start; unless `detach`, waits and returns the exit code (128+signal
    /// when killed) after deleting the container.
    pub fn run(&self, id: &str, opts: &CreateOptions, detach: bool) -> Result<i32, Error> {
        let _ = (id, opts, detach);
        Err(Error::NotBuilt)
    }
    /// `state ID`.
    pub fn state(&self, id: &str) -> Result<State, Error> {
        let _ = id;
        Err(Error::NotBuilt)
    }
    /// `kill [--all] ID SIGNAL`.
    pub fn kill(&self, id: &str, signal: i32, all: bool) -> Result<(), Error> {
        let _ = (id, signal, all);
        Err(Error::NotBuilt)
    }
    /// `delete [--force] ID`.
    pub fn delete(&self, id: &str, force: bool) -> Result<(), Error> {
        let _ = (id, force);
        Err(Error::NotBuilt)
    }
    /// `exec ID`: returns the exit code (0 with `detach`).
    pub fn exec(&self, id: &str, opts: &ExecOptions) -> Result<i32, Error> {
        let _ = (id, opts);
        Err(Error::NotBuilt)
    }
    /// `ps ID`: host pids of the container's processes.
    pub fn ps(&self, id: &str) -> Result<Vec<i32>, Error> {
        let _ = id;
        Err(Error::NotBuilt)
    }
    /// `list`: every container under the root.
    pub fn list(&self) -> Result<Vec<State>, Error> {
        Err(Error::NotBuilt)
    }
    /// `pause ID`.
    pub fn pause(&self, id: &str) -> Result<(), Error> {
        let _ = id;
        Err(Error::NotBuilt)
    }
    /// `resume ID`.
    pub fn resume(&self, id: &str) -> Result<(), Error> {
        let _ = id;
        Err(Error::NotBuilt)
    }
    /// `update ID --resources`.
    pub fn update(&self, id: &str, resources: &LinuxResources) -> Result<(), Error> {
        let _ = (id, resources);
        Err(Error::NotBuilt)
    }
}

/// The config.json `spec` writes (runc's default: `sh`, terminal, default namespaces, masked
/// and readonly paths).
pub fn default_spec() -> Spec {
    Spec::default()
}

/// The OCI `features` document of this runtime.
pub fn features() -> serde_json::Value {
    serde_json::Value::Null
}
