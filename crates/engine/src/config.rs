//! What `pier run` was asked to do, parsed and checked before anything is created.
//!
//! Theory of operation: the CLI collects the raw flag values into [`RunArgs`] (strings, exactly
//! as typed); [`RunConfig::parse`] turns them into typed values, reading `--env-file`s and
//! checking every value, and fails with a [`ConfigError`] naming the flag and the value. The
//! engine never sees an unparsed string. RunConfig is serialised into the container record, so
//! `pier inspect` shows it and a monitor can rebuild anything it needs from it.
//! Syntax and semantics are Docker's (`-e KEY` takes the caller's value or is dropped, env files
//! take values literally, `--cpus` to 0.001 CPU, `--memory` with Docker's units and 6 MB floor,
//! `--ulimit` names, `--cap-add ALL`, `-p` discarded on `host`/`none`); what pier does not have
//! (named or anonymous volumes, other `--security-opt`s) is refused by name. Host facts that
//! decide success later are checked here: volume sources exist, the rootfs is a directory, no
//! hard rlimit or capability beyond pier's own is asked for (this host's bounding set lacks
//! CAP_SYS_RESOURCE, see MACHINE-NOTES).
//! Tests: unit tests below (each flag, good and bad values).
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

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
        let network = parse_network(args.network.as_deref())?;
        let (seccomp, no_new_privileges) = parse_security_opts(&args.security_opt)?;
        let (volumes, tmpfs) = parse_mounts(&args.volumes, &args.tmpfs)?;
        let mut env = Vec::new();
        for path in &args.env_file {
            env.extend(read_env_file(path, env_lookup)?);
        }
        env.extend(parse_env(&args.env, env_lookup)?);
        Ok(RunConfig {
            detach: args.detach,
            rm: args.rm,
            name: args.name.as_deref().map(check_name).transpose()?,
            publish: parse_publish(&args.publish, &network)?,
            publish_mode: parse_publish_mode(args.publish_mode.as_deref())?,
            ip: parse_ip("--ip", args.ip.as_deref(), false, &network)?,
            ip6: parse_ip("--ip6", args.ip6.as_deref(), true, &network)?,
            hostname: parse_hostname(args.hostname.as_deref(), &network)?,
            network,
            env,
            workdir: args.workdir.as_deref().map(check_workdir).transpose()?,
            user: args.user.as_deref().map(check_user).transpose()?.flatten(),
            entrypoint: args.entrypoint.clone().filter(|e| !e.is_empty()),
            volumes,
            tmpfs,
            read_only: args.read_only,
            cpus_milli: args.cpus.as_deref().map(parse_cpus).transpose()?,
            memory_bytes: args.memory.as_deref().map(parse_memory).transpose()?,
            pids_limit: args.pids_limit.filter(|&n| n > 0),
            cap_add: parse_caps("--cap-add", &args.cap_add)?,
            cap_drop: parse_caps("--cap-drop", &args.cap_drop)?,
            seccomp,
            no_new_privileges,
            ulimits: parse_ulimits(&args.ulimit)?,
            init: args.init,
            tty: args.tty,
            interactive: args.interactive,
            rootfs: parse_rootfs(&args.rootfs)?,
            args: command_line(args)?,
        })
    }
}

fn invalid(flag: &'static str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        flag,
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// The caller's environment, for `-e KEY` and `KEY` lines of env files.
fn env_lookup(key: &str) -> Option<String> {
    std::env::var(key).ok()
}

/// `--name`: Docker's `[a-zA-Z0-9][a-zA-Z0-9_.-]+`.
fn check_name(name: &str) -> Result<String, ConfigError> {
    if is_docker_name(name) && name.len() >= 2 {
        return Ok(name.to_string());
    }
    Err(invalid(
        "--name",
        name,
        "only [a-zA-Z0-9][a-zA-Z0-9_.-]+ are allowed",
    ))
}

fn is_docker_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// `--network`: `bridge` (also `default`, and the default), `host`, `none`, `container:X`, or
/// a user network's name (whose existence the engine checks).
fn parse_network(value: Option<&str>) -> Result<NetworkMode, ConfigError> {
    let value = value.unwrap_or("bridge");
    Ok(match value {
        "bridge" | "default" => NetworkMode::Named("bridge".to_string()),
        "host" => NetworkMode::Host,
        "none" => NetworkMode::None,
        _ => match value.strip_prefix("container:") {
            Some("") => return Err(invalid("--network", value, "no container named")),
            Some(other) => NetworkMode::Container(other.to_string()),
            None if is_docker_name(value) => NetworkMode::Named(value.to_string()),
            None => {
                return Err(invalid(
                    "--network",
                    value,
                    "not bridge, host, none, container:NAME or a network name ([a-zA-Z0-9][a-zA-Z0-9_.-]*)",
                ))
            }
        },
    })
}

/// `-p`: Docker's syntax (pier-publish parses it). Ports are discarded with a warning on the
/// host's and on no network, and refused with another container's, as Docker does.
fn parse_publish(
    specs: &[String],
    network: &NetworkMode,
) -> Result<Vec<pier_publish::PortMapping>, ConfigError> {
    let mut out = Vec::new();
    for spec in specs {
        let mapping = spec
            .parse::<pier_publish::PortMapping>()
            .map_err(|e| invalid("-p", spec, e.to_string()))?;
        match network {
            NetworkMode::Named(_) => out.push(mapping),
            NetworkMode::Container(_) => {
                return Err(invalid(
                    "-p",
                    spec,
                    "conflicting options: port publishing and the container type network mode",
                ))
            }
            NetworkMode::Host | NetworkMode::None => {
                log::warn!("-p {spec}: published ports are discarded with this network mode")
            }
        }
    }
    Ok(out)
}

fn parse_publish_mode(value: Option<&str>) -> Result<pier_publish::engine::Mode, ConfigError> {
    use pier_publish::engine::Mode;
    Ok(match value {
        None | Some("auto") => Mode::Auto,
        Some("ebpf") => Mode::Ebpf,
        Some("nat") => Mode::Nat,
        Some("proxy") => Mode::Proxy,
        Some(other) => {
            return Err(invalid(
                "--publish-mode",
                other,
                "not auto, ebpf, nat or proxy",
            ))
        }
    })
}

/// `--ip` (IPv4) and `--ip6` (IPv6): only on a bridge or user network.
fn parse_ip(
    flag: &'static str,
    value: Option<&str>,
    v6: bool,
    network: &NetworkMode,
) -> Result<Option<IpAddr>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    let ip: IpAddr = value
        .parse()
        .map_err(|_| invalid(flag, value, "not an IP address"))?;
    if ip.is_ipv6() != v6 {
        let want = if v6 { "an IPv6" } else { "an IPv4" };
        return Err(invalid(flag, value, format!("{flag} takes {want} address")));
    }
    if ip.is_unspecified() || ip.is_multicast() || ip.is_loopback() {
        return Err(invalid(flag, value, "not a unicast address"));
    }
    if !matches!(network, NetworkMode::Named(_)) {
        return Err(invalid(
            flag,
            value,
            "a static address needs a bridge or user network (--network)",
        ));
    }
    Ok(Some(ip))
}

