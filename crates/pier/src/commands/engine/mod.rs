//! The engine's command line: Docker-style verbs over pier-engine (`pier run -d --name web -p
//! 8080:80 host CMD`, `pier ps`, `pier network create` …).
//!
//! Theory of operation: [`dialect::dialect`] first decides whether an invocation speaks runc's
//! command line or this one (run, ps, exec and kill exist in both). This module's clap tree has
//! one global flag, `--state-dir` (env `PIER_STATE_DIR`, default `/var/lib/pier`), and one module
//! per verb that turns its flags into pier-engine's types and calls one `Engine` method. Exit
//! codes follow Docker: 125 when pier itself fails (also for a command line clap refuses), the
//! container's or process's own code otherwise (`run` in the foreground, `exec`).
//!
//! Tests: unit tests beside each verb and in `dialect.rs`; black-box tests of the binary in
//! `crates/pier/tests/engine_*.rs`.
pub mod dialect;
mod exec;
mod gc;
mod inspect;
mod kill;
mod logs;
mod network;
mod port;
mod ps;
mod rm;
mod run;
mod stop;
mod wait;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use pier_engine::engine::Engine;
use pier_engine::Paths;
use std::path::PathBuf;

/// Docker's exit code for a failure of the engine itself (not of the container's program).
pub const ENGINE_FAILED: i32 = 125;

const AFTER_HELP: &str = "\
Examples (as root; `host` is a built-in root made of the host's own system directories):
  pier run --rm host echo hello
  pier run -d --name web -p 8080:80 host busybox httpd -f -p 80
  pier ps; pier logs -f web; pier exec -it web sh; pier stop web; pier rm web
  pier network create --subnet 198.18.5.0/24 backend
  pier run -d --network backend --ip 198.18.5.10 --name db ./rootfs /bin/db

pier is also an OCI runtime with runc's command line (create, start, state, delete, kill, exec,
ps, run, list, pause, resume, update, spec, features; see `pier create --help`), which Docker,
containerd and Podman call as they call runc. run, ps, exec and kill exist in both; an invocation
is runc's when a runc global flag (--root, --log, --log-format, --debug, --systemd-cgroup,
--cgroup-manager) precedes the verb, or when its arguments have runc's shape: a flag only runc's
verb has (run -b/--bundle, --pid-file, --console-socket, --no-pivot; exec --process/-p, --cwd,
--preserve-fds; kill --all), `kill ID SIGNAL`, `ps ID`, or `run ID` where ./config.json exists.
Everything else is the engine's.";

/// pier's container engine: Docker's everyday verbs without a daemon.
#[derive(Parser, Debug)]
#[command(
    name = "pier",
    disable_version_flag = true,
    about = "Containers without a daemon: Docker's verbs, real networking, millisecond starts",
    after_help = AFTER_HELP
)]
pub struct EngineCli {
    /// State directory: containers, networks, address leases, logs
    #[arg(long, global = true, env = "PIER_STATE_DIR", default_value = Paths::DEFAULT, value_name = "DIR")]
    state_dir: PathBuf,
    #[command(subcommand)]
    command: Verb,
}

#[derive(Subcommand, Debug)]
enum Verb {
    Run(run::Args),
    Ps(ps::Args),
    Logs(logs::Args),
    Stop(stop::Args),
    Kill(kill::Args),
    Rm(rm::Args),
    Exec(exec::Args),
    Inspect(inspect::Args),
    Wait(wait::Args),
    Port(port::Args),
    Network(network::Args),
    Gc(gc::Args),
}

/// Parses an engine command line and runs it; returns the exit code.
pub fn main(args: Vec<std::ffi::OsString>) -> i32 {
    let matches = match EngineCli::command().try_get_matches_from(args) {
        Ok(matches) => matches,
        Err(e) => return clap_exit(e),
    };
    let cli = match EngineCli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    if let Err(e) = crate::logging::init(None, crate::logging::LogFormat::Text, false) {
        eprintln!("pier: cannot set up logging: {e}");
        return ENGINE_FAILED;
    }
    match dispatch(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("pier: {e:#}");
            ENGINE_FAILED
        }
    }
}

/// Prints clap's message; help and version exit 0, a refused command line 125 (Docker's code).
fn clap_exit(e: clap::Error) -> i32 {
    let _ = e.print();
    if e.use_stderr() {
        ENGINE_FAILED
    } else {
        0
    }
}

fn dispatch(cli: EngineCli) -> anyhow::Result<i32> {
    let paths = Paths {
        state_dir: crate::commands::absolute(&cli.state_dir),
    };
    match cli.command {
        Verb::Run(args) => run::run(args, paths),
        Verb::Ps(args) => ps::run(args, &open(paths)?),
        Verb::Logs(args) => logs::run(args, &open(paths)?),
        Verb::Stop(args) => stop::run(args, &open(paths)?),
        Verb::Kill(args) => kill::run(args, &open(paths)?),
        Verb::Rm(args) => rm::run(args, &open(paths)?),
        Verb::Exec(args) => exec::run(args, &open(paths)?),
        Verb::Inspect(args) => inspect::run(args, &open(paths)?),
        Verb::Wait(args) => wait::run(args, &open(paths)?),
        Verb::Port(args) => port::run(args, &open(paths)?),
        Verb::Network(args) => network::run(args, &open(paths)?),
        Verb::Gc(args) => gc::run(args, &open(paths)?),
    }
}

/// Opens the engine over the state directory (which also cleans up after crashed commands).
fn open(paths: Paths) -> anyhow::Result<Engine> {
    let dir = paths.state_dir.clone();
    Engine::open(paths).map_err(|e| anyhow::anyhow!("state directory {}: {e}", dir.display()))
}

/// Runs `each` for every container named, printing a failure as `pier: <message>` and going on
/// (as Docker's stop, kill, rm do); 125 when any failed.
fn for_each(containers: &[String], mut each: impl FnMut(&str) -> anyhow::Result<()>) -> i32 {
    let mut code = 0;
    for container in containers {
        if let Err(e) = each(container) {
            eprintln!("pier: {e:#}");
            code = ENGINE_FAILED;
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn parse(line: &str) -> Result<EngineCli, clap::Error> {
        let argv = std::iter::once("pier").chain(line.split_whitespace());
        EngineCli::from_arg_matches(&EngineCli::command().try_get_matches_from(argv)?)
    }

    #[test]
    fn clap_tree_is_consistent() {
        EngineCli::command().debug_assert();
    }

    #[test]
    fn state_dir_is_global() {
        let cli = parse("ps --state-dir /tmp/s").unwrap();
        assert_eq!(cli.state_dir, PathBuf::from("/tmp/s"));
    }

    #[test]
    fn bad_command_lines_exit_125() {
        let err = parse("run --no-such-flag host true").unwrap_err();
        assert_eq!(clap_exit(err), ENGINE_FAILED);
        let help = parse("run --help").unwrap_err();
        assert_eq!(clap_exit(help), 0);
    }
}
