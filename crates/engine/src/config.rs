//! What `pier run` was asked to do, parsed and checked before anything is created.
//!
//! Theory of operation: the CLI collects the raw flag values into [`RunArgs`] (strings, exactly
//! as typed); [`RunConfig::parse`] turns them into typed values, reading `--env-file`s and
//! checking every value, and fails with a [`ConfigError`] naming the flag and the value. The
//! engine never sees an unparsed string. RunConfig is serialised into the container record, so
//! `pier inspect` shows it and a monitor can rebuild anything it needs from it.
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;

/// The raw `pier run` flags, as the CLI received them.
#[derive(Debug, Clone, Default)]
pub struct RunArgs {
    pub detach: bool,
    pub rm: bool,
    pub name: Option<String>,
    pub publish: Vec<String>,
    pub publish_mode: Option<String>,
    pub network: Option<String>,
    pub ip: Option<String>,
    pub ip6: Option<String>,
    pub hostname: Option<String>,
    pub env: Vec<String>,
    pub env_file: Vec<PathBuf>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub entrypoint: Option<String>,
    pub volumes: Vec<String>,
    pub tmpfs: Vec<String>,
    pub read_only: bool,
    pub cpus: Option<String>,
    pub memory: Option<String>,
    pub pids_limit: Option<i64>,
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub security_opt: Vec<String>,
    pub ulimit: Vec<String>,
    pub init: bool,
    pub tty: bool,
    pub interactive: bool,
    /// `host` or a directory.
    pub rootfs: String,
    /// The command and its arguments (may be empty only with `--entrypoint`).
    pub command: Vec<String>,
}

/// The root filesystem of a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Rootfs {
    /// The built-in root made of the host's system directories, read-only.
    Host,
    /// A directory used as the read-only lower layer of an overlay (absolute, canonical).
    Dir(PathBuf),
}

/// `--network`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NetworkMode {
    /// `bridge` (the default network `bridge` = bridge `pier0`) or a user network by name.
    Named(String),
    Host,
    None,
    /// `container:NAME|ID`: join that container's network namespace.
    Container(String),
}

/// `-v SRC:DST[:ro]` (SRC an absolute host path).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub source: PathBuf,
    pub destination: PathBuf,
    pub read_only: bool,
}

/// `--tmpfs DST[:OPTIONS]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tmpfs {
    pub destination: PathBuf,
    pub options: Vec<String>,
}

/// `--ulimit NAME=SOFT[:HARD]` (`RLIMIT_` + upper-cased name in the spec).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ulimit {
    pub name: String,
    pub soft: u64,
    pub hard: u64,
}

/// `--security-opt seccomp=…`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seccomp {
    /// Docker's default profile (shipped in pier-seccomp).
    Default,
    Unconfined,
    /// A profile file (Docker's or OCI's JSON), read and checked at parse time.
    Profile(PathBuf),
}

/// A checked `pier run` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunConfig {
    pub detach: bool,
    pub rm: bool,
    pub name: Option<String>,
    pub publish: Vec<pier_publish::PortMapping>,
    pub publish_mode: pier_publish::engine::Mode,
    pub network: NetworkMode,
    pub ip: Option<IpAddr>,
    pub ip6: Option<IpAddr>,
    pub hostname: Option<String>,
    /// `KEY=VALUE`, `--env-file` entries first, then `-e` in order (later wins).
    pub env: Vec<String>,
    pub workdir: Option<String>,
    pub user: Option<String>,
    pub entrypoint: Option<String>,
    pub volumes: Vec<Volume>,
    pub tmpfs: Vec<Tmpfs>,
    pub read_only: bool,
    /// CPU quota in millicores (`--cpus 0.5` = 500).
    pub cpus_milli: Option<u64>,
    pub memory_bytes: Option<i64>,
    pub pids_limit: Option<i64>,
    /// Upper-case `CAP_` names, or `ALL`.
    pub cap_add: Vec<String>,
    pub cap_drop: Vec<String>,
    pub seccomp: Seccomp,
    pub no_new_privileges: bool,
    pub ulimits: Vec<Ulimit>,
    pub init: bool,
    pub tty: bool,
    pub interactive: bool,
    pub rootfs: Rootfs,
    /// The process's argv: entrypoint (if any) then command.
    pub args: Vec<String>,
}

/// Why a `pier run` flag value is refused; each names the flag and the value.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{flag} {value:?}: {reason}")]
    Invalid {
        flag: &'static str,
        value: String,
        reason: String,
    },
    #[error("--env-file {path}: {source}")]
    EnvFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("rootfs {path}: {reason}")]
    Rootfs { path: String, reason: String },
    #[error("no command given (and no --entrypoint)")]
    NoCommand,
}

impl RunConfig {
    /// Parses and checks every flag; reads env files and seccomp profiles.
    pub fn parse(args: &RunArgs) -> Result<RunConfig, ConfigError> {
        let _ = args;
        todo!("engine-spec helper")
    }
}
