//! The macvlan driver (bridge mode): each container gets its own MAC address on a shared parent
//! link, as a separate host on the parent's LAN.
//!
//! Theory of operation: the container's `eth0` is a macvlan of the parent created directly inside
//! the container's netns (one request, never moved or renamed), so there is no host-side link to
//! record: it vanishes with the namespace. Known limitation of macvlan: the parent itself cannot
//! talk to its macvlan children, so the host cannot reach its containers. `--host-shim` works
//! around it as Docker's documentation does: a host-side macvlan `pshim<8 of the id>` on the same
//! parent with one address of the subnet (an IPAM lease owned by `pier-host-shim`) as a /32 and
//! a route to the subnet through it; it is removed with the network.
//! Privileges: CAP_NET_ADMIN. Tests: crates/engine/tests/priv_network.rs.
use std::net::IpAddr;
use std::os::fd::BorrowedFd;

use pier_net::ipam::{Ipam, Range};
use pier_net::{Netlink, Route};

use super::driver::{
    parent_index, refuse, refuse_gateway_modes, required_parent, sublink, NetworkDriver,
};
use super::{Attachment, Network, NetworkError, NetworkSpec, HOST_SHIM_OWNER};

/// macvlan sublinks in bridge mode.
#[derive(Debug)]
pub(super) struct Macvlan;

/// The host shim's link name for the network id `id`.
pub(super) fn shim_name(id: &str) -> String {
    format!("pshim{}", &id[..8])
}

impl NetworkDriver for Macvlan {
    fn check(&self, spec: &NetworkSpec, nl: &mut Netlink) -> Result<(), NetworkError> {
        refuse(spec.ipvlan_mode.is_some(), "--ipvlan-mode", "macvlan")?;
        refuse_gateway_modes(spec, "macvlan")?;
        parent_index(nl, required_parent(spec, "macvlan")?).map(drop)
    }

    fn interface(&self, spec: &NetworkSpec, _id: &str) -> String {
        spec.parent.clone().unwrap_or_default()
    }

    fn create(&self, network: &Network, nl: &mut Netlink, ipam: &Ipam) -> Result<(), NetworkError> {
        let Some(shim) = &network.host_shim else {
            return Ok(());
        };
        let made = make_shim(network, shim, nl, ipam);
        if made.is_err() {
            let _ = nl.delete_link_named(shim);
            let _ = ipam.remove_network(&network.name);
        }
        made
    }

    fn remove(
        &self,
        network: &Network,
        _others: &[Network],
        nl: &mut Netlink,
    ) -> Vec<NetworkError> {
        let Some(shim) = &network.host_shim else {
            return Vec::new();
        };
        let deleted = nl.delete_link_named(shim);
        deleted
            .err()
            .map(NetworkError::net("delete the host shim"))
            .into_iter()
            .collect()
    }

    fn link(
        &self,
        network: &Network,
        attachment: &Attachment,
        nl: &mut Netlink,
        netns: BorrowedFd<'_>,
    ) -> Result<(), NetworkError> {
        sublink(nl, network, "macvlan", |nl, parent| {
            nl.create_macvlan_in(&attachment.container_link, parent, Some(netns))
        })
    }
}

/// The shim link, its leased address as a /32, up, and the route to the subnet through it.
fn make_shim(
    network: &Network,
    shim: &str,
    nl: &mut Netlink,
    ipam: &Ipam,
) -> Result<(), NetworkError> {
    let range = Range {
        subnet: network.subnet,
        gateway: Some(network.gateway),
    };
    let address: IpAddr = ipam
        .allocate(&network.name, &range, HOST_SHIM_OWNER, None)
        .map_err(NetworkError::net("allocate the host shim's address"))?;
    let parent = parent_index(nl, &network.interface)?;
    let step = |what| NetworkError::net(format!("host shim {shim}: {what}"));
    nl.create_macvlan(shim, parent).map_err(step("create"))?;
    let index = nl
        .link_index(shim)
        .map_err(step("look up"))?
        .ok_or_else(|| NetworkError::Vanished {
            step: "make the host shim",
            what: "host shim",
            name: shim.to_string(),
        })?;
    nl.add_address(index, address, if address.is_ipv4() { 32 } else { 128 })
        .map_err(step("address"))?;
    nl.set_up(index, true).map_err(step("bring up"))?;
    let route = Route {
        destination: network.subnet,
        gateway: None,
        link: Some(index),
    };
    nl.add_route(&route).map_err(step("route the subnet"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn shim_names_fit_the_kernel_limit() {
        assert_eq!(super::shim_name("0123456789abcdef"), "pshim01234567");
    }
}