/// `--hostname`: what sethostname(2) takes (at most 64 bytes) in RFC 1123 characters.
fn parse_hostname(
    value: Option<&str>,
    network: &NetworkMode,
) -> Result<Option<String>, ConfigError> {
    let Some(value) = value else { return Ok(None) };
    if matches!(network, NetworkMode::Container(_)) {
        return Err(invalid(
            "--hostname",
            value,
            "conflicting options: hostname and the container type network mode",
        ));
    }
    let chars_ok = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    if value.is_empty() || value.len() > 64 || !chars_ok || value.starts_with(['-', '.']) {
        return Err(invalid(
            "--hostname",
            value,
            "a host name has 1 to 64 letters, digits, '-' and '.', and starts with a letter or digit",
        ));
    }
    Ok(Some(value.to_string()))
}

/// `-e KEY=VALUE` as is; `-e KEY` takes the caller's value, or is dropped when it has none.
fn parse_env(
    entries: &[String],
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, ConfigError> {
    let mut out = Vec::new();
    for entry in entries {
        match entry.split_once('=') {
            Some(("", _)) => return Err(invalid("-e", entry, "no variable name before '='")),
            Some(_) => out.push(entry.clone()),
            None if entry.is_empty() => return Err(invalid("-e", entry, "empty variable name")),
            None => out.extend(lookup(entry).map(|v| format!("{entry}={v}"))),
        }
    }
    Ok(out)
}

/// `--env-file`, Docker's format: one `KEY=VALUE` or `KEY` per line (values taken literally,
/// no quotes or expansion), leading whitespace ignored, blank lines and `#` comments skipped.
fn read_env_file(
    path: &Path,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<String>, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::EnvFile {
        path: path.to_path_buf(),
        source,
    })?;
    let bad_line = |n: usize, reason: String| ConfigError::EnvFile {
        path: path.to_path_buf(),
        source: std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {n}: {reason}"),
        ),
    };
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_start();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (line.trim_end(), None),
        };
        if key.is_empty() {
            return Err(bad_line(i + 1, "no variable name before '='".into()));
        }
        if key.contains(char::is_whitespace) {
            return Err(bad_line(
                i + 1,
                format!("variable {key:?} contains whitespace"),
            ));
        }
        match value {
            Some(value) => out.push(format!("{key}={value}")),
            None => out.extend(lookup(key).map(|v| format!("{key}={v}"))),
        }
    }
    Ok(out)
}

fn check_workdir(dir: &str) -> Result<String, ConfigError> {
    if dir.starts_with('/') {
        return Ok(dir.to_string());
    }
    Err(invalid(
        "-w",
        dir,
        "the working directory must be an absolute path",
    ))
}

/// `-u USER[:GROUP]` (names or numbers, resolved in the root by spec.rs); `-u ""` is the default.
fn check_user(user: &str) -> Result<Option<String>, ConfigError> {
    if user.is_empty() {
        return Ok(None);
    }
    let (name, group) = match user.split_once(':') {
        Some((name, group)) => (name, Some(group)),
        None => (user, None),
    };
    if name.is_empty() || group == Some("") || group.is_some_and(|g| g.contains(':')) {
        return Err(invalid(
            "-u",
            user,
            "expected USER[:GROUP] (names or numeric ids)",
        ));
    }
    Ok(Some(user.to_string()))
}

