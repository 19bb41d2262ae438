//! proxy engine: one `pier proxy` child (the userspace forwarder) per host address, port and
//! protocol, for hosts without cgroup2/BPF and for loopback when `auto` falls back.
//!
//! Theory of operation: a child is started as dockerd starts docker-proxy
//! (`<proxy_binary> proxy -proto P -host-ip A -host-port N -container-ip C -container-port M`),
//! with a pipe as fd 3 that it answers "0\n" (listening) or "1\n<error>" on and then closes,
//! `PR_SET_PDEATHSIG(SIGKILL)` so it dies with the thread that started it (the engine's
//! monitor), and `PIER_CONTAINER_ID` in its environment so a conflicting publish can name the
//! container. A wildcard front is two children, `0.0.0.0` and `::` (pier proxy sets
//! IPV6_V6ONLY, as docker-proxy is run once per family), both to the container's IPv4 address
//! when it has one. Apply returns each child's pid and /proc start time; removal signals the
//! process so identified (SIGTERM through a pidfd, then waits for it), or, for an entry
//! recorded before its child was known (a crash between plan and record), the process whose
//! command line is exactly the entry's.
//!
//! Section order (the same in every engine file): engine, plan, apply, remove.
//! Privileges: whatever binding the host port needs. Tests: crates/publish/tests/priv_engines*.rs.
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::process::{Command, Stdio};

use super::plan::{self, Pair};
use super::sockets::CONTAINER_ENV;
use super::{apply, ebpf, Entry, Publish, PublishError, Published, Settings, Target};
use crate::{PortMapping, Protocol};

const ENGINE: &str = "proxy";

/// The proxy engine.
#[derive(Debug)]
pub(crate) struct ProxyEngine {
    settings: Settings,
}

impl ProxyEngine {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            settings: settings.clone(),
        }
    }
}

impl Publish for ProxyEngine {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn plan(
        &self,
        target: &Target,
        mappings: &[PortMapping],
    ) -> Result<(Vec<Published>, Vec<Entry>), PublishError> {
        let (published, pairs) = plan::resolve(&self.settings, target, mappings)?;
        let mut entries = Vec::new();
        for pair in &pairs {
            let fronts = match pair.host_ip.filter(|ip| !ip.is_unspecified()) {
                Some(ip) => vec![ip],
                None => vec![Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()],
            };
            entries.extend(entries_for(pair, target, &fronts)?);
        }
        Ok((published, entries))
    }

    fn apply_recorded(
        &self,
        target: &Target,
        entries: &[Entry],
    ) -> Result<Vec<Entry>, PublishError> {
        apply::apply(&self.settings, target, entries)
    }

    fn remove(&self, entries: &[Entry]) -> Result<(), PublishError> {
        apply::remove(&self.settings, entries)
    }
}

/// One child per front of `pair`; a front no container address can serve is refused.
pub(crate) fn entries_for(
    pair: &Pair,
    target: &Target,
    fronts: &[IpAddr],
) -> Result<Vec<Entry>, PublishError> {
    let mut out = Vec::new();
    for &front in fronts {
        let to = match front {
            IpAddr::V6(v6) if v6.is_unspecified() => target.addresses.first().copied(),
            _ => ebpf::target_for(front, target),
        };
        let to = to.ok_or_else(|| PublishError::NoAddress {
            engine: ENGINE,
            container: target.container_id.clone(),
        })?;
        out.push(Entry::Proxy {
            protocol: pair.protocol,
            host: SocketAddr::new(front, pair.host_port),
            target: SocketAddr::new(to, pair.container_port),
            pid: None,
            start_time: None,
        });
    }
    Ok(out)
}

/// docker-proxy's arguments for one child (after the `proxy` verb).
fn args(protocol: Protocol, host: SocketAddr, target: SocketAddr) -> Vec<String> {
    [
        "proxy".to_string(),
        "-proto".into(),
        protocol.as_str().into(),
        "-host-ip".into(),
        host.ip().to_string(),
        "-host-port".into(),
        host.port().to_string(),
        "-container-ip".into(),
        target.ip().to_string(),
        "-container-port".into(),
        target.port().to_string(),
    ]
    .into()
}

