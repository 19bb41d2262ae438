//! The planning every engine shares: `-p` mappings to (host address, host port, container port)
//! pairs, host ports picked where none was given, and every port checked against what is
//! already published (by any engine) or bound by a host program.
//!
//! Theory of operation: what is taken is read once per plan from the three places a port can be
//! held: pier-bpf's pinned map and pier-net's nft maps (each entry names the container that
//! published it) and the host's sockets (`sockets.rs`: listening TCP, bound UDP; a `pier proxy`
//! names its container in its environment). Listing the nft maps costs an `nft` spawn
//! (milliseconds), so an engine whose ports are all in the pinned map (auto with ebpf) skips it
//! unless it must pick a port; a key a nat-mode container holds then fails the apply, which
//! names the owner (nat.rs). Two holdings of one protocol and port overlap when either is on
//! every address or both are on the same one. A port to pick is searched from a varying offset
//! in the namespace's ephemeral range, so concurrent plans rarely collide (and an apply that
//! does collide fails cleanly: map and element adds refuse an existing key).
//!
//! Privileges: root (the pinned map, nft, other processes' fds). Tests: below; priv_engines.rs.
use std::net::IpAddr;

use pier_net::nft::{NftError, Table};

use super::sockets::{self, Bound};
use super::{PublishError, Published, Settings, Target};
use crate::{PortMapping, PortRange, Protocol};

/// One host port forwarded to one container port on one host address (`None`: every one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pair {
    pub protocol: Protocol,
    pub host_ip: Option<IpAddr>,
    pub host_port: u16,
    pub container_port: u16,
}

/// A port somebody already holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    protocol: Protocol,
    host_ip: Option<IpAddr>,
    port: u16,
    owner: Holder,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    Container(String),
    Socket(u64),
}

/// Resolves `mappings` for `target` into pairs, checking each against what is held; the nft
/// maps are read when `list_nft` or a port is to be picked.
pub(crate) fn resolve(
    settings: &Settings,
    target: &Target,
    mappings: &[PortMapping],
    list_nft: bool,
) -> Result<(Vec<Published>, Vec<Pair>), PublishError> {
    let picks = mappings.iter().any(|m| m.host_ports.is_none());
    let mut held = published(settings, list_nft || picks)?;
    for protocol in [Protocol::Tcp, Protocol::Udp] {
        if mappings.iter().any(|m| m.protocol == protocol) {
            held.extend(
                sockets::bound(protocol)?
                    .into_iter()
                    .map(|b| socket(protocol, b)),
            );
        }
    }
    let range = ephemeral_range();
    let mut published_out = Vec::new();
    let mut pairs = Vec::new();
    for m in mappings {
        let mut host_ports = Vec::new();
        for (h, c) in m.pairs() {
            let port = match h {
                0 => pick(&held, m, c, range)?,
                h => check(&held, m.protocol, m.host_ip, h).map(|()| h)?,
            };
            held.push(Held {
                protocol: m.protocol,
                host_ip: m.host_ip,
                port,
                owner: Holder::Container(target.container_id.clone()),
            });
            host_ports.push(port);
            pairs.push(Pair {
                protocol: m.protocol,
                host_ip: m.host_ip,
                host_port: port,
                container_port: c,
            });
        }
        published_out.push(Published {
            mapping: *m,
            host_ports,
        });
    }
    Ok((published_out, pairs))
}

/// The first free port from a varying offset in `range`.
fn pick(
    held: &[Held],
    m: &PortMapping,
    container_port: u16,
    range: PortRange,
) -> Result<u16, PublishError> {
    let len = range.len();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id();
    for i in 0..len {
        let port = range.start() + ((seed.wrapping_add(i)) % len) as u16;
        if check(held, m.protocol, m.host_ip, port).is_ok() {
            return Ok(port);
        }
    }
    Err(PublishError::NoFreePort {
        protocol: m.protocol,
        host: show(m.host_ip),
        container_port,
        first: range.start(),
        last: range.end(),
    })
}

/// Fails naming the owner when `port` overlaps something held.
fn check(
    held: &[Held],
    protocol: Protocol,
    ip: Option<IpAddr>,
    port: u16,
) -> Result<(), PublishError> {
    let Some(h) = held
        .iter()
        .find(|h| h.protocol == protocol && h.port == port && overlap(h.host_ip, ip))
    else {
        return Ok(());
    };
    let host = show(ip);
    Err(match &h.owner {
        Holder::Container(owner) => PublishError::Published {
            port,
            protocol,
            host,
            owner: owner.clone(),
        },
        Holder::Socket(inode) => match sockets::owner(*inode) {
            Some(sockets::Owner {
                container: Some(owner),
                ..
            }) => PublishError::Published {
                port,
                protocol,
                host,
                owner,
            },
            Some(o) => PublishError::Bound {
                port,
                protocol,
                host,
                program: o.program,
                pid: o.pid,
            },
            None => PublishError::BoundUnknown {
                port,
                protocol,
                host,
                inode: *inode,
            },
        },
    })
}