/// `-v` and `--tmpfs`, refusing two mounts on one destination as Docker does.
fn parse_mounts(
    volumes: &[String],
    tmpfs: &[String],
) -> Result<(Vec<Volume>, Vec<Tmpfs>), ConfigError> {
    let volumes = volumes
        .iter()
        .map(|v| parse_volume(v))
        .collect::<Result<Vec<_>, _>>()?;
    let tmpfs = tmpfs
        .iter()
        .map(|t| parse_tmpfs(t))
        .collect::<Result<Vec<_>, _>>()?;
    let mut seen = std::collections::HashSet::new();
    let destinations = volumes.iter().map(|v| (&v.destination, "-v"));
    for (dest, flag) in destinations.chain(tmpfs.iter().map(|t| (&t.destination, "--tmpfs"))) {
        if !seen.insert(dest.clone()) {
            let value = dest.display().to_string();
            return Err(invalid(flag, &value, "duplicate mount point"));
        }
    }
    Ok((volumes, tmpfs))
}

/// `-v SRC:DST[:ro|rw]` with SRC an existing absolute host path.
fn parse_volume(spec: &str) -> Result<Volume, ConfigError> {
    let parts: Vec<&str> = spec.split(':').collect();
    let (source, destination, mode) = match parts[..] {
        [src, dst] => (src, dst, ""),
        [src, dst, mode] => (src, dst, mode),
        [_] => {
            return Err(invalid(
                "-v",
                spec,
                "anonymous volumes are not supported: give SRC:DST with an absolute host path",
            ))
        }
        _ => return Err(invalid("-v", spec, "expected SRC:DST[:ro|rw]")),
    };
    if !source.starts_with('/') {
        return Err(invalid(
            "-v",
            spec,
            format!("{source:?} is a named volume, which pier does not have: give an absolute host path"),
        ));
    }
    if let Err(e) = std::fs::metadata(source) {
        return Err(invalid("-v", spec, format!("source {source}: {e}")));
    }
    let read_only = match mode {
        "" | "rw" => false,
        "ro" => true,
        other => {
            return Err(invalid(
                "-v",
                spec,
                format!("unsupported option {other:?} (pier takes ro or rw)"),
            ))
        }
    };
    Ok(Volume {
        source: PathBuf::from(source),
        destination: check_destination("-v", spec, destination)?,
        read_only,
    })
}

/// A mount destination: absolute, not `/`, without `..`.
fn check_destination(flag: &'static str, spec: &str, dst: &str) -> Result<PathBuf, ConfigError> {
    let path = Path::new(dst);
    if !path.is_absolute() || path.parent().is_none() {
        return Err(invalid(
            flag,
            spec,
            format!("destination {dst:?} must be an absolute path other than /"),
        ));
    }
    if path
        .components()
        .any(|c| c == std::path::Component::ParentDir)
    {
        return Err(invalid(
            flag,
            spec,
            format!("destination {dst:?} contains .."),
        ));
    }
    Ok(path.components().collect())
}

/// Options `--tmpfs` takes: mount flags, and the tmpfs data options with a value.
const TMPFS_FLAGS: &[&str] = &[
    "rw",
    "ro",
    "exec",
    "noexec",
    "suid",
    "nosuid",
    "dev",
    "nodev",
    "sync",
    "async",
    "dirsync",
    "atime",
    "noatime",
    "diratime",
    "nodiratime",
    "relatime",
    "norelatime",
    "strictatime",
    "nostrictatime",
];
const TMPFS_DATA: &[&str] = &[
    "size",
    "mode",
    "uid",
    "gid",
    "nr_inodes",
    "nr_blocks",
    "mpol",
    "huge",
];

/// `--tmpfs DST[:OPT,OPT…]`.
fn parse_tmpfs(spec: &str) -> Result<Tmpfs, ConfigError> {
    let (dst, opts) = spec.split_once(':').unwrap_or((spec, ""));
    let options: Vec<String> = opts
        .split(',')
        .filter(|o| !o.is_empty())
        .map(str::to_string)
        .collect();
    for opt in &options {
        let known = match opt.split_once('=') {
            Some((key, value)) => TMPFS_DATA.contains(&key) && !value.is_empty(),
            None => TMPFS_FLAGS.contains(&opt.as_str()),
        };
        if !known {
            return Err(invalid("--tmpfs", spec, format!("unknown option {opt:?}")));
        }
    }
    Ok(Tmpfs {
        destination: check_destination("--tmpfs", spec, dst)?,
        options,
    })
}

/// `--cpus`: a decimal number of CPUs, to 0.001, from 0.01 to the CPUs this host has.
fn parse_cpus(value: &str) -> Result<u64, ConfigError> {
    let bad = |reason: String| invalid("--cpus", value, reason);
    let (int, frac) = value.split_once('.').unwrap_or((value, ""));
    let frac = frac.trim_end_matches('0');
    let digits = |s: &str| s.chars().all(|c| c.is_ascii_digit());
    if (int.is_empty() && frac.is_empty()) || !digits(int) || !digits(frac) {
        return Err(bad("not a decimal number of CPUs".into()));
    }
    if frac.len() > 3 {
        return Err(bad("pier's granularity is 0.001 CPU".into()));
    }
    let whole: u64 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad("too large".into()))?
    };
    let milli = whole
        .checked_mul(1000)
        .and_then(|m| m.checked_add(format!("{frac:0<3}").parse::<u64>().ok()?))
        .ok_or_else(|| bad("too large".into()))?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    if !(10..=cpus * 1000).contains(&milli) {
        return Err(bad(format!(
            "range of CPUs is from 0.01 to {cpus}.00, as there are only {cpus} CPUs available"
        )));
    }
    Ok(milli)
}

