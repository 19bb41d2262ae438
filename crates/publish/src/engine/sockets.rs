//! Which host sockets hold a port, and which program owns them: the "bound by a host program"
//! half of a publish's conflict check.
//!
//! Theory of operation: a `NETLINK_SOCK_DIAG` dump (what `ss` uses) lists the sockets of the
//! calling thread's network namespace (the netlink socket is made by that thread; pier enters
//! namespaces per thread) with their local address and inode. A TCP socket holds its port when
//! it listens, and the dump asks for listeners only, so the kernel walks just its listening
//! hash (reading `/proc/net/tcp` walks the whole established hash, 2+ ms per read(2) here); a
//! UDP socket holds its port whenever it is bound (every state is asked for). The owner
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

/// TCP state LISTEN (include/net/tcp_states.h).
const TCP_LISTEN: u32 = 10;
/// `SOCK_DIAG_BY_FAMILY`, the request and answer type.
const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// Lengths of `struct nlmsghdr`, `struct inet_diag_req_v2` and `struct inet_diag_msg`.
const NLMSG_HDR: usize = 16;
const REQ_LEN: usize = 56;
const MSG_LEN: usize = 72;

/// The sockets of `protocol` holding a port in this thread's network namespace.
pub(crate) fn bound(protocol: Protocol) -> Result<Vec<Bound>, PublishError> {
    let (proto, states) = match protocol {
        Protocol::Tcp => (libc::IPPROTO_TCP, 1u32 << TCP_LISTEN),
        Protocol::Udp => (libc::IPPROTO_UDP, u32::MAX),
        Protocol::Sctp => return Ok(Vec::new()),
    };
    let mut out = Vec::new();
    for family in [libc::AF_INET, libc::AF_INET6] {
        dump(family as u8, proto as u8, states, &mut out).map_err(|source| PublishError::Read {
            path: "NETLINK_SOCK_DIAG".into(),
            source,
        })?;
    }
    Ok(out)
}

/// One `SOCK_DIAG_BY_FAMILY` dump of `family`/`proto` sockets in `states`, appended to `out`.
fn dump(family: u8, proto: u8, states: u32, out: &mut Vec<Bound>) -> std::io::Result<()> {
    use nix::sys::socket::{
        recv, send, socket, AddressFamily, MsgFlags, SockFlag, SockProtocol, SockType,
    };
    use std::os::fd::AsRawFd;
    let fd = socket(
        AddressFamily::Netlink,
        SockType::Raw,
        SockFlag::SOCK_CLOEXEC,
        SockProtocol::NetlinkSockDiag,
    )?;
    send(
        fd.as_raw_fd(),
        &request(family, proto, states),
        MsgFlags::empty(),
    )?;
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let n = recv(fd.as_raw_fd(), &mut buf, MsgFlags::empty())?;
        if n == 0 || !answers(&buf[..n], out)? {
            return Ok(());
        }
    }
}

/// `nlmsghdr` + `inet_diag_req_v2` asking for a dump (the socket id left zero).
fn request(family: u8, proto: u8, states: u32) -> Vec<u8> {
    let mut req = Vec::with_capacity(NLMSG_HDR + REQ_LEN);
    req.extend(((NLMSG_HDR + REQ_LEN) as u32).to_ne_bytes());
    req.extend(SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    req.extend(((libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16).to_ne_bytes());
    req.extend([0u8; 8]); // sequence, port id
    req.extend([family, proto, 0, 0]);
    req.extend(states.to_ne_bytes());
    req.resize(NLMSG_HDR + REQ_LEN, 0);
    req
}

/// Parses one datagram of answers into `out`; false once the dump is done.
fn answers(mut buf: &[u8], out: &mut Vec<Bound>) -> std::io::Result<bool> {
    let u32_at = |b: &[u8], i: usize| u32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    while buf.len() >= NLMSG_HDR {
        let len = (u32_at(buf, 0) as usize).clamp(NLMSG_HDR, buf.len());
        let kind = u16::from_ne_bytes([buf[4], buf[5]]);
        let body = &buf[NLMSG_HDR..len];
        match i32::from(kind) {
            libc::NLMSG_DONE => return Ok(false),
            libc::NLMSG_ERROR => {
                let errno = body.get(..4).map_or(0, |b| -(u32_at(b, 0) as i32));
                return Err(std::io::Error::from_raw_os_error(errno));
            }
            _ if kind == SOCK_DIAG_BY_FAMILY && body.len() >= MSG_LEN => {
                out.extend(parse_msg(body))
            }
            _ => {}
        }
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
    Ok(true)
}

/// The local address and inode of one `inet_diag_msg`.
fn parse_msg(msg: &[u8]) -> Option<Bound> {
    let port = u16::from_be_bytes([msg[4], msg[5]]);
    let ip = match i32::from(msg[0]) {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(msg[8], msg[9], msg[10], msg[11])),
        libc::AF_INET6 => {
            let v6 = Ipv6Addr::from(<[u8; 16]>::try_from(&msg[8..24]).ok()?);
            v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4)
        }
        _ => return None,
    };
    let inode = u32::from_ne_bytes(msg[68..72].try_into().ok()?);
    Some(Bound {
        local: SocketAddr::new(ip, port),
        inode: u64::from(inode),
    })
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
    fn diag_messages_parse_to_addresses() {
        let mut msg = [0u8; MSG_LEN];
        msg[0] = libc::AF_INET6 as u8;
        msg[4..6].copy_from_slice(&8080u16.to_be_bytes());
        msg[8..24].copy_from_slice(&"::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
        msg[68..72].copy_from_slice(&12345u32.to_ne_bytes());
        assert_eq!(
            parse_msg(&msg),
            Some(Bound {
                local: "127.0.0.1:8080".parse().unwrap(),
                inode: 12345
            })
        );
        msg[0] = 99;
        assert_eq!(parse_msg(&msg), None);
        let req = request(
            libc::AF_INET as u8,
            libc::IPPROTO_TCP as u8,
            1 << TCP_LISTEN,
        );
        assert_eq!(req.len(), 72);
        assert_eq!(req[16..18], [libc::AF_INET as u8, libc::IPPROTO_TCP as u8]);
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
