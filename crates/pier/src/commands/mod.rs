//! Command-line front end: which command line an invocation speaks, runc's clap tree with its
//! global flags, and the dispatch to one module per verb.
//!
//! Theory of operation: run as `/dev/init`, pier is a container's init (pier-engine's `init`).
//! Otherwise it speaks two command lines. [`engine::dialect`] decides which one an
//! invocation uses (rule in its header and in `pier --help`): the engine's Docker-style verbs
//! (`engine/`, one module per verb, exit code 125 on pier's own failures) or runc's, below.
//! pier speaks runc's command line because Docker (through containerd's
//! shim), containerd itself and Podman (through conmon) drive it exactly as they drive runc. The
//! global flags configure logging and the `Runtime`; each verb's module turns its flags into the
//! runtime's option types (resolving relative paths first, since the runtime wants absolute
//! ones) and returns the process exit code. Errors travel up as `anyhow::Error`, are printed as
//! `pier: <message>` on stderr and, with `--log`, appended to the log file as an error line
//! (containerd's shim shows the last error line of that file to its user); the exit code is 1.
//!
//! Flags that callers pass to runc but that mean nothing to pier (`--criu`, `--rootless`) are
//! accepted and ignored, so that no caller fails on them.
//!
//! Tests: unit tests below and beside each verb; black-box tests of the binary in
//! `crates/pier/tests/cli_*.rs`.
pub mod bench;
mod create;
mod delete;
pub mod engine;
mod exec;
mod features;
mod kill;
mod list;
mod pause;
mod proxy;
mod ps;
mod resume;
mod run;
mod spec;
mod start;
mod state;
mod update;

use crate::logging::{self, LogFormat};
use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use pier_cgroups::ManagerKind;
use pier_runtime::Runtime;
use std::path::{Path, PathBuf};

/// The OCI runtime specification version pier implements.
pub const SPEC_VERSION: &str = "1.2.0";

/// What `--version` prints after "pier ": runc's lines (the commit when the build knew it).
fn version() -> &'static str {
    let commit = option_env!("PIER_GIT_COMMIT")
        .map(|c| format!("\ncommit: {c}"))
        .unwrap_or_default();
    let text = format!(
        "version {}{commit}\nspec: {SPEC_VERSION}",
        env!("CARGO_PKG_VERSION")
    );
    Box::leak(text.into_boxed_str())
}

/// pier: an OCI container runtime with runc's command line.
#[derive(Parser, Debug)]
#[command(
    name = "pier",
    disable_version_flag = true,
    about = "An OCI container runtime with runc's command line",
    long_about = "pier creates and runs containers from OCI bundles (a directory holding config.json \
and a root filesystem), with runc's command line: Docker (through containerd), containerd and \
Podman drive it as they drive runc.\n\n\
Quick start (as root):\n  \
mkdir -p bundle/rootfs && cd bundle\n  \
cp /bin/busybox rootfs/ && pier spec   # then set process.args to [\"/busybox\",\"echo\",\"hi\"]\n  \
pier run demo"
)]
pub struct Cli {
    #[command(flatten)]
    pub global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

/// Flags before the verb; runc's names and meanings.
#[derive(clap::Args, Debug, Clone)]
pub struct GlobalArgs {
    /// Root directory for container state (one subdirectory per container; keep it on tmpfs)
    #[arg(long, global = true, default_value = "/run/pier", value_name = "DIR")]
    pub root: PathBuf,
    /// Append log lines to FILE instead of stderr
    #[arg(long, global = true, value_name = "FILE")]
    pub log: Option<PathBuf>,
    /// Format of log lines: text, or json (one {"level","msg","time"} object per line)
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log debug messages too
    #[arg(long, global = true)]
    pub debug: bool,
    /// Use systemd for cgroups; cgroupsPath is then "slice:prefix:name" (= --cgroup-manager systemd)
    #[arg(long, global = true)]
    pub systemd_cgroup: bool,
    /// How cgroups are managed
    #[arg(long, global = true, value_enum, value_name = "MANAGER")]
    pub cgroup_manager: Option<CgroupManager>,
    /// Accepted for runc compatibility and ignored (pier has no checkpoint/restore)
    #[arg(long, global = true, hide = true, value_name = "PATH")]
    pub criu: Option<String>,
    /// Accepted for runc compatibility and ignored (auto, true or false); before the verb only,
    /// since `spec --rootless` is a switch of its own
    #[arg(long, hide = true, value_name = "auto|true|false")]
    pub rootless: Option<String>,
    /// Print the version
    #[arg(short = 'v', long = "version", action = clap::ArgAction::Version)]
    version: Option<bool>,
}

/// `--cgroup-manager` values.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CgroupManager {
    /// Write the cgroup directories under /sys/fs/cgroup directly
    Cgroupfs,
    /// Let systemd own the cgroup ("slice:prefix:name" paths)
    Systemd,
    /// Create no cgroup: the container stays in the caller's cgroups
    Disabled,
}