/// `--memory`: Docker's RAMInBytes (`512m`, `1.5g`, `1GiB`, `100k`, bytes), at least 6 MiB.
fn parse_memory(value: &str) -> Result<i64, ConfigError> {
    let bad = |reason: &str| invalid("--memory", value, reason);
    let num_end = value
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(value.len());
    let (num, unit) = value.split_at(num_end);
    let number: f64 = match num.parse() {
        Ok(n) if !num.starts_with('.') => n,
        _ => {
            return Err(bad(
                "expected a number with an optional b, k, m, g, t or p suffix",
            ))
        }
    };
    let unit = unit.strip_prefix(' ').unwrap_or(unit).to_ascii_lowercase();
    let unit = unit.strip_suffix('b').unwrap_or(&unit);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => return Err(bad("unknown unit (b, k, m, g, t or p)")),
    };
    let bytes = number * (1u64 << shift) as f64;
    if bytes >= i64::MAX as f64 {
        return Err(bad("too large"));
    }
    if bytes < (6 << 20) as f64 {
        return Err(bad("minimum memory limit allowed is 6MB"));
    }
    Ok(bytes as i64)
}

/// Every capability of Linux 6.x, by number (`CAP_` + name).
pub const ALL_CAPS: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The capabilities pier itself may hand on: its bounding set (`CapBnd` of /proc/self/status),
/// all of them if that cannot be read.
pub fn caller_bounding_set() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(u64::MAX)
}

/// `--cap-add`/`--cap-drop`: names with or without `CAP_`, any case, or `ALL`. A capability
/// outside pier's own bounding set cannot be given and is refused by name.
fn parse_caps(flag: &'static str, names: &[String]) -> Result<Vec<String>, ConfigError> {
    let bounding = caller_bounding_set();
    let mut out = Vec::new();
    for name in names {
        let upper = name.to_ascii_uppercase();
        if upper == "ALL" {
            out.push(upper);
            continue;
        }
        let full = if upper.starts_with("CAP_") {
            upper
        } else {
            format!("CAP_{upper}")
        };
        let Some(bit) = ALL_CAPS.iter().position(|c| *c == full) else {
            return Err(invalid(flag, name, "unknown capability"));
        };
        if flag == "--cap-add" && bounding & (1 << bit) == 0 {
            return Err(invalid(
                flag,
                name,
                format!("{full} is not in pier's own bounding set, so no container can have it"),
            ));
        }
        out.push(full);
    }
    Ok(out)
}

/// `--security-opt`: `seccomp=unconfined|builtin|FILE` and `no-new-privileges[=true|false]`
/// (Docker's older `:` separator too); every other option is refused by name.
fn parse_security_opts(opts: &[String]) -> Result<(Seccomp, bool), ConfigError> {
    let mut seccomp = Seccomp::Default;
    let mut nnp = false;
    for opt in opts {
        let (key, value) = match opt.split_once('=').or_else(|| opt.split_once(':')) {
            Some((k, v)) => (k, Some(v)),
            None => (opt.as_str(), None),
        };
        match (key, value) {
            ("seccomp", Some("unconfined")) => seccomp = Seccomp::Unconfined,
            ("seccomp", Some("builtin")) => seccomp = Seccomp::Default,
            ("seccomp", Some(file)) if !file.is_empty() => seccomp = read_profile(opt, file)?,
            ("no-new-privileges", None | Some("true" | "1")) => nnp = true,
            ("no-new-privileges", Some("false" | "0")) => nnp = false,
            ("seccomp" | "no-new-privileges", _) => {
                return Err(invalid("--security-opt", opt, "invalid value"))
            }
            (other, _) => {
                return Err(invalid(
                    "--security-opt",
                    opt,
                    format!(
                        "pier does not support {other:?} (only seccomp= and no-new-privileges)"
                    ),
                ))
            }
        }
    }
    Ok((seccomp, nnp))
}

/// A seccomp profile file: readable JSON with a `defaultAction` (Docker's format or OCI's).
fn read_profile(opt: &str, file: &str) -> Result<Seccomp, ConfigError> {
    let bad = |reason: String| invalid("--security-opt", opt, reason);
    let path = std::fs::canonicalize(file).map_err(|e| bad(format!("{file}: {e}")))?;
    let text = std::fs::read_to_string(&path).map_err(|e| bad(format!("{file}: {e}")))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| bad(format!("{file}: not JSON: {e}")))?;
    if !value.get("defaultAction").is_some_and(|a| a.is_string()) {
        return Err(bad(format!(
            "{file}: no \"defaultAction\": not a seccomp profile"
        )));
    }
    Ok(Seccomp::Profile(path))
}

