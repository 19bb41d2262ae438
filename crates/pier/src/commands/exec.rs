//! `pier exec`: runs another process in a running container.
//!
//! Theory of operation: with `--process FILE` the OCI Process JSON in FILE is the whole story
//! (the other process flags are ignored, as in runc). Otherwise the process is built like runc
//! builds it: the `process` object of the container's config.json, with the command line as
//! args and the flags applied on top (`--env` replacing variables of the same name, `--cap`
//! added to the bounding, effective and permitted sets). Capabilities unknown to this kernel
//! are dropped with a warning (the runtime's `process::normalize_json`) instead of failing the
//! whole parse.
use anyhow::{bail, Context};
use oci_spec::runtime::{Capability, LinuxCapabilities, Process};
use pier_runtime::{ExecOptions, Runtime};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Flags of `exec`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Run a new process inside a running container",
    long_about = "Run a new process inside a running container: either the OCI process JSON of \
--process FILE, or COMMAND with the container's own process settings (user, env, cwd, \
capabilities of config.json) changed by the flags. Without --detach pier waits and exits with \
the process's exit code.\n\n\
Example:\n  pier exec web ps\n  pier exec -t -e TERM=xterm --console-socket /run/pty.sock web sh\n  \
pier exec --process /tmp/process.json --detach --pid-file /tmp/exec.pid web"
)]
pub struct Args {
    /// The OCI process JSON to run (the other process flags are then ignored)
    #[arg(short = 'p', long, value_name = "FILE")]
    pub process: Option<PathBuf>,
    /// Return once the process runs instead of waiting for it
    #[arg(short = 'd', long)]
    pub detach: bool,
    /// Write the process's pid to FILE
    #[arg(long, value_name = "FILE")]
    pub pid_file: Option<PathBuf>,
    /// AF_UNIX socket that receives the pty master (with --tty)
    #[arg(long, value_name = "SOCKET")]
    pub console_socket: Option<PathBuf>,
    /// Give the process a terminal
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Working directory inside the container
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// Set an environment variable (repeatable)
    #[arg(short = 'e', long, value_name = "NAME=VALUE")]
    pub env: Vec<String>,
    /// Run as UID[:GID]
    #[arg(short = 'u', long, value_name = "UID[:GID]")]
    pub user: Option<String>,
    /// Additional group id (repeatable)
    #[arg(short = 'g', long, value_name = "GID")]
    pub additional_gids: Vec<u32>,
    /// Add a capability (repeatable), e.g. CAP_NET_ADMIN or NET_ADMIN
    #[arg(short = 'c', long, value_name = "CAP")]
    pub cap: Vec<String>,
    /// Set no_new_privs for the process
    #[arg(long)]
    pub no_new_privs: bool,
    /// AppArmor profile for the process
    #[arg(long, value_name = "PROFILE")]
    pub apparmor: Option<String>,
    /// SELinux label for the process
    #[arg(long, value_name = "LABEL")]
    pub process_label: Option<String>,
    /// Pass N file descriptors after stdio on to the process
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub preserve_fds: u32,
    /// Accepted for runc compatibility and ignored (exec always uses the container's cgroup)
    #[arg(long, hide = true, value_name = "CGROUP")]
    pub cgroup: Option<String>,
    /// Accepted for runc compatibility and ignored
    #[arg(long, hide = true)]
    pub ignore_paused: bool,
    /// Container id
    pub id: String,
    /// The command and its arguments
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    pub command: Vec<String>,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    let process = match &args.process {
        Some(path) => {
            let path = super::absolute(path);
            tolerant_process(super::read_json(&path)?, &path)?
        }
        None => from_flags(&args, rt)?,
    };
    let opts = ExecOptions {
        process,
        detach: args.detach,
        pid_file: args.pid_file.as_deref().map(super::absolute),
        console_socket: args.console_socket.as_deref().map(super::absolute),
        preserve_fds: args.preserve_fds,
    };
    Ok(rt.exec(&args.id, &opts)?)
}

/// The container's `process` with the command line's changes.
fn from_flags(args: &Args, rt: &Runtime) -> anyhow::Result<Process> {
    if args.command.is_empty() {
        bail!("exec needs a command (pier exec ID COMMAND...) or --process FILE");
    }
    let bundle = rt.state(&args.id)?.bundle;
    let config = bundle.join("config.json");
    let spec: Value = super::read_json(&config)?;
    let mut process = tolerant_process(spec["process"].clone(), &config)?;
    process.set_args(Some(args.command.clone()));
    process.set_terminal(Some(args.tty));
    if let Some(cwd) = &args.cwd {
        process.set_cwd(cwd.clone());
    }
    let mut env = process.env().clone().unwrap_or_default();
    for var in &args.env {
        let name = var.split('=').next().unwrap_or_default();
        env.retain(|old| old.split('=').next() != Some(name));
        env.push(var.clone());
    }
    process.set_env(Some(env));
    apply_user(&mut process, args)?;
    apply_caps(&mut process, &args.cap)?;
    if args.no_new_privs {
        process.set_no_new_privileges(Some(true));
    }
    if args.apparmor.is_some() {
        process.set_apparmor_profile(args.apparmor.clone());
    }
    if args.process_label.is_some() {
        process.set_selinux_label(args.process_label.clone());
    }
    Ok(process)
}

