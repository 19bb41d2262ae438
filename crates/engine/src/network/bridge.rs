//! The bridge driver: one Linux bridge per network (`pier0` for the default network,
//! `pier-<8 hex of the id>` for the others), one veth pair per container.
//!
//! Theory of operation: creating the network makes the bridge, puts the gateway address(es) on
//! it, fixes its MAC address (derived from the network id; a bridge left to itself takes its
//! lowest port's MAC, so the gateway's MAC would change under the containers' ARP caches as
//! containers come and go), brings it up, turns on IP forwarding in the host namespace (as Docker does) and registers
//! the subnets and bridge in nftables (pier-net's `inet pier` table: egress masquerade, a bridge
//! reaches only its own subnet unless DNATed, and accept rules in Docker's FORWARD chain where
//! its policy is drop); a family whose gateway mode is `routed` (Docker's
//! `com.docker.network.bridge.gateway_mode_ipv4|ipv6=routed`, kept in the record's options
//! before anything is made) is also marked routed there: no masquerade, reachable by routing
//! from outside, still isolated from the other networks. A container's veth is one netlink request: the host side
//! `veth<8 of container id><3 of network id>` born up and enslaved, the peer born inside the
//! container's netns as `eth0`; then hairpin mode goes on so a container can reach itself
//! through a published host port. If the bridge is missing at
//! attach (the host rebooted, state survived), its host objects are made again first. Removing
//! the network deletes the bridge (its ports go with it), unmarks a routed subnet and
//! unregisters the subnets or, with the last pier bridge network, deletes pier's nftables table.
//! Privileges: CAP_NET_ADMIN; nft binary for the table. Tests: crates/engine/tests/priv_network.rs.
use std::fs;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use nix::errno::Errno;
use pier_net::ipam::Ipam;
use pier_net::nft::Table;
use pier_net::{NetError, Netlink};

use super::driver::{refuse, NetworkDriver};
use super::{
    Attachment, Driver, Network, NetworkError, NetworkSpec, DEFAULT_BRIDGE, DEFAULT_NETWORK,
};

/// Linux bridges with veth ports.
#[derive(Debug)]
pub(super) struct Bridge;

const FORWARDING: [(&str, bool); 2] = [
    ("/proc/sys/net/ipv4/ip_forward", false),
    ("/proc/sys/net/ipv6/conf/all/forwarding", true),
];

/// Whether a netlink error is "already exists" (tolerated when re-making host objects).
fn exists(error: &NetError) -> bool {
    error.errno() == Some(Errno::EEXIST as i32)
}

impl NetworkDriver for Bridge {
    fn check(&self, spec: &NetworkSpec, _nl: &mut Netlink) -> Result<(), NetworkError> {
        refuse(spec.parent.is_some(), "--parent", "bridge")?;
        refuse(spec.ipvlan_mode.is_some(), "--ipvlan-mode", "bridge")?;
        refuse(spec.host_shim, "--host-shim", "bridge")
    }

    fn interface(&self, spec: &NetworkSpec, id: &str) -> String {
        match spec.name == DEFAULT_NETWORK {
            true => DEFAULT_BRIDGE.to_string(),
            false => format!("pier-{}", &id[..8]),
        }
    }

    fn create(
        &self,
        network: &Network,
        nl: &mut Netlink,
        _ipam: &Ipam,
    ) -> Result<(), NetworkError> {
        let bridge = &network.interface;
        let created = match nl.create_bridge(bridge) {
            Ok(()) => true,
            Err(e) if exists(&e) => false,
            Err(e) => return Err(NetworkError::net("create the bridge")(e)),
        };
        let configured = configure(network, nl);
        if configured.is_err() && created {
            let _ = nl.delete_link_named(bridge);
        }
        configured
    }

    fn remove(&self, network: &Network, others: &[Network], nl: &mut Netlink) -> Vec<NetworkError> {
        let mut errors = Vec::new();
        let deleted = nl.delete_link_named(&network.interface);
        errors.extend(deleted.err().map(NetworkError::net("delete the bridge")));
        if !others.iter().any(|n| n.driver == Driver::Bridge) {
            let torn = Table.teardown();
            errors.extend(torn.err().map(|source| NetworkError::Nft {
                step: "remove pier's nftables table with its last bridge network",
                source,
            }));
            return errors;
        }
        for (subnet, routed) in network.routed_subnets() {
            if routed {
                let unrouted = Table.set_routed(subnet, false);
                errors.extend(unrouted.err().map(|source| NetworkError::Nft {
                    step: "unmark the routed network in nftables",
                    source,
                }));
            }
            let removed = Table.remove_network(subnet, &network.interface);
            errors.extend(removed.err().map(|source| NetworkError::Nft {
                step: "unregister the network from nftables",
                source,
            }));
        }
        errors
    }

    fn host_link(&self, network: &Network, container_id: &str) -> Option<String> {
        Some(veth_name(container_id, &network.id))
    }

    fn link(
        &self,
        network: &Network,
        attachment: &Attachment,
        nl: &mut Netlink,
        netns: BorrowedFd<'_>,
    ) -> Result<(), NetworkError> {
        let bridge = match bridge_index(nl, &network.interface)? {
            Some(index) => index,
            None => {
                configure_again(network, nl)?;
                bridge_index(nl, &network.interface)?.ok_or_else(|| NetworkError::Vanished {
                    step: "attach to the bridge",
                    what: "bridge",
                    name: network.interface.clone(),
                })?
            }
        };
        let host = attachment.host_link.as_deref().unwrap_or_default();
        let peer = &attachment.container_link;
        nl.create_bridge_port(host, peer, netns, bridge)
            .map_err(NetworkError::net("create the container's veth pair"))?;
        nl.set_hairpin(host).map_err(NetworkError::net(
            "set hairpin mode on the container's bridge port",
        ))
    }
}