/// Docker's `--ulimit` names and the kernel's resources.
const ULIMITS: [(&str, nix::sys::resource::Resource); 15] = {
    use nix::sys::resource::Resource as R;
    [
        ("core", R::RLIMIT_CORE),
        ("cpu", R::RLIMIT_CPU),
        ("data", R::RLIMIT_DATA),
        ("fsize", R::RLIMIT_FSIZE),
        ("locks", R::RLIMIT_LOCKS),
        ("memlock", R::RLIMIT_MEMLOCK),
        ("msgqueue", R::RLIMIT_MSGQUEUE),
        ("nice", R::RLIMIT_NICE),
        ("nofile", R::RLIMIT_NOFILE),
        ("nproc", R::RLIMIT_NPROC),
        ("rss", R::RLIMIT_RSS),
        ("rtprio", R::RLIMIT_RTPRIO),
        ("rttime", R::RLIMIT_RTTIME),
        ("sigpending", R::RLIMIT_SIGPENDING),
        ("stack", R::RLIMIT_STACK),
    ]
};

/// `--ulimit NAME=SOFT[:HARD]` (HARD defaults to SOFT; -1 is unlimited; later wins). A hard limit
/// above pier's own is refused unless pier holds CAP_SYS_RESOURCE: the kernel would refuse it.
fn parse_ulimits(specs: &[String]) -> Result<Vec<Ulimit>, ConfigError> {
    let mut out: Vec<Ulimit> = Vec::new();
    for spec in specs {
        let ulimit = parse_ulimit(spec)?;
        check_hard_limit(spec, &ulimit)?;
        out.retain(|u| u.name != ulimit.name);
        out.push(ulimit);
    }
    Ok(out)
}

fn parse_ulimit(spec: &str) -> Result<Ulimit, ConfigError> {
    let bad = |reason: &str| invalid("--ulimit", spec, reason);
    let (name, values) = spec
        .split_once('=')
        .ok_or_else(|| bad("expected NAME=SOFT[:HARD]"))?;
    if !ULIMITS.iter().any(|(n, _)| *n == name) {
        return Err(bad("unknown ulimit name (core, cpu, data, fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, sigpending, stack)"));
    }
    let limit = |v: &str| match v.parse::<i64>() {
        Ok(-1) => Ok(u64::MAX),
        Ok(n) if n >= 0 => Ok(n as u64),
        _ => Err(bad("a limit is a number (or -1 for unlimited)")),
    };
    let (soft, hard) = match values.split_once(':') {
        Some((soft, hard)) => (limit(soft)?, limit(hard)?),
        None => (limit(values)?, limit(values)?),
    };
    if soft > hard {
        return Err(bad(
            "the soft limit must be less than or equal to the hard limit",
        ));
    }
    Ok(Ulimit {
        name: name.to_string(),
        soft,
        hard,
    })
}

fn check_hard_limit(spec: &str, ulimit: &Ulimit) -> Result<(), ConfigError> {
    const CAP_SYS_RESOURCE: u32 = 24;
    let Some((_, resource)) = ULIMITS.iter().find(|(n, _)| *n == ulimit.name) else {
        return Ok(());
    };
    let Ok((_, own_hard)) = nix::sys::resource::getrlimit(*resource) else {
        return Ok(());
    };
    if ulimit.hard <= own_hard || caller_bounding_set() & (1 << CAP_SYS_RESOURCE) != 0 {
        return Ok(());
    }
    Err(invalid(
        "--ulimit",
        spec,
        format!(
            "hard limit above pier's own ({own_hard}); raising it needs CAP_SYS_RESOURCE, which \
             this host's bounding set lacks: ask for at most {own_hard}"
        ),
    ))
}

/// The rootfs argument: `host` or an existing directory (made absolute and canonical).
fn parse_rootfs(value: &str) -> Result<Rootfs, ConfigError> {
    if value == "host" {
        return Ok(Rootfs::Host);
    }
    let bad = |reason: String| ConfigError::Rootfs {
        path: value.to_string(),
        reason,
    };
    let path = std::fs::canonicalize(value).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => bad("does not exist (give a directory or `host`)".into()),
        _ => bad(e.to_string()),
    })?;
    if !path.is_dir() {
        return Err(bad("is not a directory".into()));
    }
    Ok(Rootfs::Dir(path))
}

