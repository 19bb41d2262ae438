//! The server and the pier rows as a user makes them: pong containers started by `pier run`.
//!
//! Theory of operation: every container of the run is on the benchmark's own network,
//! `pier network create -o com.docker.network.bridge.gateway_mode_ipv4=routed pier-bench-<pid>`
//! (a bridge with a subnet from the pool, removed at the end): routed, so a remote client reaches
//! the server by its address as a LAN host with a route to the subnet does (the `direct` row for
//! every client), while published ports work as on any network. The measured server is `pier run
//! -d --name pier-bench-<pid>-server --network pier-bench-<pid> --cpus N -v
//! PIER:/tmp/pier-bench:ro host taskset -c SET /tmp/pier-bench bench pong` (the engine has `--cpus`; the cpuset is applied inside with taskset, which the `host`
//! root carries; the pier binary is bind-mounted in, since the `host` root holds only the host's
//! system directories). Each pier row gets a pong
//! container of its own, identical but for `-p P:8080 --publish-mode MODE`, because the publish
//! mode is a property of the container. Addresses come from `pier inspect` (the first IPv4 and
//! IPv6 address found in it). Every container is removed with `pier rm -f` by the cleanup stack.
//! The forwarder of the `proxy` mode is found as the owner of the listening socket on P.
//!
//! The engine's state dir is pier's default, or PIER_STATE_DIR when set (tests set it).
//!
//! Privileges: root. Exercised by tests/bench_net.rs.
use super::host::{wait_listening, Cleanup, Undo};
use super::peers::{Ready, RowKind, Setup};
use super::topo::{Server, SERVER_PORT};
use anyhow::Context;
use pier_engine::network::GATEWAY_MODE_IPV4;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where the pier binary is mounted inside the pong containers.
const INSIDE: &str = "/tmp/pier-bench";

/// The benchmark's container network: `pier-bench-<pid>`.
fn network_name() -> String {
    format!("pier-bench-{}", std::process::id())
}

/// Creates the benchmark's routed network (removed by the cleanup stack after the containers on
/// it); returns its bridge, the host interface towards the containers.
pub fn network(cleanup: &mut Cleanup, pier: &Path) -> anyhow::Result<String> {
    let name = network_name();
    let mode = format!("{GATEWAY_MODE_IPV4}=routed");
    let create = ["network", "create", "-o", mode.as_str(), name.as_str()];
    pier_output(pier, &create).with_context(|| format!("pier {}", create.join(" ")))?;
    let rm = vec!["network".into(), "rm".into(), name.clone()];
    cleanup.push(Undo::Command(pier.display().to_string(), rm));
    let inspect = pier_output(pier, &["network", "inspect", &name])?;
    let json: serde_json::Value =
        serde_json::from_str(&inspect).context("parsing pier network inspect")?;
    json[0]["interface"]
        .as_str()
        .map(String::from)
        .with_context(|| format!("no interface in `pier network inspect {name}`: {inspect}"))
}

/// Makes the benchmark's network and starts the measured pong container on it.
pub fn server(
    cleanup: &mut Cleanup,
    pier: &Path,
    cpuset: &str,
    cpus: &str,
) -> anyhow::Result<Server> {
    let bridge = network(cleanup, pier)?;
    let name = format!("pier-bench-{}-server", std::process::id());
    let (addr, addr6) = run_pong(cleanup, pier, &name, cpuset, cpus, &[])?;
    Ok(Server {
        addr,
        addr6,
        port: SERVER_PORT,
        iface: bridge,
        how: format!(
            "pier run -d --network {} (routed) --cpus {cpus} host taskset -c {cpuset} pier \
             bench pong",
            network_name()
        ),
    })
}

/// A pong container published on `port` with the row's mode.
pub fn published(
    kind: RowKind,
    port: u16,
    setup: &Setup,
    cleanup: &mut Cleanup,
) -> anyhow::Result<Ready> {
    let mode = match kind {
        RowKind::PierAuto => "auto",
        RowKind::PierNat => "nat",
        _ => "proxy",
    };
    let name = format!("pier-bench-{}-{mode}", std::process::id());
    let publish = match setup.listen {
        IpAddr::V6(_) => format!("[::]:{port}:{SERVER_PORT}"),
        IpAddr::V4(_) => format!("{port}:{SERVER_PORT}"),
    };
    let extra = ["-p", publish.as_str(), "--publish-mode", mode];
    let cpus = setup.cpus;
    run_pong(cleanup, setup.pier, &name, setup.cpuset, cpus, &extra)?;
    let loopback: IpAddr = match setup.listen {
        IpAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        IpAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
    };
    let target = SocketAddr::new(loopback, port);
    let forwarders = if mode == "proxy" {
        listener_pids(port)
    } else {
        vec![]
    };
    if mode == "proxy" && forwarders.is_empty() {
        anyhow::bail!("no process listens on port {port} for --publish-mode proxy");
    }
    let command = format!("pier run -d -p {publish} --publish-mode {mode} … host … bench pong");
    Ok(Ready {
        target,
        forwarders,
        command,
    })
}