/// Starts one child and waits for its status; returns (pid, start time).
pub(crate) fn spawn(
    settings: &Settings,
    owner: &str,
    protocol: Protocol,
    host: SocketAddr,
    target: SocketAddr,
) -> Result<(i32, u64), PublishError> {
    let io = |step| {
        move |source| PublishError::Proxy {
            step,
            host,
            protocol,
            source,
        }
    };
    let (mut status, write) = std::io::pipe().map_err(io("make the status pipe"))?;
    let mut cmd = Command::new(&settings.proxy_binary);
    cmd.args(args(protocol, host, target))
        .env(CONTAINER_ENV, owner)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let mut child = pier_sys::publish::spawn_with_fd3(&mut cmd, write.into())
        .map_err(io("start pier proxy"))?;
    let mut text = String::new();
    let read = status.read_to_string(&mut text);
    if read.is_err() || !text.starts_with("0\n") {
        let _ = child.kill();
        let _ = child.wait();
        let message = match read {
            Err(e) => e.to_string(),
            Ok(_) if text.is_empty() => "it exited without a status".to_string(),
            Ok(_) => text.trim_start_matches("1\n").trim().to_string(),
        };
        return Err(PublishError::ProxyStatus {
            host,
            protocol,
            message,
        });
    }
    let pid = child.id() as i32;
    let started = start_time(pid).ok_or_else(|| PublishError::ProxyStatus {
        host,
        protocol,
        message: format!("pid {pid} vanished right after starting"),
    })?;
    Ok((pid, started))
}

/// Field 22 of /proc/PID/stat (the comm field may hold spaces and parentheses).
fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(19)?.parse().ok()
}

/// Stops the child of a proxy entry, if it runs; waits until it is gone.
pub(crate) fn stop(
    settings: &Settings,
    protocol: Protocol,
    host: SocketAddr,
    target: SocketAddr,
    recorded: Option<(i32, u64)>,
) -> Result<(), PublishError> {
    let known = recorded.filter(|&(pid, started)| start_time(pid) == Some(started));
    let pid = match known {
        Some((pid, _)) => Some(pid),
        None => find(&settings.proxy_binary, &args(protocol, host, target)),
    };
    let Some(pid) = pid else {
        return Ok(());
    };
    let io = |step| {
        move |source| PublishError::Proxy {
            step,
            host,
            protocol,
            source,
        }
    };
    let pidfd = match pier_sys::pidfd::open(pid) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        other => other.map_err(io("open a pidfd"))?,
    };
    match pier_sys::pidfd::send_signal(&pidfd, libc::SIGTERM) {
        Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Ok(()),
        other => other.map_err(io("signal pier proxy"))?,
    }
    pier_sys::pidfd::wait_exited(&pidfd).map_err(io("wait for pier proxy"))?;
    // Reap it when it is our child; ECHILD (someone else's) is fine.
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
    Ok(())
}

/// The pid of a process running `binary` with exactly `args`.
fn find(binary: &Path, args: &[String]) -> Option<i32> {
    let mut want: Vec<u8> = Vec::new();
    for a in args {
        want.extend_from_slice(a.as_bytes());
        want.push(0);
    }
    let name = binary.file_name()?.to_string_lossy().into_owned();
    for proc in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(proc.path().join("cmdline")) else {
            continue;
        };
        let Some(first) = cmdline.iter().position(|&b| b == 0) else {
            continue;
        };
        let argv0 = String::from_utf8_lossy(&cmdline[..first]);
        if argv0.rsplit('/').next() == Some(name.as_str()) && cmdline[first + 1..] == want[..] {
            return Some(pid);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_start_time_is_read() {
        let me = std::process::id() as i32;
        assert!(start_time(me).is_some());
        assert_eq!(start_time(-1), None);
    }

    #[test]
    fn a_process_is_found_by_its_exact_command_line() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let found = find(Path::new("/bin/sleep"), &["30".to_string()]);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(found, Some(child.id() as i32));
    }

    #[test]
    fn wildcard_fronts_both_families_to_the_ipv4_address() {
        let target = Target {
            container_id: "c1".into(),
            addresses: vec!["198.18.2.2".parse().unwrap(), "2001:2::2".parse().unwrap()],
            bridge: None,
        };
        let pair = Pair {
            protocol: Protocol::Tcp,
            host_ip: None,
            host_port: 8080,
            container_port: 80,
        };
        let fronts = [Ipv4Addr::UNSPECIFIED.into(), Ipv6Addr::UNSPECIFIED.into()];
        let entries = entries_for(&pair, &target, &fronts).unwrap();
        let targets: Vec<SocketAddr> = entries
            .iter()
            .map(|e| match e {
                Entry::Proxy { target, .. } => *target,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            targets,
            vec!["198.18.2.2:80".parse::<SocketAddr>().unwrap(); 2]
        );
    }
}
