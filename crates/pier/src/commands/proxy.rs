//! `pier proxy`: docker-proxy's command line over pier's userspace forwarder.
//!
//! Theory of operation: dockerd runs its `userland-proxy-path` with Go-style flags
//! (`-proto tcp -host-ip 0.0.0.0 -host-port 8080 -container-ip 172.17.0.2 -container-port 80`,
//! and `-use-listen-fd`), so the flags are parsed here by hand with Go's `flag` rules: one or two
//! dashes, the value after `=` or as the next argument, booleans with an optional `=true|false`.
//! The forwarder binds first and the outcome goes to dockerd's status pipe (fd 3): "0\n", or
//! "1\n" and the error; a bad command line is reported there too. Then it forwards until killed.
//! dockerd runs the path without a verb, so daemon.json points at a two-line script
//! (`exec pier proxy "$@"`).
//!
//! Tests: unit tests below; black-box in `crates/pier/tests/proxy_*.rs`.
use anyhow::bail;
use pier_publish::proxy::{docker, Config, Proxy};
use pier_publish::Protocol;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// `pier proxy --help` (also `-h`, `-help`, as Go's flag package takes them).
const HELP: &str = "Forward one host address and port to a container address and port, taking \
docker-proxy's flags so that Docker's \"userland-proxy-path\" can point at it (through a \
script running `exec pier proxy \"$@\"`).\n\n\
Flags: -proto tcp|udp|sctp, -host-ip IP, -host-port N (0 picks one), -container-ip IP, \
-container-port N, -use-listen-fd (the listener is fd 4), and pier's own \
-udp-idle-timeout SECONDS (default 90) and -threads N (default: one per core).\n\n\
Example:\n  pier proxy -proto tcp -host-ip 127.0.0.1 -host-port 8080 -container-ip 172.17.0.2 \
-container-port 80";

/// Flags of `proxy` (docker-proxy's, parsed by hand: they have one dash).
#[derive(clap::Args, Debug)]
#[command(
    disable_help_flag = true,
    about = "Forward a published port to a container (a drop-in for docker-proxy)",
    long_about = HELP
)]
pub struct Args {
    /// docker-proxy's flags
    #[arg(
        allow_hyphen_values = true,
        trailing_var_arg = true,
        num_args = 0..,
        value_name = "FLAGS"
    )]
    flags: Vec<String>,
}

/// The parsed command line.
#[derive(Debug, PartialEq)]
struct Flags {
    proto: Protocol,
    host_ip: IpAddr,
    host_port: Option<u16>,
    container_ip: IpAddr,
    container_port: Option<u16>,
    use_listen_fd: bool,
    udp_idle: Duration,
    threads: usize,
    version: bool,
    help: bool,
}

impl Default for Flags {
    fn default() -> Self {
        Flags {
            proto: Protocol::Tcp,
            host_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            host_port: None,
            container_ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            container_port: None,
            use_listen_fd: false,
            udp_idle: Duration::from_secs(90),
            threads: 0,
            version: false,
            help: false,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let status = docker::take_status_pipe();
    if matches!(parse(&args.flags), Ok(Flags { help: true, .. })) {
        println!("Usage: pier proxy [FLAGS]\n\n{HELP}");
        return Ok(0);
    }
    let config = match parse(&args.flags).and_then(config) {
        Ok(Some(config)) => config,
        Ok(None) => {
            println!("pier proxy version {}", env!("CARGO_PKG_VERSION"));
            return Ok(0);
        }
        Err(e) => {
            docker::report(status, Err(&e));
            return Err(e);
        }
    };
    let proxy = match Proxy::bind(config) {
        Ok(proxy) => proxy,
        Err(e) => {
            docker::report(status, Err(&e));
            return Err(e.into());
        }
    };
    docker::report(status, Ok(()));
    proxy.run()?;
    Ok(0)
}

/// The forwarder's configuration; `None` when only the version was asked for.
fn config(flags: Flags) -> anyhow::Result<Option<Config>> {
    if flags.version {
        return Ok(None);
    }
    let Some(container_port) = flags.container_port.filter(|&p| p != 0) else {
        bail!("flag -container-port is required (1..65535)");
    };
    let listen_fd = match flags.use_listen_fd {
        true => Some(docker::take_listen_fd()?),
        false => None,
    };
    let Some(host_port) = flags.host_port.or(listen_fd.as_ref().map(|_| 0)) else {
        bail!("flag -host-port is required (0..65535, 0 picks a free port)");
    };
    Ok(Some(Config {
        protocol: flags.proto,
        host: SocketAddr::new(flags.host_ip, host_port),
        container: SocketAddr::new(flags.container_ip, container_port),
        listen_fd,
        udp_idle: flags.udp_idle,
        threads: flags.threads,
    }))
}

/// Parses Go-style flags.
fn parse(args: &[String]) -> anyhow::Result<Flags> {
    let mut flags = Flags::default();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let Some(flag) = arg.strip_prefix("--").or_else(|| arg.strip_prefix('-')) else {
            bail!("unexpected argument {arg:?}: flags are -name value");
        };
        let (name, inline) = match flag.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (flag, None),
        };
        if matches!(name, "h" | "help") {
            flags.help = true;
            continue;
        }
        if matches!(name, "use-listen-fd" | "v" | "version") {
            let on = parse_bool(name, inline.unwrap_or("true"))?;
            match name {
                "use-listen-fd" => flags.use_listen_fd = on,
                _ => flags.version = on,
            }
            continue;
        }
        let value = match inline {
            Some(value) => value,
            None => match args.next() {
                Some(value) => value.as_str(),
                None => bail!("flag needs an argument: -{name}"),
            },
        };
        set(&mut flags, name, value)?;
    }
    Ok(flags)
}

