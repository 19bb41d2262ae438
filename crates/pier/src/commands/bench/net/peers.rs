//! The rows of `pier bench net`: each a path from the client to the pong server, set up once
//! before the first round and torn down by the cleanup stack.
//!
//! Theory of operation, row by row (`P` = the row's host port, `C` = the server's address):
//! - `host`: a second pong server on the host itself (no container), same cpuset: the ceiling.
//! - `direct`: the client dials C:8080; nothing in between but routing. The remote client too:
//!   the benchmark's network is routed (engine.rs), and the client's default route is the host.
//! - `pier-auto`, `pier-nat`, `pier-proxy`: a pong container of its own published with
//!   `pier run -p P:8080 --publish-mode MODE` (same cpuset). Without the engine (`--server
//!   netns`), `pier-proxy` is `pier proxy` started as dockerd starts docker-proxy, and the two
//!   kernel rows are skipped.
//! - `docker-proxy`: `/usr/sbin/docker-proxy -proto tcp -host-ip 0.0.0.0 -host-port P
//!   -container-ip C -container-port 8080`, exactly dockerd 20.10's command line, with fd 3 the
//!   write end of a pipe whose first line ("0" or "1" and an error) says whether it bound.
//! - `kernel-nat`: Docker's rules with `userland-proxy: false`, in a chain of the benchmark's own
//!   (`PIER-BENCH-<pid>`, nat and filter tables): PREROUTING and OUTPUT (no 127.0.0.0/8
//!   exclusion) jump on `--dst-type LOCAL`, DNAT `! -i IFACE --dport P` to C:8080, MASQUERADE of
//!   local sources leaving by IFACE (with route_localnet=1 on it, as Docker sets on docker0), the
//!   hairpin MASQUERADE and the FORWARD accept. It cannot serve ::1 (no IPv6 DNAT to IPv4).
//! - `nginx`: `stream { server { listen P; proxy_pass C:8080; } }`, `worker_processes auto`.
//! - `haproxy`: `mode tcp`, one `bind :P`, `server app C:8080`, nbthread = cores.
//!
//! Forwarder configs live in the run's temp dir; pid and log files too.
//!
//! Privileges: root. Exercised by tests/bench_net.rs.
use super::host::{self, check_port_free, spawn, wait_listening, which, Cleanup, Undo};
use super::topo::Server;
use super::Client;
use anyhow::Context;
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// A row of `pier bench net`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RowKind {
    Host,
    Direct,
    PierAuto,
    PierNat,
    PierProxy,
    DockerProxy,
    KernelNat,
    Nginx,
    Haproxy,
}

impl RowKind {
    pub const ALL: [RowKind; 9] = [
        RowKind::Host,
        RowKind::Direct,
        RowKind::PierAuto,
        RowKind::PierNat,
        RowKind::PierProxy,
        RowKind::DockerProxy,
        RowKind::KernelNat,
        RowKind::Nginx,
        RowKind::Haproxy,
    ];

    /// The label in tables and charts.
    pub fn label(self) -> &'static str {
        match self {
            RowKind::Host => "host network (no container)",
            RowKind::Direct => "direct container IP",
            RowKind::PierAuto => "pier auto",
            RowKind::PierNat => "pier nat",
            RowKind::PierProxy => "pier proxy",
            RowKind::DockerProxy => "docker-proxy",
            RowKind::KernelNat => "kernel NAT (Docker, userland-proxy off)",
            RowKind::Nginx => "nginx stream",
            RowKind::Haproxy => "haproxy tcp",
        }
    }

    /// The program the row needs installed, if any.
    fn program(self) -> Option<&'static str> {
        match self {
            RowKind::DockerProxy => Some("/usr/sbin/docker-proxy"),
            RowKind::KernelNat => Some("iptables"),
            RowKind::Nginx => Some("nginx"),
            RowKind::Haproxy => Some("haproxy"),
            _ => None,
        }
    }
}

/// Everything a row's setup needs.
#[derive(Debug)]
pub struct Setup<'a> {
    pub server: &'a Server,
    pub pier: &'a Path,
    pub work: &'a Path,
    pub cpuset: &'a str,
    /// `--cpus` of the pier containers.
    pub cpus: &'a str,
    /// The address forwarders listen on: 0.0.0.0, or :: for the IPv6 client.
    pub listen: IpAddr,
    /// Where wrk runs.
    pub client: Client,
    /// With `--workload pg`: the port the database container itself is published on (auto).
    pub pg_auto_port: Option<u16>,
    /// Whether the server is a pier container (pier rows available).
    pub engine: bool,
}