fn bridge_index(nl: &mut Netlink, bridge: &str) -> Result<Option<u32>, NetworkError> {
    nl.link_index(bridge)
        .map_err(NetworkError::net("look up the bridge"))
}

/// Re-makes a missing bridge's host objects (a concurrent attach may be doing the same).
fn configure_again(network: &Network, nl: &mut Netlink) -> Result<(), NetworkError> {
    match nl.create_bridge(&network.interface) {
        Err(e) if !exists(&e) => return Err(NetworkError::net("create the bridge again")(e)),
        _ => {}
    }
    configure(network, nl)
}

/// Gateway addresses, up, forwarding and nftables for the network's bridge (idempotent).
fn configure(network: &Network, nl: &mut Netlink) -> Result<(), NetworkError> {
    let bridge = &network.interface;
    let index = bridge_index(nl, bridge)?.ok_or_else(|| NetworkError::Vanished {
        step: "configure the bridge",
        what: "bridge",
        name: bridge.clone(),
    })?;
    let gateways = [
        (Some(network.gateway), Some(network.subnet)),
        (network.gateway6, network.subnet6),
    ];
    for (gateway, subnet) in gateways {
        let (Some(gateway), Some(subnet)) = (gateway, subnet) else {
            continue;
        };
        match nl.add_address(index, gateway, subnet.prefix()) {
            Err(e) if !exists(&e) => return Err(NetworkError::net("address the bridge")(e)),
            _ => {}
        }
    }
    nl.set_mac(index, bridge_mac(&network.id))
        .map_err(NetworkError::net("set the bridge's MAC address"))?;
    nl.set_up(index, true)
        .map_err(NetworkError::net("bring the bridge up"))?;
    enable_forwarding(network.subnet6.is_some())?;
    let nft = |step| move |source| NetworkError::Nft { step, source };
    Table
        .ensure()
        .map_err(nft("create pier's nftables table"))?;
    for (subnet, routed) in network.routed_subnets() {
        Table
            .add_network(subnet, bridge)
            .map_err(nft("register the network in nftables"))?;
        if routed {
            Table
                .set_routed(subnet, true)
                .map_err(nft("mark the routed network in nftables"))?;
        }
    }
    Ok(())
}

/// Turns on IPv4 (and, for IPv6 networks, IPv6) forwarding in this namespace.
fn enable_forwarding(ipv6: bool) -> Result<(), NetworkError> {
    for (path, v6) in FORWARDING {
        if v6 && !ipv6 || fs::read_to_string(path).is_ok_and(|v| v.trim() == "1") {
            continue;
        }
        fs::write(path, "1").map_err(|source| NetworkError::Sysctl {
            path: PathBuf::from(path),
            source,
        })?;
    }
    Ok(())
}

/// The bridge's fixed MAC address: locally administered unicast (02:…) with five bytes of the
/// network id, so it never follows its ports and is the same when the bridge is remade.
fn bridge_mac(network_id: &str) -> [u8; 6] {
    let mut mac = [0x02, 0, 0, 0, 0, 0];
    for (i, byte) in mac.iter_mut().skip(1).enumerate() {
        let hex = network_id.get(2 * i..2 * i + 2).unwrap_or("00");
        *byte = u8::from_str_radix(hex, 16).unwrap_or(0);
    }
    mac
}

/// `veth` + 8 characters of the container id + 3 of the network id: 15, the kernel's limit.
fn veth_name(container_id: &str, network_id: &str) -> String {
    let short = |id: &str, n: usize| -> String {
        id.chars()
            .filter(char::is_ascii_alphanumeric)
            .map(|c| c.to_ascii_lowercase())
            .take(n)
            .collect()
    };
    format!("veth{}{}", short(container_id, 8), short(network_id, 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn veth_names_fit_the_kernel_limit_and_differ_per_network() {
        let id = "0123456789abcdef0123456789abcdef";
        let a = veth_name(id, "abc999");
        assert_eq!(a, "veth01234567abc");
        assert_eq!(a.len(), 15);
        assert_ne!(a, veth_name(id, "abd999"));
        assert_eq!(veth_name("Web_1", "f00"), "vethweb1f00");
    }

    #[test]
    fn bridge_macs_are_local_unicast_from_the_network_id() {
        assert_eq!(
            bridge_mac("a1b2c3d4e5f6"),
            [0x02, 0xa1, 0xb2, 0xc3, 0xd4, 0xe5]
        );
        assert_eq!(bridge_mac("zz"), [0x02, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn bridge_names_are_pier0_for_the_default_network_else_from_the_id() {
        let id = "deadbeef00112233";
        let default = NetworkSpec {
            name: DEFAULT_NETWORK.into(),
            ..NetworkSpec::default()
        };
        assert_eq!(Bridge.interface(&default, id), "pier0");
        let user = NetworkSpec {
            name: "n1".into(),
            ..NetworkSpec::default()
        };
        assert_eq!(Bridge.interface(&user, id), "pier-deadbeef");
    }
}