fn set(flags: &mut Flags, name: &str, value: &str) -> anyhow::Result<()> {
    match name {
        "proto" => {
            flags.proto = value
                .parse()
                .map_err(|_| invalid(name, value, "tcp|udp|sctp"))?
        }
        "host-ip" => flags.host_ip = value.parse().map_err(|_| invalid(name, value, "an IP"))?,
        "container-ip" => {
            flags.container_ip = value.parse().map_err(|_| invalid(name, value, "an IP"))?
        }
        "host-port" => flags.host_port = Some(port(name, value)?),
        "container-port" => flags.container_port = Some(port(name, value)?),
        "udp-idle-timeout" => {
            let secs: u64 = value.parse().map_err(|_| invalid(name, value, "seconds"))?;
            flags.udp_idle = Duration::from_secs(secs.max(1));
        }
        "threads" => flags.threads = value.parse().map_err(|_| invalid(name, value, "a count"))?,
        _ => bail!("flag provided but not defined: -{name}"),
    }
    Ok(())
}

fn port(name: &str, value: &str) -> anyhow::Result<u16> {
    value
        .parse()
        .map_err(|_| invalid(name, value, "a port in 0..65535"))
}

fn parse_bool(name: &str, value: &str) -> anyhow::Result<bool> {
    match value {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(invalid(name, value, "true or false")),
    }
}

fn invalid(name: &str, value: &str, want: &str) -> anyhow::Error {
    anyhow::anyhow!("invalid value {value:?} for flag -{name}: want {want}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> anyhow::Result<Flags> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn dockerd_command_line_parses() {
        let f = p(&[
            "-proto",
            "udp",
            "-host-ip",
            "::1",
            "-host-port",
            "53",
            "-container-ip",
            "172.17.0.2",
            "-container-port",
            "5353",
            "-use-listen-fd",
        ])
        .unwrap();
        assert_eq!(f.proto, Protocol::Udp);
        assert_eq!(f.host_ip, "::1".parse::<IpAddr>().unwrap());
        assert_eq!(f.host_port, Some(53));
        assert_eq!(f.container_port, Some(5353));
        assert!(f.use_listen_fd);
    }

    #[test]
    fn go_flag_forms_are_accepted() {
        let f = p(&[
            "--proto=sctp",
            "-host-port=0",
            "--use-listen-fd=false",
            "-threads",
            "2",
        ]);
        let f = f.unwrap();
        assert_eq!(f.proto, Protocol::Sctp);
        assert_eq!(f.host_port, Some(0));
        assert!(!f.use_listen_fd);
        assert_eq!(f.threads, 2);
        assert_eq!(
            p(&["-udp-idle-timeout", "5"]).unwrap().udp_idle,
            Duration::from_secs(5)
        );
    }

    #[test]
    fn help_is_asked_as_go_asks_it() {
        for form in ["-h", "-help", "--help"] {
            assert!(p(&[form]).unwrap().help, "{form}");
        }
        assert!(!p(&["-host-port", "1"]).unwrap().help);
    }

    #[test]
    fn errors_name_the_flag() {
        let e = |args: &[&str]| p(args).unwrap_err().to_string();
        assert_eq!(e(&["-bogus", "1"]), "flag provided but not defined: -bogus");
        assert_eq!(e(&["-host-port"]), "flag needs an argument: -host-port");
        assert!(e(&["-host-port", "70000"]).contains("flag -host-port"));
        assert!(e(&["-proto", "icmp"]).contains("flag -proto"));
        assert!(e(&["-container-ip", "x"]).contains("flag -container-ip"));
        assert!(e(&["-use-listen-fd=maybe"]).contains("flag -use-listen-fd"));
        assert!(e(&["stray"]).contains("\"stray\""));
        let missing = config(p(&["-host-port", "1"]).unwrap()).unwrap_err();
        assert!(missing.to_string().contains("-container-port"));
    }
}
