//! Which command line an invocation speaks: runc's (pier as an OCI runtime) or the engine's
//! (Docker-style `pier run -d --name web host CMD`).
//!
//! Theory of operation: Docker (through containerd's shim), containerd and Podman (through
//! conmon) call pier exactly as they call runc, and four of runc's verbs — run, ps, exec, kill —
//! are also engine verbs with other meanings. [`dialect`] decides from the argument list alone
//! (plus whether `./config.json` exists, runc's default bundle), before either clap tree parses:
//!
//! 1. a runc global flag before the verb (`--root`, `--log`, `--log-format`, `--debug`,
//!    `--systemd-cgroup`, `--cgroup-manager`, `--criu`, `--rootless`, `--version`): runc.
//!    containerd's shim and dockerd always pass some.
//! 2. a verb only one tree has: that tree (create, start, delete, state, list, … are runc's;
//!    logs, stop, rm, inspect, wait, port, network, gc are the engine's; an unknown verb goes
//!    to the engine, whose error lists the verbs).
//! 3. run, ps, exec, kill: runc when the arguments have runc's shape, else the engine:
//!    - a flag that only runc's form of the verb has, read off the two clap trees (`run -b`,
//!      `--pid-file`, `--console-socket`, `--no-pivot`; `exec --process/-p`, `--cwd`,
//!      `--preserve-fds`; `kill --all`), which is how Podman calls create-less verbs;
//!    - `kill ID SIGNAL`: a second operand that parses as a signal (Podman: `kill ID 9`);
//!    - `ps ID`: any operand (engine `ps` takes none);
//!    - `run ID`: exactly one operand while `./config.json` exists (runc's default bundle).
//!
//! The rule is printed in `pier --help`. Tests: unit tests below, one per client shape.
use clap::{Arg, CommandFactory};

use crate::commands::{kill::parse_signal, Cli};

use super::EngineCli;

/// The command line an invocation speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Runc,
    Engine,
}

/// runc's global flags that take a value (the others are switches).
const RUNC_GLOBAL_VALUES: &[&str] = &[
    "--root",
    "--log",
    "--log-format",
    "--cgroup-manager",
    "--criu",
    "--rootless",
];
const RUNC_GLOBAL_SWITCHES: &[&str] = &["--debug", "--systemd-cgroup", "--version", "-v"];
/// The engine's global flags (all take a value).
const ENGINE_GLOBAL_VALUES: &[&str] = &["--state-dir"];
/// runc verbs pier does not implement: runc's tree reports them as such.
const RUNC_VERBS_NOT_IN_PIER: &[&str] = &["events", "checkpoint", "restore", "exec-fifo"];

/// Decides the dialect of `args` (the arguments after the program name).
pub fn dialect(args: &[String], config_json_here: bool) -> Dialect {
    let (verb_at, runc_global) = find_verb(args);
    if runc_global {
        return Dialect::Runc;
    }
    let Some(verb_at) = verb_at else {
        return Dialect::Engine;
    };
    let verb = args[verb_at].as_str();
    let rest = &args[verb_at + 1..];
    if verb == "help" {
        return rest
            .first()
            .map_or(Dialect::Engine, |v| verb_dialect(v, &[], false));
    }
    verb_dialect(verb, rest, config_json_here)
}

/// The index of the verb (if any) and whether a runc global flag precedes it.
fn find_verb(args: &[String]) -> (Option<usize>, bool) {
    let mut runc_global = false;
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].as_str();
        let name = arg.split_once('=').map_or(arg, |(name, _)| name);
        if RUNC_GLOBAL_VALUES.contains(&name) || RUNC_GLOBAL_SWITCHES.contains(&name) {
            runc_global = true;
        }
        if !arg.starts_with('-') {
            return (Some(i), runc_global);
        }
        let takes_value = RUNC_GLOBAL_VALUES.contains(&arg) || ENGINE_GLOBAL_VALUES.contains(&arg);
        i += if takes_value { 2 } else { 1 };
    }
    (None, runc_global)
}