/// argv: `--entrypoint` (one word, as Docker takes it; empty = none) then the command.
fn command_line(args: &RunArgs) -> Result<Vec<String>, ConfigError> {
    let entrypoint = args.entrypoint.iter().filter(|e| !e.is_empty()).cloned();
    let argv: Vec<String> = entrypoint.chain(args.command.iter().cloned()).collect();
    if argv.is_empty() {
        return Err(ConfigError::NoCommand);
    }
    Ok(argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(rootfs: &str, command: &[&str]) -> RunArgs {
        RunArgs {
            rootfs: rootfs.to_string(),
            command: command.iter().map(|s| s.to_string()).collect(),
            ..RunArgs::default()
        }
    }

    fn parse_with(edit: impl FnOnce(&mut RunArgs)) -> Result<RunConfig, ConfigError> {
        let mut a = args("host", &["/bin/true"]);
        edit(&mut a);
        RunConfig::parse(&a)
    }

    /// The error text of a refused flag set (which must name the flag and the value).
    fn refused(edit: impl FnOnce(&mut RunArgs)) -> String {
        parse_with(edit).expect_err("must be refused").to_string()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn defaults_are_dockers() {
        let c = parse_with(|_| {}).unwrap();
        assert_eq!(c.network, NetworkMode::Named("bridge".into()));
        assert_eq!(c.seccomp, Seccomp::Default);
        assert!(!c.no_new_privileges);
        assert_eq!(c.rootfs, Rootfs::Host);
        assert_eq!(c.args, ["/bin/true"]);
        assert_eq!(c.publish_mode, pier_publish::engine::Mode::Auto);
    }

    #[test]
    fn env_takes_values_and_the_callers_variables() {
        let lookup = |k: &str| (k == "HOME").then(|| "/root".to_string());
        let env = parse_env(&strings(&["A=1", "B=", "HOME", "UNSET_X", "C=x=y"]), lookup).unwrap();
        assert_eq!(env, ["A=1", "B=", "HOME=/root", "C=x=y"]);
        assert!(parse_env(&strings(&["=1"]), lookup)
            .unwrap_err()
            .to_string()
            .contains("-e \"=1\""));
        assert!(parse_env(&strings(&[""]), lookup).is_err());
    }

    #[test]
    fn env_file_in_dockers_format() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("env");
        std::fs::write(&file, "# comment\n\n  A=1\nB=\"quoted\" kept\nHOME\nNOPE\n").unwrap();
        let lookup = |k: &str| (k == "HOME").then(|| "/root".to_string());
        let env = read_env_file(&file, lookup).unwrap();
        assert_eq!(env, ["A=1", "B=\"quoted\" kept", "HOME=/root"]);
        std::fs::write(&file, "A=1\nBAD KEY=2\n").unwrap();
        let err = read_env_file(&file, lookup).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("BAD KEY"), "{err}");
        let missing = dir.path().join("missing");
        let err = read_env_file(&missing, lookup).unwrap_err().to_string();
        assert!(
            err.contains("--env-file") && err.contains("missing"),
            "{err}"
        );
    }

    #[test]
    fn env_files_come_before_e_flags() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("env");
        std::fs::write(&file, "A=file\n").unwrap();
        let c = parse_with(|a| {
            a.env_file = vec![file.clone()];
            a.env = strings(&["A=flag"]);
        })
        .unwrap();
        assert_eq!(c.env, ["A=file", "A=flag"]);
    }

    #[test]
    fn volumes_need_an_existing_absolute_source() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().display().to_string();
        let v = parse_volume(&format!("{src}:/data:ro")).unwrap();
        assert_eq!(v.source, dir.path());
        assert_eq!(v.destination, Path::new("/data"));
        assert!(v.read_only);
        assert!(!parse_volume(&format!("{src}:/data/")).unwrap().read_only);
        for (spec, says) in [
            ("myvol:/data".to_string(), "named volume"),
            ("/data".to_string(), "anonymous"),
            (format!("{src}/missing:/data"), "No such file"),
            (format!("{src}:data"), "absolute"),
            (format!("{src}:/"), "absolute path other than /"),
            (format!("{src}:/data:z"), "\"z\""),
            (format!("{src}:/a/../b"), ".."),
            (format!("{src}:/a:ro:x"), "SRC:DST"),
        ] {
            let err = parse_volume(&spec).unwrap_err().to_string();
            assert!(err.starts_with(&format!("-v {spec:?}")), "{err}");
            assert!(err.contains(says), "{spec}: {err}");
        }
    }

    #[test]
    fn tmpfs_options_are_checked() {
        let t = parse_tmpfs("/cache:size=64m,mode=1777,noexec").unwrap();
        assert_eq!(t.destination, Path::new("/cache"));
        assert_eq!(t.options, ["size=64m", "mode=1777", "noexec"]);
        assert!(parse_tmpfs("/run/x").unwrap().options.is_empty());
        let err = parse_tmpfs("/cache:bogus").unwrap_err().to_string();
        assert!(
            err.contains("--tmpfs \"/cache:bogus\"") && err.contains("bogus"),
            "{err}"
        );
        assert!(parse_tmpfs("cache").is_err());
        assert!(parse_tmpfs("/cache:size=").is_err());
    }

    #[test]
    fn one_destination_takes_one_mount() {
        let err = refused(|a| {
            a.volumes = strings(&["/tmp:/data"]);
            a.tmpfs = strings(&["/data"]);
        });
        assert!(
            err.contains("duplicate mount point") && err.contains("/data"),
            "{err}"
        );
    }

    #[test]
    fn cpus_become_millicores() {
        assert_eq!(parse_cpus("1").unwrap(), 1000);
        assert_eq!(parse_cpus("0.5").unwrap(), 500);
        assert_eq!(parse_cpus(".25").unwrap(), 250);
        assert_eq!(parse_cpus("0.0100").unwrap(), 10);
        for bad in [
            "", ".", "abc", "-1", "0", "0.001", "0.0005", "1e3", "100000",
        ] {
            let err = parse_cpus(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--cpus {bad:?}")), "{err}");
        }
    }

    #[test]
    fn memory_takes_dockers_units() {
        assert_eq!(parse_memory("512m").unwrap(), 512 << 20);
        assert_eq!(parse_memory("1g").unwrap(), 1 << 30);
        assert_eq!(parse_memory("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_memory("1.5g").unwrap(), 3 << 29);
        assert_eq!(parse_memory("8192k").unwrap(), 8 << 20);
        assert_eq!(parse_memory("10485760").unwrap(), 10 << 20);
        assert_eq!(parse_memory("10485760b").unwrap(), 10 << 20);
        for bad in ["", "m", "12x", "1m", "-5m", "1.2.3m", "99999999p"] {
            let err = parse_memory(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--memory {bad:?}")), "{err}");
        }
    }

    #[test]
    fn ulimits_take_dockers_names() {
        let u = parse_ulimit("nofile=512:1024").unwrap();
        assert_eq!((u.name.as_str(), u.soft, u.hard), ("nofile", 512, 1024));
        let u = parse_ulimit("core=-1").unwrap();
        assert_eq!((u.soft, u.hard), (u64::MAX, u64::MAX));
        for bad in ["nofile", "bogus=1", "nofile=2:1", "nofile=x", "nofile=-2"] {
            let err = parse_ulimit(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--ulimit {bad:?}")), "{err}");
        }
        let later = parse_ulimits(&strings(&["nofile=100", "nofile=200"])).unwrap();
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].soft, 200);
    }

    #[test]
    fn a_hard_ulimit_above_pier_own_is_refused_without_cap_sys_resource() {
        let (_, hard) =
            nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE).unwrap();
        let at_own = format!("nofile={hard}");
        assert!(parse_ulimits(&[at_own]).is_ok());
        if hard == u64::MAX || caller_bounding_set() & (1 << 24) != 0 {
            return; // nothing is above, or pier may raise it
        }
        let above = format!("nofile={}", hard + 1);
        let err = parse_ulimits(&[above]).unwrap_err().to_string();
        assert!(
            err.contains("CAP_SYS_RESOURCE") && err.contains("--ulimit"),
            "{err}"
        );
    }

    #[test]
    fn caps_are_normalised() {
        let caps = parse_caps("--cap-drop", &strings(&["net_raw", "CAP_CHOWN", "all"])).unwrap();
        assert_eq!(caps, ["CAP_NET_RAW", "CAP_CHOWN", "ALL"]);
        let err = parse_caps("--cap-add", &strings(&["FLY"]))
            .unwrap_err()
            .to_string();
        assert_eq!(err, "--cap-add \"FLY\": unknown capability");
    }

    #[test]
    fn a_cap_outside_the_bounding_set_is_refused() {
        let bounding = caller_bounding_set();
        if let Some(bit) = (0..ALL_CAPS.len()).find(|b| bounding & (1 << b) == 0) {
            let err = parse_caps("--cap-add", &strings(&[ALL_CAPS[bit]])).unwrap_err();
            assert!(err.to_string().contains("bounding set"), "{err}");
        }
        assert!(parse_caps("--cap-drop", &strings(&ALL_CAPS)).is_ok());
    }

    #[test]
    fn security_opts() {
        let p = |opts: &[&str]| parse_security_opts(&strings(opts));
        assert_eq!(p(&[]).unwrap(), (Seccomp::Default, false));
        assert_eq!(
            p(&["seccomp=unconfined"]).unwrap(),
            (Seccomp::Unconfined, false)
        );
        assert_eq!(
            p(&["seccomp:unconfined"]).unwrap(),
            (Seccomp::Unconfined, false)
        );
        assert_eq!(p(&["no-new-privileges"]).unwrap(), (Seccomp::Default, true));
        assert!(p(&["no-new-privileges=true"]).unwrap().1);
        assert!(!p(&["no-new-privileges:false"]).unwrap().1);
        for (bad, says) in [
            ("apparmor=unconfined", "\"apparmor\""),
            ("label=disable", "\"label\""),
            ("no-new-privileges=maybe", "invalid value"),
            ("seccomp=", "invalid value"),
            ("seccomp=/nonexistent/profile.json", "nonexistent"),
        ] {
            let err = p(&[bad]).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--security-opt {bad:?}")), "{err}");
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn seccomp_profile_files_are_read_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(&good, pier_seccomp::DOCKER_DEFAULT_PROFILE).unwrap();
        let opt = format!("seccomp={}", good.display());
        assert_eq!(
            parse_security_opts(&[opt]).unwrap().0,
            Seccomp::Profile(good)
        );
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, "{\"syscalls\": []}").unwrap();
        let err = parse_security_opts(&[format!("seccomp={}", bad.display())]).unwrap_err();
        assert!(err.to_string().contains("defaultAction"), "{err}");
        std::fs::write(&bad, "not json").unwrap();
        let err = parse_security_opts(&[format!("seccomp={}", bad.display())]).unwrap_err();
        assert!(err.to_string().contains("not JSON"), "{err}");
    }

    #[test]
    fn networks() {
        let named = |n: &str| NetworkMode::Named(n.into());
        assert_eq!(parse_network(None).unwrap(), named("bridge"));
        assert_eq!(parse_network(Some("default")).unwrap(), named("bridge"));
        assert_eq!(parse_network(Some("host")).unwrap(), NetworkMode::Host);
        assert_eq!(parse_network(Some("none")).unwrap(), NetworkMode::None);
        assert_eq!(parse_network(Some("backend")).unwrap(), named("backend"));
        assert_eq!(
            parse_network(Some("container:web")).unwrap(),
            NetworkMode::Container("web".into())
        );
        for bad in ["container:", "-x", "a b", ""] {
            let err = parse_network(Some(bad)).unwrap_err().to_string();
            assert!(err.starts_with(&format!("--network {bad:?}")), "{err}");
        }
    }

    #[test]
    fn publish_follows_the_network_mode() {
        let c = parse_with(|a| a.publish = strings(&["8080:80", "127.0.0.1::53/udp"])).unwrap();
        assert_eq!(c.publish.len(), 2);
        let err = refused(|a| a.publish = strings(&["80:80:80:80"]));
        assert!(err.starts_with("-p \"80:80:80:80\""), "{err}");
        let host = parse_with(|a| {
            a.network = Some("host".into());
            a.publish = strings(&["8080:80"]);
        });
        assert!(host.unwrap().publish.is_empty());
        let err = refused(|a| {
            a.network = Some("container:web".into());
            a.publish = strings(&["8080:80"]);
        });
        assert!(err.contains("conflicting options"), "{err}");
        let err = refused(|a| a.publish_mode = Some("fast".into()));
        assert!(err.starts_with("--publish-mode \"fast\""), "{err}");
        let c = parse_with(|a| a.publish_mode = Some("nat".into())).unwrap();
        assert_eq!(c.publish_mode, pier_publish::engine::Mode::Nat);
    }

    #[test]
    fn static_addresses() {
        let c = parse_with(|a| {
            a.network = Some("backend".into());
            a.ip = Some("198.18.5.9".into());
            a.ip6 = Some("2001:2::9".into());
        })
        .unwrap();
        assert_eq!(c.ip, Some("198.18.5.9".parse().unwrap()));
        assert_eq!(c.ip6, Some("2001:2::9".parse().unwrap()));
        for (flag, value, network) in [
            ("--ip", "198.18.5", "bridge"),
            ("--ip", "2001:2::9", "bridge"),
            ("--ip6", "198.18.5.9", "bridge"),
            ("--ip", "0.0.0.0", "bridge"),
            ("--ip", "198.18.5.9", "host"),
            ("--ip", "198.18.5.9", "none"),
        ] {
            let err = refused(|a| {
                a.network = Some(network.into());
                match flag {
                    "--ip" => a.ip = Some(value.into()),
                    _ => a.ip6 = Some(value.into()),
                }
            });
            assert!(err.starts_with(&format!("{flag} {value:?}")), "{err}");
        }
    }

    #[test]
    fn names_hostnames_workdirs_users() {
        let c = parse_with(|a| {
            a.name = Some("web-1".into());
            a.hostname = Some("web.example".into());
            a.workdir = Some("/srv".into());
            a.user = Some("1000:1000".into());
        })
        .unwrap();
        assert_eq!(c.name.as_deref(), Some("web-1"));
        assert_eq!(c.hostname.as_deref(), Some("web.example"));
        assert_eq!(c.workdir.as_deref(), Some("/srv"));
        assert_eq!(c.user.as_deref(), Some("1000:1000"));
        assert_eq!(
            parse_with(|a| a.user = Some(String::new())).unwrap().user,
            None
        );
        assert!(refused(|a| a.name = Some("-x".into())).starts_with("--name \"-x\""));
        assert!(refused(|a| a.name = Some("a/b".into())).starts_with("--name"));
        assert!(refused(|a| a.hostname = Some("a_b".into())).starts_with("--hostname \"a_b\""));
        assert!(refused(|a| a.hostname = Some("x".repeat(65))).starts_with("--hostname"));
        assert!(refused(|a| a.workdir = Some("srv".into())).starts_with("-w \"srv\""));
        assert!(refused(|a| a.user = Some(":1".into())).starts_with("-u \":1\""));
        assert!(refused(|a| a.user = Some("a:".into())).starts_with("-u \"a:\""));
    }

    #[test]
    fn rootfs_is_host_or_an_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let c = parse_with(|a| a.rootfs = dir.path().display().to_string()).unwrap();
        assert_eq!(c.rootfs, Rootfs::Dir(dir.path().canonicalize().unwrap()));
        let missing = dir.path().join("missing").display().to_string();
        let err = refused(|a| a.rootfs = missing.clone());
        assert_eq!(
            err,
            format!("rootfs {missing}: does not exist (give a directory or `host`)")
        );
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let err = refused(|a| a.rootfs = file.display().to_string());
        assert!(err.ends_with("is not a directory"), "{err}");
    }

    #[test]
    fn entrypoint_comes_before_the_command() {
        let c = parse_with(|a| {
            a.entrypoint = Some("/bin/sh".into());
            a.command = strings(&["-c", "true"]);
        })
        .unwrap();
        assert_eq!(c.args, ["/bin/sh", "-c", "true"]);
        let c = parse_with(|a| {
            a.entrypoint = Some("/bin/true".into());
            a.command.clear();
        })
        .unwrap();
        assert_eq!(c.args, ["/bin/true"]);
        let err = refused(|a| {
            a.entrypoint = Some(String::new());
            a.command.clear();
        });
        assert!(err.contains("no command"), "{err}");
    }

    #[test]
    fn pids_limit_zero_or_negative_is_unlimited() {
        assert_eq!(
            parse_with(|a| a.pids_limit = Some(100)).unwrap().pids_limit,
            Some(100)
        );
        assert_eq!(
            parse_with(|a| a.pids_limit = Some(-1)).unwrap().pids_limit,
            None
        );
    }
}
