//! nat engine: kernel DNAT through pier-net's `inet pier` nftables table, for remote clients
//! (their source address preserved) and for host clients of non-loopback addresses.
//!
//! Theory of operation: the table (verdict-free DNAT maps keyed by address, protocol and port,
//! so a lookup costs the same for 1 or 10,000 ports) is made by network creation, or by the
//! first publish that finds it missing; making the engine only checks that `nft` is installed.
//! A publish is map elements, commented with the container id, added in ONE `nft` transaction
//! (a 1,000-port range included) together with idempotent adds registering the target's bridge
//! subnets (hairpin masquerade, isolation between bridges; Docker's FORWARD accept rules were
//! added when the network was made). A key another container published fails the
//! transaction with "File exists": only then is the table listed, to name that owner. What
//! kernel NAT cannot do is refused here and left to the ebpf engine or a proxy by `auto`:
//! loopback fronts (DNAT of 127.0.0.1 needs route_localnet, the hole Docker shipped) and a
//! front of the other family (no NAT64). Removal adds then deletes the recorded elements in
//! one transaction ([`Table::withdraw`]), so it is idempotent without listing.
//!
//! Section order (the same in every engine file): engine, plan, apply, remove.
//! Privileges: CAP_NET_ADMIN in the calling thread's network namespace.
//! Tests: crates/publish/tests/priv_engines*.rs; the table itself in pier-net's priv_nft.rs.
use std::net::IpAddr;

use pier_net::nft::{self, Table};
use pier_net::Subnet;

use super::plan::{self, Pair};
use super::{Engine, Entry, PublishError, Settings, Target};
use crate::Protocol;

const ENGINE: &str = "nat";

/// The nat engine (`nft` known to be installed).
#[derive(Debug)]
pub(crate) struct Nat {
    settings: Settings,
}

impl Nat {
    pub(crate) fn new(settings: &Settings) -> Result<Self, PublishError> {
        available()?;
        Ok(Self {
            settings: settings.clone(),
        })
    }
}

/// Fails when the `nft` binary is not installed (looked up, not run).
pub(crate) fn available() -> Result<(), PublishError> {
    match nft::installed() {
        true => Ok(()),
        false => Err(PublishError::Unavailable {
            engine: ENGINE,
            why: "the nft binary is not installed (install nftables)".to_string(),
        }),
    }
}

impl Engine for Nat {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn entries(&self, target: &Target, pairs: &[Pair]) -> Result<Vec<Entry>, PublishError> {
        let mut entries = Vec::new();
        for pair in pairs {
            entries.extend(entries_for(pair, target, Strict::Refuse)?);
        }
        Ok(entries)
    }
}

/// What to do with a front kernel NAT cannot serve: refuse (the nat engine), or skip it
/// (`auto`, which serves it otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Strict {
    Refuse,
    Skip,
}

/// The elements of one pair: the wildcard once per container family, a specific address once.
pub(crate) fn entries_for(
    pair: &Pair,
    target: &Target,
    strict: Strict,
) -> Result<Vec<Entry>, PublishError> {
    let entry = |host: Option<IpAddr>, container: IpAddr| Entry::Nft {
        protocol: pair.protocol,
        host,
        host_port: pair.host_port,
        container,
        container_port: pair.container_port,
    };
    let unsupported = |why| {
        let what = format!("{}:{}", plan::show(pair.host_ip), pair.host_port);
        match strict {
            Strict::Refuse => Err(PublishError::Unsupported {
                engine: ENGINE,
                what,
                why,
            }),
            Strict::Skip => Ok(Vec::new()),
        }
    };
    match pair.host_ip.filter(|ip| !ip.is_unspecified()) {
        None => {
            let mut out = Vec::new();
            for family in [true, false] {
                if let Some(&c) = target.addresses.iter().find(|a| a.is_ipv4() == family) {
                    out.push(entry(None, c));
                }
            }
            if out.is_empty() {
                return Err(PublishError::NoAddress {
                    engine: ENGINE,
                    container: target.container_id.clone(),
                });
            }
            Ok(out)
        }
        Some(ip) if ip.is_loopback() => unsupported(
            "kernel NAT cannot serve loopback without route_localnet (use auto or proxy)",
        ),
        Some(ip) => match target
            .addresses
            .iter()
            .find(|a| a.is_ipv4() == ip.is_ipv4())
        {
            Some(&c) => Ok(vec![entry(Some(ip), c)]),
            None => {
                unsupported("kernel NAT cannot translate between IPv4 and IPv6 (use auto or proxy)")
            }
        },
    }
}

pub(crate) fn protocol_of(proto: nft::Proto) -> Protocol {
    match proto {
        nft::Proto::Tcp => Protocol::Tcp,
        nft::Proto::Udp => Protocol::Udp,
        nft::Proto::Sctp => Protocol::Sctp,
    }
}

fn proto_of(protocol: Protocol) -> nft::Proto {
    match protocol {
        Protocol::Tcp => nft::Proto::Tcp,
        Protocol::Udp => nft::Proto::Udp,
        Protocol::Sctp => nft::Proto::Sctp,
    }
}