/// A row ready to measure: where the client dials and which processes forward.
#[derive(Debug)]
pub struct Ready {
    pub target: SocketAddr,
    pub forwarders: Vec<i32>,
    pub command: String,
}

/// Why a row is not measured at all (program not installed, or no engine).
pub fn skip_reason(kind: RowKind, setup: &Setup) -> Option<String> {
    if let Some(program) = kind.program() {
        if which(program).is_none() {
            return Some(format!("{program} is not installed"));
        }
    }
    if setup.pg_auto_port.is_some() && matches!(kind, RowKind::Host | RowKind::PierNat) {
        return Some("not a row of the pg workload (it would need a database of its own)".into());
    }
    if kind == RowKind::KernelNat && setup.listen.is_ipv6() {
        return Some(
            "Docker's kernel NAT cannot serve an IPv6 client (::1) for an IPv4 container".into(),
        );
    }
    if kind == RowKind::PierNat && setup.client != Client::Remote {
        return Some(
            "pier's nat engine serves remote clients (clients on the host go through eBPF: \
             see pier auto); measure it with --client remote"
                .into(),
        );
    }
    let needs_engine = matches!(kind, RowKind::PierAuto | RowKind::PierNat);
    (needs_engine && !setup.engine)
        .then(|| "needs the server started by `pier run` (--server pier)".to_string())
}

/// Sets a row up on host port `port`; what it started goes on `cleanup`.
pub fn prepare(
    kind: RowKind,
    port: u16,
    setup: &Setup,
    cleanup: &mut Cleanup,
) -> anyhow::Result<Ready> {
    let container = SocketAddr::from((setup.server.addr, setup.server.port));
    if kind == RowKind::Direct {
        let target = match (setup.listen, setup.server.addr6) {
            (IpAddr::V6(_), Some(six)) => SocketAddr::from((six, setup.server.port)),
            _ => container,
        };
        let command = format!("wrk → {target}");
        return Ok(Ready {
            target,
            forwarders: vec![],
            command,
        });
    }
    if setup.pg_auto_port != Some(port) {
        check_port_free(port, setup.listen.is_ipv6())?;
    }
    let front = SocketAddr::from((setup.listen, port));
    match kind {
        RowKind::Host => host_server(port, setup, cleanup),
        RowKind::DockerProxy => userland_proxy(
            Path::new("/usr/sbin/docker-proxy"),
            &[],
            front,
            container,
            cleanup,
        ),
        RowKind::PierAuto if setup.pg_auto_port.is_some() => {
            let target = dial(front);
            let command =
                "pier run -p PORT:5432 --publish-mode auto (the database container)".into();
            Ok(Ready {
                target,
                forwarders: vec![],
                command,
            })
        }
        RowKind::PierProxy if !setup.engine || setup.pg_auto_port.is_some() => {
            userland_proxy(setup.pier, &["proxy"], front, container, cleanup)
        }
        RowKind::KernelNat => kernel_nat(port, setup, cleanup),
        RowKind::Nginx => nginx(front, container, setup.work, cleanup),
        RowKind::Haproxy => haproxy(front, container, setup.work, cleanup),
        RowKind::PierAuto | RowKind::PierNat | RowKind::PierProxy => {
            super::engine::published(kind, port, setup, cleanup)
        }
        RowKind::Direct => unreachable!("handled above"),
    }
}

/// What the client dials for a listener on `front` (the wildcard becomes loopback; the caller
/// substitutes the remote client's host address).
fn dial(front: SocketAddr) -> SocketAddr {
    let ip = match front.ip() {
        IpAddr::V4(a) if a.is_unspecified() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(a) if a.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, front.port())
}

/// Starts `child`, records it, and waits for it to listen on `front`.
fn started(
    what: &str,
    mut child: Child,
    front: SocketAddr,
    cleanup: &mut Cleanup,
) -> anyhow::Result<i32> {
    let pid = child.id() as i32;
    let ready = wait_listening(dial(front), Some(&mut child), Duration::from_secs(5));
    cleanup.push(Undo::Process(what.to_string(), child));
    ready.with_context(|| format!("{what} did not start"))?;
    Ok(pid)
}