impl GlobalArgs {
    /// The runtime these flags configure.
    pub fn runtime(&self) -> Runtime {
        let cgroup_manager = match (self.cgroup_manager, self.systemd_cgroup) {
            (Some(CgroupManager::Cgroupfs), _) => ManagerKind::Cgroupfs,
            (Some(CgroupManager::Systemd), _) | (None, true) => ManagerKind::Systemd,
            (Some(CgroupManager::Disabled), _) => ManagerKind::Disabled,
            (None, false) => ManagerKind::Cgroupfs,
        };
        Runtime {
            root: absolute(&self.root),
            cgroup_manager,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Command {
    Create(create::Args),
    Start(start::Args),
    Run(run::Args),
    State(state::Args),
    Kill(kill::Args),
    Delete(delete::Args),
    Exec(exec::Args),
    Ps(ps::Args),
    List(list::Args),
    Spec(spec::Args),
    Features(features::Args),
    Pause(pause::Args),
    Resume(resume::Args),
    Update(update::Args),
    Bench(bench::Args),
    Proxy(proxy::Args),
}

/// Runs the command line in the dialect it speaks; returns the process exit code. Started as
/// `/dev/init` (`pier run --init` binds the binary there), pier is the container's init.
pub fn main() -> i32 {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if args
        .first()
        .is_some_and(|a| a == pier_engine::spec::INIT_PATH)
    {
        let args: Vec<String> = args
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        return pier_engine::init::main(&args);
    }
    let text: Vec<String> = args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let config_json_here = Path::new("config.json").exists();
    match engine::dialect::dialect(&text, config_json_here) {
        engine::dialect::Dialect::Engine => engine::main(args),
        engine::dialect::Dialect::Runc => runc_main(args),
    }
}

/// Parses runc's command line and runs the verb; returns the process exit code.
fn runc_main(args: Vec<std::ffi::OsString>) -> i32 {
    let matches = command().get_matches_from(args);
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    if let Err(e) = logging::init(
        cli.global.log.as_deref(),
        cli.global.log_format,
        cli.global.debug,
    ) {
        eprintln!(
            "pier: cannot open log file {}: {e}",
            cli.global.log.as_deref().unwrap_or(Path::new("")).display()
        );
        return 1;
    }
    // A bug must still reach the caller the way errors do (containerd shows the log's last
    // error line), not only as a Rust panic message on stderr.
    // A reader that went away (`pier ps | head -1`) is not a bug: stop quietly with the status a
    // SIGPIPE death gives, as shell tools do (pier keeps SIGPIPE ignored: its monitor, proxy and
    // status pipes must see EPIPE as an error, not die of it).
    std::panic::set_hook(Box::new(|info| {
        if is_stdout_gone(&info.to_string()) {
            std::process::exit(141);
        }
        logging::report_error(&format!("internal error, please report: {info}"));
    }));
    log::debug!("{:?}", std::env::args().collect::<Vec<_>>());
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            logging::report_error(&format!("{e:#}"));
            1
        }
    }
}

/// Whether a panic message is std's print macros failing on a closed stdout.
fn is_stdout_gone(message: &str) -> bool {
    message.contains("failed printing to stdout") && message.contains("Broken pipe")
}

/// The clap command tree with its version text.
fn command() -> clap::Command {
    Cli::command().version(version())
}

fn dispatch(cli: Cli) -> anyhow::Result<i32> {
    let global = cli.global;
    let rt = global.runtime();
    match cli.command {
        Command::Create(args) => create::run(args, &rt),
        Command::Start(args) => start::run(args, &rt),
        Command::Run(args) => run::run(args, &rt),
        Command::State(args) => state::run(args, &rt),
        Command::Kill(args) => kill::run(args, &rt),
        Command::Delete(args) => delete::run(args, &rt),
        Command::Exec(args) => exec::run(args, &rt),
        Command::Ps(args) => ps::run(args, &rt),
        Command::List(args) => list::run(args, &rt),
        Command::Spec(args) => spec::run(args),
        Command::Features(args) => features::run(args),
        Command::Pause(args) => pause::run(args, &rt),
        Command::Resume(args) => resume::run(args, &rt),
        Command::Update(args) => update::run(args, &rt),
        Command::Bench(args) => bench::run(args),
        Command::Proxy(args) => proxy::run(args),
    }
}

/// `path` made absolute against the current directory (not canonicalized: the runtime reports
/// a missing file under the name the user gave, made absolute).
pub fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Reads a JSON file, naming the file in every error.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {} as JSON", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<Cli, clap::Error> {
        let argv = std::iter::once("pier").chain(args);
        Cli::from_arg_matches(&command().try_get_matches_from(argv)?)
    }

    #[test]
    fn clap_tree_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn systemd_cgroup_flag_selects_systemd() {
        let cli = parse(["--systemd-cgroup", "state", "x"]).unwrap();
        assert_eq!(cli.global.runtime().cgroup_manager, ManagerKind::Systemd);
        let cli = parse(["state", "x"]).unwrap();
        assert_eq!(cli.global.runtime().cgroup_manager, ManagerKind::Cgroupfs);
        let cli = parse(["--cgroup-manager", "disabled", "state", "x"]).unwrap();
        assert_eq!(cli.global.runtime().cgroup_manager, ManagerKind::Disabled);
    }

    #[test]
    fn containerd_shim_command_lines_parse() {
        let lines: &[&[&str]] = &[
            &[
                "--root",
                "/run/containerd/runc/default",
                "--log",
                "/tmp/log.json",
                "--log-format",
                "json",
                "create",
                "--bundle",
                ".",
                "--pid-file",
                "/tmp/init.pid",
                "--console-socket",
                "/tmp/pty.sock",
                "c1",
            ],
            &[
                "--root",
                "/r",
                "--log",
                "l.json",
                "--log-format",
                "json",
                "--systemd-cgroup",
                "--rootless=false",
                "--criu",
                "criu",
                "start",
                "c1",
            ],
            &["--root", "/r", "delete", "--force", "c1"],
            &["--root", "/r", "kill", "--all", "c1", "9"],
            &["--root", "/r", "ps", "--format", "json", "c1"],
            &[
                "--root",
                "/r",
                "exec",
                "--process",
                "/tmp/p.json",
                "--detach",
                "--pid-file",
                "/tmp/e.pid",
                "c1",
            ],
            &["--root", "/r", "update", "--resources", "-", "c1"],
            &[
                "--log-format=json",
                "--log=/x/log",
                "create",
                "--bundle",
                "/b",
                "--pid-file",
                "/p",
                "--no-pivot",
                "--no-new-keyring",
                "--preserve-fds",
                "2",
                "c1",
            ],
            &[
                "exec",
                "--pid-file",
                "/p",
                "--process",
                "/s.json",
                "--detach",
                "--console-socket",
                "/c.sock",
                "c1",
            ],
            &["features"],
            &["ps", "--format", "table", "c1", "-ef"],
            &["ps", "c1", "--", "-o", "pid,comm"],
            &["create", "--bundle", "/b", "--detach", "c1"],
            &["--debug", "run", "-d", "-b", "/b", "c1"],
            &[
                "exec",
                "-t",
                "-e",
                "A=1",
                "-e",
                "B=2",
                "-u",
                "1:2",
                "--cwd",
                "/",
                "c1",
                "sh",
                "-c",
                "echo -n hi",
            ],
        ];
        for line in lines {
            if let Err(e) = parse(line.iter().copied()) {
                panic!("{line:?} does not parse: {e}");
            }
        }
    }

    #[test]
    fn unknown_subcommand_is_an_error() {
        assert!(parse(["frobnicate"]).is_err());
    }
}