/// The nft mapping of an `Entry::Nft`.
pub(crate) fn mapping(entry: &Entry) -> Option<nft::Mapping> {
    match *entry {
        Entry::Nft {
            protocol,
            host,
            host_port,
            container,
            container_port,
        } => Some(nft::Mapping {
            host,
            proto: proto_of(protocol),
            host_port,
            container,
            container_port,
        }),
        _ => None,
    }
}

fn nft_err(step: &'static str) -> impl Fn(nft::NftError) -> PublishError {
    move |source| PublishError::Nft { step, source }
}

/// Adds the elements and registers the target's bridge (its subnets read from its addresses)
/// in one transaction; a key taken meanwhile is reported naming its owner.
pub(crate) fn apply_entries(
    target: &Target,
    mappings: &[nft::Mapping],
) -> Result<(), PublishError> {
    if mappings.is_empty() {
        return Ok(());
    }
    let subnets = match &target.bridge {
        Some(bridge) => bridge_subnets(bridge)?,
        None => Vec::new(),
    };
    let bridge = target.bridge.as_deref().map(|b| (b, subnets.as_slice()));
    match Table.publish_on(mappings, &target.container_id, bridge) {
        Err(e) if e.is_exists() => Err(taken(mappings).unwrap_or(PublishError::Nft {
            step: "publish",
            source: e,
        })),
        other => other.map_err(nft_err("publish")),
    }
}

/// The first of `mappings` whose key the table holds with another value, named with its owner.
fn taken(mappings: &[nft::Mapping]) -> Option<PublishError> {
    let listed = Table.published().ok()?;
    let key = |m: &nft::Mapping| (m.host, m.proto, m.host_port, m.container.is_ipv4());
    mappings.iter().find_map(|m| {
        let (_, owner) = listed.iter().find(|(l, _)| key(l) == key(m) && l != m)?;
        Some(PublishError::Published {
            port: m.host_port,
            protocol: protocol_of(m.proto),
            host: plan::show(m.host),
            owner: owner.clone(),
        })
    })
}

/// The subnets of `bridge`'s addresses (none when it does not exist here).
fn bridge_subnets(bridge: &str) -> Result<Vec<Subnet>, PublishError> {
    let net_err = |source| PublishError::Net {
        step: "read the bridge's subnets",
        source,
    };
    let mut nl = pier_net::Netlink::open().map_err(net_err)?;
    let Some(index) = nl.link_index(bridge).map_err(net_err)? else {
        return Ok(Vec::new());
    };
    let addrs = nl.addresses(Some(index)).map_err(net_err)?;
    Ok(addrs
        .into_iter()
        .filter(|(_, ip, _)| !matches!(ip, IpAddr::V6(v6) if v6.is_unicast_link_local()))
        .filter_map(|(_, ip, prefix)| Subnet::new(network(ip, prefix), prefix).ok())
        .collect())
}

/// `ip` with its host bits cleared.
fn network(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

/// Deletes the elements of `mappings` that exist with their recorded value (no listing on
/// the usual path; without `nft` there is nothing to delete).
pub(crate) fn remove_entries(mappings: &[nft::Mapping]) -> Result<(), PublishError> {
    if mappings.is_empty() {
        return Ok(());
    }
    match Table.withdraw(mappings) {
        Err(nft::NftError::Spawn { .. }) => Ok(()),
        other => other.map_err(nft_err("unpublish")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::plan::fixtures::{self, target};

    fn pair(host_ip: Option<&str>) -> Pair {
        fixtures::pair(Protocol::Udp, host_ip, (5353, 53))
    }

    #[test]
    fn wildcard_is_one_element_per_container_family() {
        let dual = target(&["198.18.2.2", "2001:2::2"]);
        let entries = entries_for(&pair(None), &dual, Strict::Refuse).unwrap();
        assert_eq!(entries.len(), 2);
        assert!(matches!(
            entries[1],
            Entry::Nft {
                container: IpAddr::V6(_),
                host: None,
                ..
            }
        ));
    }

    #[test]
    fn loopback_and_cross_family_fronts_are_refused_or_skipped() {
        let v4 = target(&["198.18.2.2"]);
        for front in ["127.0.0.1", "::1", "2001:2::1"] {
            assert!(
                entries_for(&pair(Some(front)), &v4, Strict::Refuse).is_err(),
                "{front}"
            );
            assert!(entries_for(&pair(Some(front)), &v4, Strict::Skip)
                .unwrap()
                .is_empty());
        }
        assert_eq!(
            entries_for(&pair(Some("198.18.1.1")), &v4, Strict::Refuse)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn networks_clear_host_bits() {
        assert_eq!(
            network("198.18.2.1".parse().unwrap(), 24),
            "198.18.2.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network("2001:2::1".parse().unwrap(), 64),
            "2001:2::".parse::<IpAddr>().unwrap()
        );
    }
}
