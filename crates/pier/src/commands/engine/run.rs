//! `pier run`: start a container from a root filesystem (`host` or a directory), Docker's flags.
//!
//! The flags are collected as typed into pier-engine's `RunArgs`; `RunConfig::parse` checks them
//! all (naming the flag and value it refuses) before the engine creates anything. In the
//! foreground pier exits with the container's exit code; with `-d` it prints the container's id.
use anyhow::bail;
use pier_engine::config::{RunArgs, RunConfig};
use pier_engine::engine::RunOutcome;
use pier_engine::Paths;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
ROOTFS is `host` (the host's own system directories, read-only, with a private /tmp, /run and
/var/tmp and generated /etc/hosts, /etc/hostname, /etc/resolv.conf) or a directory, used
read-only under an overlay so the container never changes it.

Example:
  pier run --rm host echo hello
  pier run -d --name web -p 8080:80 host busybox httpd -f -p 80
  pier run --rm -it -v /srv/data:/data:ro --network none host sh
  pier run --rm --memory 256m --cpus 0.5 --pids-limit 100 ./rootfs /bin/app
  pier run -d --network backend --ip 198.18.5.10 --name db host sleep infinity";

/// Flags of `run` (Docker's names and spellings).
#[derive(clap::Args, Debug)]
#[command(
    about = "Run a command in a new container",
    after_help = AFTER_HELP,
    disable_help_flag = true
)]
pub struct Args {
    /// Run in the background and print the container id
    #[arg(short = 'd', long)]
    detach: bool,
    /// Remove the container when it exits
    #[arg(long)]
    rm: bool,
    /// Name the container (unique)
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Publish a container port: [IP:][HOST_PORT:]CONTAINER_PORT[/PROTO] (repeatable)
    #[arg(short = 'p', long, value_name = "MAPPING")]
    publish: Vec<String>,
    /// Publish every exposed port: not supported yet (later); publish each port with -p
    #[arg(short = 'P', long)]
    publish_all: bool,
    /// How ports are published. auto (default): eBPF socket redirection for local clients,
    /// nftables DNAT for remote ones with tc programs in front (no conntrack; PIER_REMOTE_TC=0:
    /// nftables alone);
    /// ebpf: clients on this host only; nat: nftables DNAT for everyone; proxy: a `pier proxy`
    /// per port
    #[arg(long, value_name = "MODE", value_parser = ["auto", "ebpf", "nat", "proxy"])]
    publish_mode: Option<String>,
    /// Network: bridge (default), host, none, container:NAME, or a network's name
    #[arg(long, visible_alias = "net", value_name = "NETWORK")]
    network: Option<String>,
    /// Static IPv4 address on the network
    #[arg(long, value_name = "ADDRESS")]
    ip: Option<String>,
    /// Static IPv6 address on the network
    #[arg(long, value_name = "ADDRESS")]
    ip6: Option<String>,
    /// Container host name
    #[arg(short = 'h', long, value_name = "NAME")]
    hostname: Option<String>,
    /// Set an environment variable: KEY=VALUE, or KEY to copy the caller's (repeatable)
    #[arg(short = 'e', long, value_name = "KEY=VALUE")]
    env: Vec<String>,
    /// Read environment variables from a file of KEY=VALUE lines (repeatable)
    #[arg(long, value_name = "FILE")]
    env_file: Vec<PathBuf>,
    /// Working directory inside the container
    #[arg(short = 'w', long, value_name = "DIR")]
    workdir: Option<String>,
    /// User: NAME|UID[:GROUP|GID]
    #[arg(short = 'u', long, value_name = "USER")]
    user: Option<String>,
    /// Override the program run before the command
    #[arg(long, value_name = "PROGRAM")]
    entrypoint: Option<String>,
    /// Bind mount a host path: SRC:DST[:ro] (repeatable)
    #[arg(short = 'v', long = "volume", value_name = "SRC:DST[:ro]")]
    volumes: Vec<String>,
    /// Mount a tmpfs: DST[:OPTIONS] (repeatable)
    #[arg(long, value_name = "DST[:OPTIONS]")]
    tmpfs: Vec<String>,
    /// Mount the root filesystem read-only (no overlay upper layer)
    #[arg(long)]
    read_only: bool,
    /// CPU quota in CPUs (0.5 = half of one)
    #[arg(long, value_name = "CPUS")]
    cpus: Option<String>,
    /// Memory limit: bytes or with b, k, m, g
    #[arg(short = 'm', long, value_name = "SIZE")]
    memory: Option<String>,
    /// Process limit (-1 for none)
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pids_limit: Option<i64>,
    /// Add a capability: NET_ADMIN, CAP_SYS_TIME, ALL (repeatable)
    #[arg(long, value_name = "CAP")]
    cap_add: Vec<String>,
    /// Drop a capability (repeatable)
    #[arg(long, value_name = "CAP")]
    cap_drop: Vec<String>,
    /// seccomp=FILE|unconfined, no-new-privileges (repeatable)
    #[arg(long, value_name = "OPTION")]
    security_opt: Vec<String>,
    /// Resource limit: NAME=SOFT[:HARD], e.g. nofile=1024:1024 (repeatable)
    #[arg(long, value_name = "NAME=SOFT[:HARD]")]
    ulimit: Vec<String>,
    /// Run a small init as PID 1 that forwards signals and reaps zombies
    #[arg(long)]
    init: bool,
    /// Give the container a terminal
    #[arg(short = 't', long)]
    tty: bool,
    /// Keep stdin open and pass it to the container
    #[arg(short = 'i', long)]
    interactive: bool,
    /// Print help (-h is --hostname, as in Docker)
    #[arg(long, action = clap::ArgAction::Help)]
    help: Option<bool>,
    /// `host` or a root filesystem directory
    #[arg(value_name = "ROOTFS")]
    rootfs: String,
    /// The command and its arguments
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "COMMAND"
    )]
    command: Vec<String>,
}