fn apply_user(process: &mut Process, args: &Args) -> anyhow::Result<()> {
    let user = process.user_mut();
    if let Some(text) = &args.user {
        let (uid, gid) = parse_user(text)?;
        user.set_uid(uid);
        if let Some(gid) = gid {
            user.set_gid(gid);
        }
    }
    if !args.additional_gids.is_empty() {
        let mut gids = user.additional_gids().clone().unwrap_or_default();
        gids.extend(&args.additional_gids);
        user.set_additional_gids(Some(gids));
    }
    Ok(())
}

/// `UID[:GID]`, numbers only (as runc).
fn parse_user(text: &str) -> anyhow::Result<(u32, Option<u32>)> {
    let invalid = || format!("invalid --user {text:?}: expected UID[:GID] as numbers");
    let (uid, gid) = match text.split_once(':') {
        Some((uid, gid)) => (uid, Some(gid)),
        None => (text, None),
    };
    let uid = uid.parse().with_context(invalid)?;
    let gid = gid.map(str::parse).transpose().with_context(invalid)?;
    Ok((uid, gid))
}

/// Adds `caps` to the bounding, effective and permitted sets (and ambient when the process
/// already has inheritable capabilities, without which ambient ones cannot be raised).
fn apply_caps(process: &mut Process, caps: &[String]) -> anyhow::Result<()> {
    if caps.is_empty() {
        return Ok(());
    }
    let parsed = caps
        .iter()
        .map(|c| capability(c))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut sets = process.capabilities().clone().unwrap_or_else(empty_caps);
    let add = |set: &Option<std::collections::HashSet<Capability>>| {
        let mut set = set.clone().unwrap_or_default();
        set.extend(parsed.iter().copied());
        Some(set)
    };
    let bounding = add(sets.bounding());
    let effective = add(sets.effective());
    let permitted = add(sets.permitted());
    sets.set_bounding(bounding);
    sets.set_effective(effective);
    sets.set_permitted(permitted);
    if sets.inheritable().as_ref().is_some_and(|s| !s.is_empty()) {
        let ambient = add(sets.ambient());
        sets.set_ambient(ambient);
    }
    process.set_capabilities(Some(sets));
    Ok(())
}

fn empty_caps() -> LinuxCapabilities {
    let mut caps = LinuxCapabilities::default();
    caps.set_bounding(None);
    caps.set_effective(None);
    caps.set_inheritable(None);
    caps.set_permitted(None);
    caps.set_ambient(None);
    caps
}

/// `CAP_NET_ADMIN`, `net_admin` or `NET_ADMIN` as a capability.
fn capability(name: &str) -> anyhow::Result<Capability> {
    let upper = name.to_ascii_uppercase();
    let full = if upper.starts_with("CAP_") {
        upper
    } else {
        format!("CAP_{upper}")
    };
    serde_json::from_value(Value::String(full))
        .with_context(|| format!("unknown capability {name:?}"))
}

/// A Process from JSON, normalized as the runtime does for config.json (unknown capabilities
/// dropped with a warning, scheduler flags respelled); errors name `file`.
fn tolerant_process(mut value: Value, file: &Path) -> anyhow::Result<Process> {
    pier_runtime::process::normalize_json(&mut value);
    serde_json::from_value(value)
        .with_context(|| format!("{}: invalid process object", file.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn user_forms() {
        assert_eq!(parse_user("1000").unwrap(), (1000, None));
        assert_eq!(parse_user("1000:100").unwrap(), (1000, Some(100)));
        for bad in ["alice", "1:x", ":1", ""] {
            let err = format!("{:#}", parse_user(bad).unwrap_err());
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn capability_names() {
        assert_eq!(capability("CAP_NET_ADMIN").unwrap(), Capability::NetAdmin);
        assert_eq!(capability("net_admin").unwrap(), Capability::NetAdmin);
        let err = format!("{:#}", capability("CAP_FLY").unwrap_err());
        assert!(err.contains("\"CAP_FLY\""), "{err}");
    }

    #[test]
    fn unknown_capabilities_are_dropped() {
        let value = json!({
            "cwd": "/", "user": {"uid": 0, "gid": 0}, "args": ["sh"],
            "capabilities": {"bounding": ["CAP_KILL", "CAP_FROM_THE_FUTURE"]}
        });
        let p = tolerant_process(value, Path::new("config.json")).unwrap();
        let bounding = p
            .capabilities()
            .as_ref()
            .unwrap()
            .bounding()
            .clone()
            .unwrap();
        assert_eq!(
            bounding.into_iter().collect::<Vec<_>>(),
            vec![Capability::Kill]
        );
    }

    #[test]
    fn caps_join_three_sets_and_ambient_only_with_inheritable() {
        let mut p = Process::default();
        p.set_capabilities(Some(empty_caps()));
        apply_caps(&mut p, &[String::from("SYS_ADMIN")]).unwrap();
        let caps = p.capabilities().clone().unwrap();
        for set in [caps.bounding(), caps.effective(), caps.permitted()] {
            assert!(set.as_ref().unwrap().contains(&Capability::SysAdmin));
        }
        assert!(caps.ambient().is_none());
        assert!(apply_caps(&mut p, &[String::from("CAP_NOPE")]).is_err());
    }
}
