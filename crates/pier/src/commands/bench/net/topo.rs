//! The network the benchmark measures on: where the server runs and where the client runs.
//!
//! Theory of operation: the server is `pier bench pong`, pinned to the chosen cpuset. With
//! `--server pier` (the default) it is a container: `pier run -d --network bridge --cpus N
//! --cpuset-cpus SET host PIER bench pong`, and the container's address and the bridge come from
//! `pier inspect`. With `--server netns` it runs in a network namespace the benchmark makes
//! itself (`pier-bench-<pid>`), joined to the host by a veth pair (host side `pbs<pid>`) on
//! 198.19.254.0/30 and 2001:2:0:ff::/64 (benchmarking ranges, RFC 2544 and RFC 5180): the same
//! path a bridged container has minus the bridge, usable where the engine is not.
//!
//! The remote client (`--client remote`) runs wrk in a second namespace (`pier-bench-<pid>-c`)
//! joined by veth (`pbc<pid>`, 198.19.254.4/30) whose default route is the host, so its traffic
//! arrives on a host interface the way a LAN client's does, and that route is also its route to
//! the container subnet (the benchmark's pier network is routed: the `direct` row dials the
//! container's address); the host forwards it (ip_forward on, FORWARD accepted for the two
//! links, both undone at the end).
//!
//! Where the client runs: pinned (`taskset -c`) to the CPUs the server's cpuset leaves
//! ([`client_cpus_left`]; `--client-cpuset` overrides it, `all` unpins), so it never takes the
//! server's core, as a client on a machine of its own would not. Unpinned, on a 2-vCPU VM the
//! scheduler sometimes puts client threads on the server's core, where a wake-up costs no
//! inter-processor interrupt: one cell's rounds then spread 2.6× (remote, 28k–72k requests/s at
//! -c2; local 28k–85k for direct) and the ratios measure placement, not the path.
//!
//! Privileges: root. Exercised by tests/bench_net.rs.
use super::host::{cmd, spawn, wait_listening, Cleanup, Undo};
use anyhow::Context;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Port the server listens on inside its namespace.
pub const SERVER_PORT: u16 = 8080;
const SERVER_HOST: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 1);
const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 2);
const SERVER_ADDR6: Ipv6Addr = Ipv6Addr::new(0x2001, 2, 0, 0xff, 0, 0, 0, 2);
const CLIENT_HOST: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 5);
const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(198, 19, 254, 6);

/// The server: its addresses and the host interface its traffic leaves by.
#[derive(Debug, Clone)]
pub struct Server {
    pub addr: Ipv4Addr,
    pub addr6: Option<Ipv6Addr>,
    /// The TCP port the server listens on (8080 for pong, 5432 for PostgreSQL).
    pub port: u16,
    /// Host-side interface towards the server (the veth, or the container's bridge).
    pub iface: String,
    /// How it was started, for the report.
    pub how: String,
}

/// Where wrk runs.
#[derive(Debug, Clone)]
pub struct ClientSide {
    /// Network namespace to run wrk in (None: the benchmark's own).
    pub netns: Option<String>,
    /// The host address the client dials for published ports.
    pub host_addr: IpAddr,
    /// CPUs the client is pinned to (`taskset -c`), as a cpuset list; None: not pinned.
    pub cpuset: Option<String>,
}

/// The CPUs of a cpuset list (`0-3,6`), or why it is not one.
pub fn cpus_of(list: &str) -> Result<std::collections::BTreeSet<usize>, String> {
    let bad = || format!("{list:?} is not a CPU list (like 0 or 0-3,6)");
    let mut cpus = std::collections::BTreeSet::new();
    for part in list.split(',') {
        let (first, last) = part.split_once('-').unwrap_or((part, part));
        let first: usize = first.trim().parse().map_err(|_| bad())?;
        let last: usize = last.trim().parse().map_err(|_| bad())?;
        if first > last {
            return Err(bad());
        }
        cpus.extend(first..=last);
    }
    Ok(cpus)
}

/// Checks that `list` is a CPU list and that this process may run on every CPU in it.
pub fn usable_cpus(list: &str) -> Result<(), String> {
    let wanted = cpus_of(list)?;
    let status = std::fs::read_to_string("/proc/self/status").map_err(|e| e.to_string())?;
    let allowed = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|l| cpus_of(l.trim()))
        .ok_or("no Cpus_allowed_list in /proc/self/status")??;
    match wanted.difference(&allowed).next() {
        Some(cpu) => Err(format!(
            "CPU {cpu} is not one this process may run on ({})",
            cpu_list(&allowed)
        )),
        None => Ok(()),
    }
}

/// A cpuset list of `cpus` (ranges folded: `0-2,5`).
pub fn cpu_list(cpus: &std::collections::BTreeSet<usize>) -> String {
    let mut parts: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        match parts.last_mut() {
            Some((_, last)) if *last + 1 == cpu => *last = cpu,
            _ => parts.push((cpu, cpu)),
        }
    }
    let text = |&(a, b): &(usize, usize)| match a == b {
        true => a.to_string(),
        false => format!("{a}-{b}"),
    };
    parts.iter().map(text).collect::<Vec<_>>().join(",")
}

/// Where the client runs by default: on the CPUs of `all` that the server's `server` set
/// leaves; None (not pinned) when the server's set covers every CPU.
pub fn client_cpus_left(all: usize, server: &str) -> Result<Option<String>, String> {
    let taken = cpus_of(server)?;
    let free: std::collections::BTreeSet<usize> = (0..all).filter(|c| !taken.contains(c)).collect();
    Ok((!free.is_empty()).then(|| cpu_list(&free)))
}