/// `pier run -d` of a pong container; returns its addresses once it answers.
pub fn run_pong(
    cleanup: &mut Cleanup,
    pier: &Path,
    name: &str,
    cpuset: &str,
    cpus: &str,
    extra: &[&str],
) -> anyhow::Result<(Ipv4Addr, Option<Ipv6Addr>)> {
    let volume = format!("{}:{INSIDE}:ro", pier.display());
    let port = SERVER_PORT.to_string();
    let mut flags = vec!["-v", volume.as_str()];
    flags.extend_from_slice(extra);
    let command = [INSIDE, "bench", "pong", "--port", &port];
    let detached = Detached {
        name,
        cpuset,
        cpus,
        flags: &flags,
        command: &command,
        port: SERVER_PORT,
    };
    run_detached(cleanup, pier, &detached)
}

/// A detached container on the benchmark's network ([`network`] made it), pinned with taskset
/// inside the `host` root.
#[derive(Debug)]
pub struct Detached<'a> {
    pub name: &'a str,
    pub cpuset: &'a str,
    pub cpus: &'a str,
    /// `pier run` flags besides name, network and cpus.
    pub flags: &'a [&'a str],
    pub command: &'a [&'a str],
    /// The TCP port the command listens on: the container is ready when it accepts there.
    pub port: u16,
}

/// `pier run -d` of `container`; returns its addresses once it listens on its port.
pub fn run_detached(
    cleanup: &mut Cleanup,
    pier: &Path,
    container: &Detached,
) -> anyhow::Result<(Ipv4Addr, Option<Ipv6Addr>)> {
    let name = container.name;
    let network = network_name();
    let mut args = vec!["run", "-d", "--name", name, "--network", &network];
    args.extend_from_slice(&["--cpus", container.cpus]);
    args.extend_from_slice(container.flags);
    args.extend(["host", "taskset", "-c", container.cpuset]);
    args.extend_from_slice(container.command);
    let rm = vec!["rm".into(), "-f".into(), name.into()];
    cleanup.push(Undo::Command(pier.display().to_string(), rm));
    pier_output(pier, &args).with_context(|| format!("pier {}", args.join(" ")))?;
    let inspect = pier_output(pier, &["inspect", name])?;
    let json: serde_json::Value = serde_json::from_str(&inspect).context("parsing pier inspect")?;
    let found = container_addresses(&json);
    let addr = found
        .iter()
        .find_map(|a| match a {
            IpAddr::V4(v4) if !v4.is_loopback() && !v4.is_unspecified() => Some(*v4),
            _ => None,
        })
        .with_context(|| format!("no IPv4 address in `pier inspect {name}`"))?;
    let addr6 = found.iter().find_map(|a| match a {
        IpAddr::V6(v6) if !v6.is_loopback() && !v6.is_unspecified() => Some(*v6),
        _ => None,
    });
    wait_listening((addr, container.port).into(), None, Duration::from_secs(15))
        .with_context(|| format!("container {name} does not answer"))?;
    Ok((addr, addr6))
}

/// Runs pier with `args`; its stdout, or its stderr as the error.
fn pier_output(pier: &Path, args: &[&str]) -> anyhow::Result<String> {
    let output = Command::new(pier)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {}", pier.display()))?;
    anyhow::ensure!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The container's addresses from `pier inspect` (an array of one object): its `Addresses` field,
/// or else every address anywhere in it.
fn container_addresses(json: &serde_json::Value) -> Vec<IpAddr> {
    let object = json.as_array().and_then(|a| a.first()).unwrap_or(json);
    let mut found = Vec::new();
    addresses(object.get("Addresses").unwrap_or(object), &mut found);
    found
}

/// Every string in `json` that is an IP address (or an address/prefix), in document order.
fn addresses(json: &serde_json::Value, found: &mut Vec<IpAddr>) {
    match json {
        serde_json::Value::String(s) => {
            let bare = s.split('/').next().unwrap_or(s);
            if let Ok(ip) = bare.parse() {
                found.push(ip);
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| addresses(v, found)),
        serde_json::Value::Object(map) => map.values().for_each(|v| addresses(v, found)),
        _ => {}
    }
}

/// Pids of the processes holding a listening TCP socket on `port` (IPv4 or IPv6).
pub fn listener_pids(port: u16) -> Vec<i32> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let listening = *state == "0A";
            let on_port = local
                .rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port);
            if listening && on_port {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    owners(&inodes)
}

fn owners(sockets: &[String]) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(entry.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path())
                .is_ok_and(|target| sockets.iter().any(|s| target.as_os_str() == s.as_str()))
        });
        if holds {
            pids.push(pid);
        }
    }
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_found_anywhere_in_inspect() {
        let json = serde_json::json!([{
            "Name": "x",
            "Gateway": "198.18.0.1",
            "Addresses": ["198.18.0.2", "2001:2::2"]
        }]);
        let found = container_addresses(&json);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0], "198.18.0.2".parse::<IpAddr>().unwrap());
        let mut anywhere = Vec::new();
        addresses(
            &serde_json::json!({"net": [{"ip": "198.18.0.3/24"}]}),
            &mut anywhere,
        );
        assert_eq!(anywhere, vec!["198.18.0.3".parse::<IpAddr>().unwrap()]);
    }

    #[test]
    fn own_listener_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        assert!(listener_pids(port).contains(&(std::process::id() as i32)));
    }
}