fn host_server(port: u16, setup: &Setup, cleanup: &mut Cleanup) -> anyhow::Result<Ready> {
    let mut command = Command::new("taskset");
    command.args(["-c", setup.cpuset]).arg(setup.pier);
    command.args(["bench", "pong", "--port", &port.to_string()]);
    command.stdout(std::process::Stdio::null());
    let command_line = format!("taskset -c {} pier bench pong --port {port}", setup.cpuset);
    let child = spawn(command, "the host pong server")?;
    let front = SocketAddr::new(setup.listen, port);
    started("the host pong server", child, front, cleanup)?;
    Ok(Ready {
        target: dial(front),
        forwarders: vec![],
        command: command_line,
    })
}

/// docker-proxy (or `pier proxy`) as dockerd 20.10 runs it: its flags, and fd 3 the write end of
/// the status pipe (the shell moves the pipe from stdout to fd 3 and execs the proxy).
fn userland_proxy(
    program: &Path,
    verb: &[&str],
    front: SocketAddr,
    container: SocketAddr,
    cleanup: &mut Cleanup,
) -> anyhow::Result<Ready> {
    let mut args: Vec<String> = verb.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "-proto",
            "tcp",
            "-host-ip",
            &front.ip().to_string(),
            "-host-port",
            &front.port().to_string(),
            "-container-ip",
            &container.ip().to_string(),
            "-container-port",
            &container.port().to_string(),
        ]
        .map(String::from),
    );
    let (status_read, status_write) = std::io::pipe().context("pipe for the status fd")?;
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg("exec \"$0\" \"$@\" 3>&1 >/dev/null")
        .arg(program)
        .args(&args);
    command.stdout(status_write);
    let what = program
        .file_name()
        .map_or("proxy".into(), |n| n.to_string_lossy().into_owned());
    // `spawn` consumes the command and with it the parent's copy of the write end, so the read
    // below ends when the proxy closes (or execs without) fd 3.
    let mut child = spawn(command, &what)?;
    let status = read_status(status_read);
    let pid = child.id() as i32;
    let exited = child.try_wait().ok().flatten();
    cleanup.push(Undo::Process(what.clone(), child));
    match (status.as_deref(), exited) {
        (Some("0"), None) => {}
        (Some("0"), Some(how)) => {
            anyhow::bail!("{what} reported success on fd 3 but exited ({how})")
        }
        (Some(other), _) => anyhow::bail!("{what} reported on fd 3: {other}"),
        (None, _) => anyhow::bail!("{what} closed fd 3 without a status"),
    }
    let command_line = format!("{} {}", program.display(), args.join(" "));
    Ok(Ready {
        target: dial(front),
        forwarders: vec![pid],
        command: command_line,
    })
}

