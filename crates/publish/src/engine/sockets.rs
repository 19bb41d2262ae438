//! Which host sockets hold a port, and which program owns them: the "bound by a host program"
//! half of a publish's conflict check.
//!
//! Theory of operation: `/proc/thread-self/net/{tcp,tcp6,udp,udp6}` list the sockets of the
//! calling thread's network namespace (not `/proc/net`, which follows the process's first
//! thread: pier enters namespaces per thread) with their local address, state and inode.
//! A TCP socket holds its port when it listens; a UDP socket whenever it is bound. The owner
//! of an inode is found by reading the `/proc/PID/fd` links (`socket:[INODE]`) of every process,
//! only when there is a conflict to report. A `pier proxy` names the container it forwards for
//! in its environment (`PIER_CONTAINER_ID`), so its port is reported as published, not bound.
//!
//! Privileges: root to read other users' fd tables. Tests: below; conflicts in priv_engines.rs.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use super::PublishError;
use crate::Protocol;

/// The environment variable naming the container a `pier proxy` child forwards for.
pub(crate) const CONTAINER_ENV: &str = "PIER_CONTAINER_ID";

/// A socket holding a local address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bound {
    pub local: SocketAddr,
    pub inode: u64,
}

/// TCP state LISTEN in /proc/net/tcp.
const TCP_LISTEN: &str = "0A";

/// The sockets of `protocol` holding a port in this thread's network namespace.
pub(crate) fn bound(protocol: Protocol) -> Result<Vec<Bound>, PublishError> {
    let (files, listen_only) = match protocol {
        Protocol::Tcp => (["tcp", "tcp6"], true),
        Protocol::Udp => (["udp", "udp6"], false),
        Protocol::Sctp => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for file in files {
        let path = Path::new("/proc/thread-self/net").join(file);
        let text = match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            other => other.map_err(|source| PublishError::Read { path, source })?,
        };
        out.extend(
            text.lines()
                .skip(1)
                .filter_map(|l| parse_line(l, listen_only)),
        );
    }
    Ok(out)
}

/// `  0: 0100007F:1F90 00000000:0000 0A ... inode`, fields split by spaces.
fn parse_line(line: &str, listen_only: bool) -> Option<Bound> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, state, inode) = (fields.get(1)?, fields.get(3)?, fields.get(9)?);
    if listen_only && *state != TCP_LISTEN {
        return None;
    }
    let (addr, port) = local.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    Some(Bound {
        local: SocketAddr::new(parse_addr(addr)?, port),
        inode: inode.parse().ok()?,
    })
}

/// The kernel prints addresses as host-order 32-bit words in hex.
fn parse_addr(hex: &str) -> Option<IpAddr> {
    let word = |i: usize| u32::from_str_radix(hex.get(i * 8..i * 8 + 8)?, 16).ok();
    match hex.len() {
        8 => Some(IpAddr::V4(Ipv4Addr::from(word(0)?.to_ne_bytes()))),
        32 => {
            let mut octets = [0u8; 16];
            for i in 0..4 {
                octets[i * 4..i * 4 + 4].copy_from_slice(&word(i)?.to_ne_bytes());
            }
            let v6 = Ipv6Addr::from(octets);
            Some(v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4))
        }
        _ => None,
    }
}

/// Who holds a socket inode: (pid, comm, the container of a `pier proxy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    pub pid: i32,
    pub program: String,
    pub container: Option<String>,
}

/// The process holding socket `inode`, if one is visible.
pub(crate) fn owner(inode: u64) -> Option<Owner> {
    let link = format!("socket:[{inode}]");
    for proc in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = proc.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(proc.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link.as_str()));
        if holds {
            let program = std::fs::read_to_string(proc.path().join("comm")).unwrap_or_default();
            return Some(Owner {
                pid,
                program: program.trim().to_string(),
                container: container_of(&proc.path()),
            });
        }
    }
    None
}

/// The `PIER_CONTAINER_ID` of the process at `/proc/PID`, if set.
fn container_of(proc: &Path) -> Option<String> {
    let environ = std::fs::read(proc.join("environ")).ok()?;
    let prefix = format!("{CONTAINER_ENV}=");
    environ
        .split(|&b| b == 0)
        .filter_map(|v| std::str::from_utf8(v).ok())
        .find_map(|v| v.strip_prefix(&prefix).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_lines_parse_to_addresses() {
        let v4 = "   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 12345 1";
        assert_eq!(
            parse_line(v4, true),
            Some(Bound {
                local: "127.0.0.1:8080".parse().unwrap(),
                inode: 12345
            })
        );
        let established = v4.replace(" 0A ", " 01 ");
        assert_eq!(parse_line(&established, true), None);
        assert!(parse_line(&established, false).is_some());
        assert_eq!(
            parse_addr("00000000000000000000000001000000"),
            Some("::1".parse().unwrap())
        );
        assert_eq!(
            parse_addr("0000000000000000FFFF00000100007F"),
            Some("127.0.0.1".parse().unwrap())
        );
    }

    #[test]
    fn our_own_listener_is_found_with_its_owner() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let found = bound(Protocol::Tcp).unwrap();
        let mine = found
            .iter()
            .find(|b| b.local.port() == port)
            .expect("listed");
        let owner = owner(mine.inode).expect("owner found");
        assert_eq!(owner.pid, std::process::id() as i32);
        assert_eq!(owner.container, None);
    }
}