fn verb_dialect(verb: &str, rest: &[String], config_json_here: bool) -> Dialect {
    if RUNC_VERBS_NOT_IN_PIER.contains(&verb) {
        return Dialect::Runc;
    }
    let runc = Cli::command();
    let engine = EngineCli::command();
    let (runc_verb, engine_verb) = (runc.find_subcommand(verb), engine.find_subcommand(verb));
    let (Some(runc_verb), Some(engine_verb)) = (runc_verb, engine_verb) else {
        return if runc_verb.is_some() {
            Dialect::Runc
        } else {
            Dialect::Engine
        };
    };
    let shape = Shape::read(rest, runc_verb, engine_verb);
    let runc_shape = shape.runc_only_flag
        || match verb {
            "kill" => shape
                .operands
                .get(1)
                .is_some_and(|s| parse_signal(s).is_ok()),
            "ps" => !shape.operands.is_empty(),
            "run" => shape.operands.len() == 1 && shape.command_args == 0 && config_json_here,
            _ => false,
        };
    if runc_shape {
        Dialect::Runc
    } else {
        Dialect::Engine
    }
}

/// What the arguments after a shared verb look like: the operands before the command (run and
/// exec stop at the first one: the rest is the container's command line, `command_args` long)
/// and whether a flag only runc's form of the verb has appears.
#[derive(Debug, Default)]
struct Shape {
    operands: Vec<String>,
    command_args: usize,
    runc_only_flag: bool,
}

impl Shape {
    fn read(rest: &[String], runc: &clap::Command, engine: &clap::Command) -> Shape {
        let flags = |cmd: &clap::Command| -> Vec<Arg> {
            cmd.get_arguments()
                .filter(|a| !a.is_positional())
                .cloned()
                .collect()
        };
        let (runc_flags, engine_flags) = (flags(runc), flags(engine));
        let all: Vec<Arg> = runc_flags.iter().chain(&engine_flags).cloned().collect();
        let stops_at_command = matches!(runc.get_name(), "run" | "exec");
        let mut shape = Shape::default();
        let mut i = 0;
        while i < rest.len() {
            let arg = rest[i].as_str();
            i += 1;
            if arg == "--" {
                shape.operands.extend(rest[i..].iter().take(1).cloned());
                break;
            }
            let Some(flag) = arg.strip_prefix('-').filter(|f| !f.is_empty()) else {
                shape.operands.push(arg.to_string());
                if stops_at_command {
                    shape.command_args = rest.len() - i;
                    break;
                }
                continue;
            };
            let names = flag_names(flag, &all);
            for (name, needs_next) in names {
                let runc_has = find(&runc_flags, &name).is_some();
                let engine_has = find(&engine_flags, &name).is_some();
                shape.runc_only_flag |= runc_has && !engine_has;
                if needs_next {
                    i += 1;
                }
            }
        }
        shape
    }
}

/// A flag named `--long` or `-s` (as `"long"` or `"s"`).
fn find<'a>(flags: &'a [Arg], name: &str) -> Option<&'a Arg> {
    flags.iter().find(|a| {
        let mut shorts = a
            .get_short_and_visible_aliases()
            .unwrap_or_default()
            .into_iter();
        let mut longs = a
            .get_long_and_visible_aliases()
            .unwrap_or_default()
            .into_iter();
        match name.len() {
            1 => shorts.any(|s| name.starts_with(s)),
            0 => false,
            _ => longs.any(|l| l == name),
        }
    })
}

