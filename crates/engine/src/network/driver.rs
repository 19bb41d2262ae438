//! The one shape every network driver has, and the choice of driver by `--driver`.
//!
//! Theory of operation: a driver answers four questions for the generic code in `mod.rs`:
//! what must hold before a network of its kind may be created (`check`: flags, parent link,
//! kernel support), which host objects a network has (`create`/`remove`: a bridge, a host
//! shim, or nothing), which host-side link one container's attachment makes (`host_link`,
//! recorded in the plan before it exists), and how the container's `eth0` is made (`link`).
//! Addresses and routes inside the container are the same for every driver (`inside.rs`).
//! The steps several drivers take are here once: the parent link's lookup and a sublink made
//! straight inside the container's namespace (`sublink`, macvlan and ipvlan), gateways.
//! Privileges: root. Tests: crates/engine/tests/priv_network.rs.
use std::net::IpAddr;
use std::os::fd::BorrowedFd;

use pier_net::ipam::Ipam;
use pier_net::{NetError, Netlink};

use super::{
    bridge, ipvlan, macvlan, Attachment, Driver, GatewayMode, Network, NetworkError, NetworkSpec,
    GATEWAY_MODE_IPV4, GATEWAY_MODE_IPV6,
};

/// One network driver (bridge, macvlan, ipvlan).
pub(super) trait NetworkDriver: Sync {
    /// Refuses flags this driver does not take and missing host facilities; makes nothing.
    fn check(&self, spec: &NetworkSpec, nl: &mut Netlink) -> Result<(), NetworkError>;

    /// The interface the record names: the network's bridge, or the parent link.
    fn interface(&self, spec: &NetworkSpec, id: &str) -> String;

    /// Creates the network's host objects; undoes its own partial work when it fails.
    fn create(&self, network: &Network, nl: &mut Netlink, ipam: &Ipam) -> Result<(), NetworkError>;

    /// Removes the network's host objects (`others`: the networks that stay); keeps going
    /// past failures and returns them all.
    fn remove(&self, network: &Network, others: &[Network], nl: &mut Netlink) -> Vec<NetworkError>;

    /// The host-side link an attachment makes, if any (sublinks of a parent make none).
    fn host_link(&self, _network: &Network, _container_id: &str) -> Option<String> {
        None
    }

    /// The gateways of the container's default routes (none: a route via the link itself).
    fn gateways(&self, network: &Network) -> Vec<IpAddr> {
        every_gateway(network)
    }

    /// Creates the container's link, named as planned, inside `netns`.
    fn link(
        &self,
        network: &Network,
        attachment: &Attachment,
        nl: &mut Netlink,
        netns: BorrowedFd<'_>,
    ) -> Result<(), NetworkError>;
}

/// The driver of `kind`.
pub(super) fn driver(kind: Driver) -> &'static dyn NetworkDriver {
    match kind {
        Driver::Bridge => &bridge::Bridge,
        Driver::Macvlan => &macvlan::Macvlan,
        Driver::Ipvlan => &ipvlan::Ipvlan,
    }
}

/// The network's gateways, IPv4 first.
pub(super) fn every_gateway(network: &Network) -> Vec<IpAddr> {
    std::iter::once(network.gateway)
        .chain(network.gateway6)
        .collect()
}

/// The index of the parent link `parent`, refused by name when it does not exist.
pub(super) fn parent_index(nl: &mut Netlink, parent: &str) -> Result<u32, NetworkError> {
    nl.link_index(parent)
        .map_err(NetworkError::net("look up the parent interface"))?
        .ok_or_else(|| NetworkError::NoParent(parent.to_string()))
}

/// Creates the container's sublink of the network's parent link (`create` gets the parent's
/// index), refused by name when the parent is gone; `what` names the link in the error.
pub(super) fn sublink(
    nl: &mut Netlink,
    network: &Network,
    what: &str,
    create: impl FnOnce(&mut Netlink, u32) -> Result<(), NetError>,
) -> Result<(), NetworkError> {
    let parent = parent_index(nl, &network.interface)?;
    create(nl, parent).map_err(NetworkError::net(format!("create the container's {what}")))
}

/// `--parent`, required by the sublink drivers (macvlan, ipvlan).
pub(super) fn required_parent<'a>(
    spec: &'a NetworkSpec,
    driver: &str,
) -> Result<&'a str, NetworkError> {
    spec.parent.as_deref().ok_or_else(|| {
        NetworkError::Invalid(format!(
            "--driver {driver} needs --parent IFACE (the host link to share)"
        ))
    })
}

/// Refuses a flag the driver does not take.
pub(super) fn refuse(given: bool, flag: &str, driver: &str) -> Result<(), NetworkError> {
    match given {
        true => Err(NetworkError::Invalid(format!(
            "{flag} does not apply to --driver {driver}"
        ))),
        false => Ok(()),
    }
}

/// Refuses a bridge gateway mode for a sublink driver (its containers are hosts on the parent's
/// LAN: there is no gateway of pier's to route or masquerade through).
pub(super) fn refuse_gateway_modes(spec: &NetworkSpec, driver: &str) -> Result<(), NetworkError> {
    let modes = [
        (GATEWAY_MODE_IPV4, spec.options.gateway_mode_ipv4),
        (GATEWAY_MODE_IPV6, spec.options.gateway_mode_ipv6),
    ];
    match modes.iter().find(|(_, mode)| *mode != GatewayMode::Nat) {
        Some((key, _)) => Err(NetworkError::Invalid(format!(
            "-o {key} is an option of --driver bridge; {driver} containers are hosts on the \
             parent's LAN, reached without routing through pier"
        ))),
        None => Ok(()),
    }
}