/// The status docker-proxy writes on fd 3: "0", or "1" and the error (joined on one line).
fn read_status(pipe: std::io::PipeReader) -> Option<String> {
    let lines: Vec<String> = BufReader::new(pipe).lines().map_while(Result::ok).collect();
    let text = lines.join(" ").trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// Docker's iptables rules for a published port with `userland-proxy: false`.
fn kernel_nat(port: u16, setup: &Setup, cleanup: &mut Cleanup) -> anyhow::Result<Ready> {
    let command = docker_rules(&[port], setup.server, cleanup)?;
    let target = dial(SocketAddr::new(setup.listen, port));
    Ok(Ready {
        target,
        forwarders: vec![],
        command,
    })
}

/// Docker's iptables rules (`userland-proxy: false`) publishing every port of `ports` to the
/// server's port 8080, one DNAT rule per port in `ports` order, as Docker writes one per `-p`.
/// The DNAT rules go in with one `iptables-restore --noflush`, so 1,000 ports take one exec.
pub fn docker_rules(
    ports: &[u16],
    server: &Server,
    cleanup: &mut Cleanup,
) -> anyhow::Result<String> {
    let chain = format!("PIER-BENCH-{}", std::process::id());
    let iface = server.iface.as_str();
    let (c, cport) = (server.addr.to_string(), server.port.to_string());
    let (to, c32) = (format!("{c}:{cport}"), format!("{c}/32"));
    cleanup.sysctl(
        &format!("/proc/sys/net/ipv4/conf/{iface}/route_localnet"),
        "1",
    )?;
    cleanup.chain("nat", &chain)?;
    let jump = ["-m", "addrtype", "--dst-type", "LOCAL", "-j", &chain];
    cleanup.rule("nat", "-A", &[&["PREROUTING"][..], &jump].concat())?;
    cleanup.rule("nat", "-A", &[&["OUTPUT"][..], &jump].concat())?;
    let local = ["-m", "addrtype", "--src-type", "LOCAL", "-j", "MASQUERADE"];
    cleanup.rule(
        "nat",
        "-A",
        &[&["POSTROUTING", "-o", iface][..], &local].concat(),
    )?;
    let hairpin = ["-p", "tcp", "--dport", &cport, "-j", "MASQUERADE"];
    cleanup.rule(
        "nat",
        "-A",
        &[&["POSTROUTING", "-s", &c32, "-d", &c32][..], &hairpin].concat(),
    )?;
    let mut restore = String::from("*nat\n");
    for port in ports {
        restore.push_str(&format!(
            "-A {chain} ! -i {iface} -p tcp -m tcp --dport {port} -j DNAT --to-destination {to}\n"
        ));
    }
    restore.push_str("COMMIT\n");
    host::restore(&restore)?;
    cleanup.chain("filter", &chain)?;
    cleanup.rule("filter", "-I", &["FORWARD", "-o", iface, "-j", &chain])?;
    let accept = ["-p", "tcp", "--dport", &cport, "-j", "ACCEPT"];
    cleanup.rule(
        "filter",
        "-A",
        &[
            &[&chain, "-d", &c32, "!", "-i", iface, "-o", iface][..],
            &accept,
        ]
        .concat(),
    )?;
    Ok(format!(
        "iptables -t nat -A {chain} ! -i {iface} -p tcp --dport PORT -j DNAT --to-destination {to} \
         ×{} (+ Docker's jumps, masquerade, forward accept)",
        ports.len()
    ))
}

/// The listen directive's address for nginx and haproxy.
fn listen_text(front: SocketAddr) -> String {
    match front.ip() {
        IpAddr::V6(ip) => format!("[{ip}]:{}", front.port()),
        IpAddr::V4(ip) => format!("{ip}:{}", front.port()),
    }
}

/// Debian builds the stream module as a dynamic module, loaded by /etc/nginx/modules-enabled.
const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

fn nginx(
    front: SocketAddr,
    container: SocketAddr,
    work: &Path,
    cleanup: &mut Cleanup,
) -> anyhow::Result<Ready> {
    let dir = work.join("nginx");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let module = Path::new(NGINX_STREAM_MODULE);
    let load = if module.exists() {
        format!("load_module {NGINX_STREAM_MODULE};\n")
    } else {
        String::new()
    };
    let conf = format!(
        "{load}daemon off;\nmaster_process on;\nworker_processes auto;\npid {pid};\nerror_log {log} warn;\n\
         events {{ worker_connections 4096; }}\n\
         stream {{ server {{ listen {listen}; proxy_pass {container}; }} }}\n",
        pid = dir.join("nginx.pid").display(),
        log = dir.join("error.log").display(),
        listen = listen_text(front),
    );
    let path = write(&dir.join("nginx.conf"), &conf)?;
    let mut command = Command::new("nginx");
    command
        .arg("-p")
        .arg(&dir)
        .arg("-e")
        .arg(dir.join("error.log"))
        .arg("-c")
        .arg(&path);
    command.stdout(std::process::Stdio::null());
    let child = spawn(command, "nginx")?;
    let log = dir.join("error.log");
    let pid = started("nginx", child, front, cleanup).map_err(|e| {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        e.context(crate::commands::bench::runner::last_lines(&text, 2))
    })?;
    Ok(Ready {
        target: dial(front),
        forwarders: vec![pid],
        command: format!("nginx -c {}", path.display()),
    })
}

fn haproxy(
    front: SocketAddr,
    container: SocketAddr,
    work: &Path,
    cleanup: &mut Cleanup,
) -> anyhow::Result<Ready> {
    let dir = work.join("haproxy");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let threads = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let conf = format!(
        "global\n    maxconn 4096\n    nbthread {threads}\n    pidfile {pid}\n\
         defaults\n    mode tcp\n    timeout client 30s\n    timeout connect 10s\n    timeout server 30s\n\
         frontend main\n    bind {listen}\n    default_backend container\n\
         backend container\n    server app {container}\n",
        pid = dir.join("haproxy.pid").display(),
        listen = listen_text(front),
    );
    let path = write(&dir.join("haproxy.cfg"), &conf)?;
    let mut command = Command::new("haproxy");
    command.arg("-db").arg("-f").arg(&path);
    command.stdout(std::process::Stdio::null());
    let child = spawn(command, "haproxy")?;
    let pid = started("haproxy", child, front, cleanup)?;
    Ok(Ready {
        target: dial(front),
        forwarders: vec![pid],
        command: format!("haproxy -db -f {}", path.display()),
    })
}

fn write(path: &Path, text: &str) -> anyhow::Result<PathBuf> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.to_path_buf())
}