/// The flags one argument names (without its leading dash), each with whether it takes its value
/// from the next argument: `-dit` is three switches, `-p8080:80` one flag with its value,
/// `--name=web` one flag, `--name web` one flag that consumes the next argument.
fn flag_names(flag: &str, all: &[Arg]) -> Vec<(String, bool)> {
    let takes_value = |name: &str| find(all, name).is_some_and(|a| a.get_action().takes_values());
    if let Some(long) = flag.strip_prefix('-') {
        return match long.split_once('=') {
            Some((name, _)) => vec![(name.to_string(), false)],
            None => vec![(long.to_string(), takes_value(long))],
        };
    }
    let mut names = Vec::new();
    for (at, c) in flag.char_indices() {
        let name = c.to_string();
        if takes_value(&name) {
            let inline = at + c.len_utf8() < flag.len();
            names.push((name, !inline));
            break;
        }
        names.push((name, false));
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(line: &str) -> Dialect {
        of_in(line, false)
    }

    fn of_in(line: &str, config_json_here: bool) -> Dialect {
        let args: Vec<String> = line.split_whitespace().map(String::from).collect();
        dialect(&args, config_json_here)
    }

    #[test]
    fn containerd_shim_and_dockerd_pass_global_flags_first() {
        let root = "--root /run/containerd/runc/moby --log /x/log.json --log-format json";
        for verb in [
            "create --bundle /b --pid-file /p --console-socket /c c1",
            "start c1",
            "kill c1 9",
            "kill --all c1 9",
            "delete --force c1",
            "exec --process /p.json --detach --pid-file /e.pid c1",
            "state c1",
            "ps --format json c1",
            "run -d -b /b c1",
            "update --resources - c1",
        ] {
            assert_eq!(of(&format!("{root} {verb}")), Dialect::Runc, "{verb}");
        }
        assert_eq!(of("--log-format=json --log=/x run c1"), Dialect::Runc);
        assert_eq!(of("--systemd-cgroup ps c1"), Dialect::Runc);
        assert_eq!(of("--debug run -d -b /b c1"), Dialect::Runc);
        assert_eq!(of("--version"), Dialect::Runc);
    }

    #[test]
    fn podman_passes_no_global_flags() {
        for line in [
            "create --bundle /b --pid-file /p c1",
            "start c1",
            "kill c1 9",
            "kill c1 KILL",
            "kill c1 SIGTERM",
            "exec --pid-file /p --process /s.json c1",
            "exec --process=/s.json c1",
            "exec -p /s.json c1",
            "exec --preserve-fds 1 --process /s.json c1",
            "exec --console-socket /c.sock --process /s.json -t c1",
            "delete --force c1",
            "state c1",
            "features",
            "spec --rootless",
            "list",
            "pause c1",
            "resume c1",
            "update --memory 10m c1",
            "events c1",
            "checkpoint c1",
        ] {
            assert_eq!(of(line), Dialect::Runc, "{line}");
        }
    }

    #[test]
    fn runc_shapes_of_the_shared_verbs() {
        assert_eq!(of("run -b /b c1"), Dialect::Runc);
        assert_eq!(of("run --bundle=/b c1"), Dialect::Runc);
        assert_eq!(of("run -d --pid-file /p c1"), Dialect::Runc);
        assert_eq!(of("run --console-socket /c c1"), Dialect::Runc);
        assert_eq!(of("run --no-pivot c1"), Dialect::Runc);
        assert_eq!(of_in("run c1", true), Dialect::Runc);
        assert_eq!(of_in("run -d c1", true), Dialect::Runc);
        assert_eq!(of("ps c1"), Dialect::Runc);
        assert_eq!(of("ps --format json c1"), Dialect::Runc);
        assert_eq!(of("ps -f table c1 -ef"), Dialect::Runc);
        assert_eq!(of("ps c1 -- -o pid"), Dialect::Runc);
        assert_eq!(of("exec --cwd / c1 sh"), Dialect::Runc);
        assert_eq!(of("kill --all c1"), Dialect::Runc);
        assert_eq!(of("kill c1 RTMIN+3"), Dialect::Runc);
    }

    #[test]
    fn engine_shapes() {
        for line in [
            "",
            "--state-dir /tmp/s ps",
            "run -d --name web -p 8080:80 host nginx",
            "run -d -p8080:80 --rm host sleep 9",
            "run -dit host sh",
            "run --rm host true",
            "run --rm -v /a:/b:ro -e A=1 -w /tmp -u 1:2 --network none host ls -p",
            "run host sh -c exit",
            "run --name=web host exec --process x",
            "ps",
            "ps -a",
            "ps -a --format json",
            "ps -q",
            "exec web sh",
            "exec -it web sh",
            "exec -e A=1 -u 0 -w / web ls -p /tmp",
            "exec -d web sleep 1",
            "kill web",
            "kill -s HUP web",
            "kill --signal=USR1 web other",
            "kill web other",
            "logs -f --tail 10 web",
            "stop -t 1 web",
            "rm -f web",
            "inspect web",
            "wait web",
            "port web",
            "network create --subnet 198.18.0.0/24 n1",
            "network ls",
            "gc",
            "crash-points",
            "help",
            "help run",
            "frobnicate",
        ] {
            assert_eq!(of(line), Dialect::Engine, "{line}");
        }
        // With ./config.json present, a full engine command line is still the engine's.
        assert_eq!(of_in("run --rm host true", true), Dialect::Engine);
        assert_eq!(of_in("run host", false), Dialect::Engine);
    }

    #[test]
    fn run_ps_exec_kill_are_the_only_shared_verbs() {
        let (runc, engine) = (Cli::command(), EngineCli::command());
        let shared: Vec<&str> = engine
            .get_subcommands()
            .map(|c| c.get_name())
            .filter(|name| runc.find_subcommand(name).is_some())
            .collect();
        assert_eq!(shared, ["run", "ps", "kill", "exec"]);
    }

    #[test]
    fn help_follows_the_verb() {
        assert_eq!(of("help create"), Dialect::Runc);
        assert_eq!(of("create --help"), Dialect::Runc);
        assert_eq!(of("run --help"), Dialect::Engine);
    }
}