pub fn run(args: Args, paths: Paths) -> anyhow::Result<i32> {
    if args.publish_all {
        bail!("-P/--publish-all is not supported yet (later): publish each port with -p");
    }
    // Every flag is checked before the state directory is even opened.
    let config = RunConfig::parse(&args.into_run_args())?;
    let engine = super::open(paths)?;
    match engine.run(config)? {
        RunOutcome::Detached { id } => {
            println!("{id}");
            Ok(0)
        }
        RunOutcome::Exited { code } => Ok(code),
    }
}

impl Args {
    fn into_run_args(self) -> RunArgs {
        RunArgs {
            detach: self.detach,
            rm: self.rm,
            name: self.name,
            publish: self.publish,
            publish_mode: self.publish_mode,
            network: self.network,
            ip: self.ip,
            ip6: self.ip6,
            hostname: self.hostname,
            env: self.env,
            env_file: self.env_file,
            workdir: self.workdir,
            user: self.user,
            entrypoint: self.entrypoint,
            volumes: self.volumes,
            tmpfs: self.tmpfs,
            read_only: self.read_only,
            cpus: self.cpus,
            memory: self.memory,
            pids_limit: self.pids_limit,
            cap_add: self.cap_add,
            cap_drop: self.cap_drop,
            security_opt: self.security_opt,
            ulimit: self.ulimit,
            init: self.init,
            tty: self.tty,
            interactive: self.interactive,
            rootfs: self.rootfs,
            command: self.command,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::commands::engine::tests::parse;
    use crate::commands::engine::Verb;

    fn run_args(line: &str) -> pier_engine::config::RunArgs {
        match parse(line).unwrap().command {
            Verb::Run(args) => (*args).into_run_args(),
            other => panic!("{line}: parsed as {other:?}"),
        }
    }

    #[test]
    fn docker_spellings_fill_run_args() {
        let a = run_args(
            "run -d --rm --name web -p 8080:80 -p 53:53/udp --publish-mode nat --net bridge \
             --ip 198.18.0.9 -h box -e A=1 --env B=2 --env-file /e -w /tmp -u 1:2 \
             --entrypoint /bin/sh -v /a:/b:ro --volume /c:/d --tmpfs /run:size=1m --read-only \
             --cpus 0.5 -m 64m --pids-limit -1 --cap-add NET_ADMIN --cap-drop ALL \
             --security-opt seccomp=unconfined --security-opt no-new-privileges \
             --ulimit nofile=512:512 --init -t -i host sh -c exit",
        );
        assert!(a.detach && a.rm && a.read_only && a.init && a.tty && a.interactive);
        assert_eq!(a.name.as_deref(), Some("web"));
        assert_eq!(a.publish, ["8080:80", "53:53/udp"]);
        assert_eq!(a.publish_mode.as_deref(), Some("nat"));
        assert_eq!(a.network.as_deref(), Some("bridge"));
        assert_eq!(a.hostname.as_deref(), Some("box"));
        assert_eq!(a.env, ["A=1", "B=2"]);
        assert_eq!(a.volumes, ["/a:/b:ro", "/c:/d"]);
        assert_eq!(a.memory.as_deref(), Some("64m"));
        assert_eq!(a.pids_limit, Some(-1));
        assert_eq!(a.security_opt.len(), 2);
        assert_eq!(a.rootfs, "host");
        assert_eq!(a.command, ["sh", "-c", "exit"]);
    }

    #[test]
    fn flags_after_the_rootfs_belong_to_the_command() {
        let a = run_args("run --rm host ls -l --name x");
        assert_eq!(a.name, None);
        assert_eq!(a.command, ["ls", "-l", "--name", "x"]);
    }

    #[test]
    fn unknown_publish_mode_is_refused() {
        assert!(parse("run --publish-mode magic host true").is_err());
    }
}