fn overlap(a: Option<IpAddr>, b: Option<IpAddr>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b || a.is_unspecified() || b.is_unspecified(),
        _ => true,
    }
}

pub(crate) fn show(ip: Option<IpAddr>) -> String {
    ip.map_or("every address".to_string(), |ip| ip.to_string())
}

fn socket(protocol: Protocol, b: Bound) -> Held {
    let ip = b.local.ip();
    Held {
        protocol,
        host_ip: (!ip.is_unspecified()).then_some(ip),
        port: b.local.port(),
        owner: Holder::Socket(b.inode),
    }
}

/// Everything published in the pinned map and, with `list_nft`, the nft table (neither
/// existing is fine).
fn published(settings: &Settings, list_nft: bool) -> Result<Vec<Held>, PublishError> {
    let mut out = Vec::new();
    if settings.bpf_pin_dir.join(pier_bpf::PUBLISH_MAP).exists() {
        let publisher = pier_bpf::Publisher::open(&settings.bpf_pin_dir).map_err(|source| {
            PublishError::Bpf {
                step: "open the publish map",
                source,
            }
        })?;
        let entries = publisher.published().map_err(|source| PublishError::Bpf {
            step: "list published ports",
            source,
        })?;
        out.extend(entries.into_iter().map(|(m, owner)| Held {
            protocol: match m.proto {
                pier_bpf::Proto::Tcp => Protocol::Tcp,
                pier_bpf::Proto::Udp => Protocol::Udp,
            },
            host_ip: (!m.host.ip().is_unspecified()).then_some(m.host.ip()),
            port: m.host.port(),
            owner: Holder::Container(owner),
        }));
    }
    if !list_nft {
        return Ok(out);
    }
    let elements = match Table.published() {
        Err(NftError::Spawn { .. }) => Vec::new(),
        other => other.map_err(|source| PublishError::Nft {
            step: "list published ports",
            source,
        })?,
    };
    out.extend(elements.into_iter().map(|(m, owner)| Held {
        protocol: super::nat::protocol_of(m.proto),
        host_ip: m.host,
        port: m.host_port,
        owner: Holder::Container(owner),
    }));
    Ok(out)
}

/// The namespace's ephemeral port range (`net.ipv4.ip_local_port_range`), Linux's default
/// when unreadable.
fn ephemeral_range() -> PortRange {
    let text =
        std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    let mut words = text.split_whitespace().map(str::parse::<u16>);
    match (words.next(), words.next()) {
        (Some(Ok(a)), Some(Ok(b))) => PortRange::new(a, b),
        _ => None,
    }
    .or(PortRange::new(32768, 60999))
    .expect("a valid default range")
}

/// Targets and pairs for the engines' unit tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;

    /// A container `c1` with `addrs`, on no bridge.
    pub(crate) fn target(addrs: &[&str]) -> Target {
        Target {
            container_id: "c1".into(),
            addresses: addrs.iter().map(|a| a.parse().unwrap()).collect(),
            bridge: None,
        }
    }

    /// `[host_ip:]host_port:container_port/protocol`, resolved.
    pub(crate) fn pair(protocol: Protocol, host_ip: Option<&str>, ports: (u16, u16)) -> Pair {
        Pair {
            protocol,
            host_ip: host_ip.map(|h| h.parse().unwrap()),
            host_port: ports.0,
            container_port: ports.1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(ip: Option<&str>, port: u16, owner: Holder) -> Held {
        Held {
            protocol: Protocol::Tcp,
            host_ip: ip.map(|i| i.parse().unwrap()),
            port,
            owner,
        }
    }

    #[test]
    fn a_published_port_names_its_container() {
        let taken = [held(
            Some("198.18.0.1"),
            8080,
            Holder::Container("web".into()),
        )];
        let ip = Some("198.18.0.1".parse().unwrap());
        let err = check(&taken, Protocol::Tcp, ip, 8080).unwrap_err();
        assert_eq!(
            err.to_string(),
            "port 8080/tcp on 198.18.0.1 is already published by container web"
        );
        assert!(check(&taken, Protocol::Udp, ip, 8080).is_ok());
        assert!(check(
            &taken,
            Protocol::Tcp,
            Some("198.18.0.2".parse().unwrap()),
            8080
        )
        .is_ok());
        assert!(
            check(&taken, Protocol::Tcp, None, 8080).is_err(),
            "wildcard overlaps"
        );
    }

    #[test]
    fn picking_skips_held_ports() {
        let range = PortRange::new(40000, 40002).unwrap();
        let taken = [
            held(None, 40000, Holder::Container("a".into())),
            held(None, 40001, Holder::Container("b".into())),
        ];
        let m: PortMapping = "80".parse().unwrap();
        assert_eq!(pick(&taken, &m, 80, range).unwrap(), 40002);
        let all = [
            taken[0].clone(),
            taken[1].clone(),
            held(None, 40002, Holder::Container("c".into())),
        ];
        let err = pick(&all, &m, 80, range).unwrap_err();
        assert!(
            matches!(
                err,
                PublishError::NoFreePort {
                    first: 40000,
                    last: 40002,
                    ..
                }
            ),
            "{err}"
        );
    }
}