/// The benchmark's own names, from its pid.
pub fn names() -> (String, String, String, String) {
    let pid = std::process::id();
    (
        format!("pier-bench-{pid}"),
        format!("pier-bench-{pid}-c"),
        format!("pbs{pid}"),
        format!("pbc{pid}"),
    )
}

/// Starts the pong server in a namespace of the benchmark's own.
pub fn netns_server(cleanup: &mut Cleanup, pier: &Path, cpuset: &str) -> anyhow::Result<Server> {
    let (ns, _, veth, _) = names();
    link_namespace(cleanup, &ns, &veth, SERVER_HOST, SERVER_ADDR)?;
    let six = format!("{SERVER_ADDR6}/64");
    let host6 = "2001:2:0:ff::1/64";
    cmd("ip", &["addr", "add", host6, "dev", &veth, "nodad"])?;
    in_ns(&ns, &["ip", "addr", "add", &six, "dev", "eth0", "nodad"])?;
    in_ns(
        &ns,
        &[
            "ip",
            "-6",
            "route",
            "add",
            "default",
            "via",
            "2001:2:0:ff::1",
        ],
    )?;
    let mut command = Command::new("ip");
    command.args(["netns", "exec", &ns, "taskset", "-c", cpuset]);
    command
        .arg(pier)
        .args(["bench", "pong", "--port", &SERVER_PORT.to_string()]);
    command.stdout(std::process::Stdio::null());
    let mut child = spawn(command, "the pong server")?;
    let ready = wait_listening(
        SocketAddr::from((SERVER_ADDR, SERVER_PORT)),
        Some(&mut child),
        Duration::from_secs(5),
    );
    cleanup.push(Undo::Process("the pong server".into(), child));
    ready.context("the pong server did not start")?;
    let how = format!("`pier bench pong` in netns {ns} (veth {veth}), `taskset -c {cpuset}`");
    Ok(Server {
        addr: SERVER_ADDR,
        addr6: Some(SERVER_ADDR6),
        port: SERVER_PORT,
        iface: veth,
        how,
    })
}

/// Makes the remote client's namespace and lets the host forward between it and the server.
pub fn remote_client(cleanup: &mut Cleanup, server: &Server) -> anyhow::Result<ClientSide> {
    let (_, ns, _, veth) = names();
    link_namespace(cleanup, &ns, &veth, CLIENT_HOST, CLIENT_ADDR)?;
    cleanup.sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
    for iface in [&veth, &server.iface] {
        cleanup.rule("filter", "-I", &["FORWARD", "-i", iface, "-j", "ACCEPT"])?;
        cleanup.rule("filter", "-I", &["FORWARD", "-o", iface, "-j", "ACCEPT"])?;
    }
    Ok(ClientSide {
        netns: Some(ns),
        host_addr: CLIENT_HOST.into(),
        cpuset: None,
    })
}

/// A namespace `ns` with `eth0` = `inner/30`, joined to `veth` = `outer/30` on the host, its
/// default route via the host.
fn link_namespace(
    cleanup: &mut Cleanup,
    ns: &str,
    veth: &str,
    outer: Ipv4Addr,
    inner: Ipv4Addr,
) -> anyhow::Result<()> {
    cmd("ip", &["netns", "add", ns])?;
    cleanup.push(Undo::Netns(ns.to_string()));
    cmd(
        "ip",
        &[
            "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns,
        ],
    )?;
    cmd("ip", &["addr", "add", &format!("{outer}/30"), "dev", veth])?;
    cmd("ip", &["link", "set", veth, "up"])?;
    in_ns(
        ns,
        &["ip", "addr", "add", &format!("{inner}/30"), "dev", "eth0"],
    )?;
    in_ns(ns, &["ip", "link", "set", "eth0", "up"])?;
    in_ns(ns, &["ip", "link", "set", "lo", "up"])?;
    in_ns(
        ns,
        &["ip", "route", "add", "default", "via", &outer.to_string()],
    )
}

fn in_ns(ns: &str, args: &[&str]) -> anyhow::Result<()> {
    let mut full = vec!["netns", "exec", ns];
    full.extend_from_slice(args);
    cmd("ip", &full)
}

/// Deletes the namespaces of earlier benchmarks whose process is gone (their veths go with them).
pub fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir("/run/netns") else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix("pier-bench-") else {
            continue;
        };
        let pid = rest.trim_end_matches("-c");
        if pid.bytes().all(|b| b.is_ascii_digit()) && !Path::new("/proc").join(pid).exists() {
            match cmd("ip", &["netns", "del", &name]) {
                Ok(()) => eprintln!("pier bench net: removed {name} left by an interrupted run"),
                Err(e) => eprintln!("pier bench net: cannot remove stale {name}: {e:#}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_fold() {
        let set = cpus_of("0-2,5, 7").unwrap();
        assert_eq!(set.iter().copied().collect::<Vec<_>>(), [0, 1, 2, 5, 7]);
        assert_eq!(cpu_list(&set), "0-2,5,7");
        for bad in ["", "a", "3-1", "1-", "0,,1"] {
            assert!(cpus_of(bad).is_err(), "{bad:?} parsed");
        }
    }

    #[test]
    fn the_client_takes_the_cpus_the_server_leaves() {
        assert_eq!(client_cpus_left(2, "1").unwrap().as_deref(), Some("0"));
        assert_eq!(
            client_cpus_left(8, "3-4").unwrap().as_deref(),
            Some("0-2,5-7")
        );
        assert_eq!(client_cpus_left(2, "0-1").unwrap(), None);
        assert_eq!(client_cpus_left(1, "0").unwrap(), None);
        assert!(client_cpus_left(2, "x").is_err());
    }
}
