//! The ipvlan driver (L2 or L3): containers share the parent's MAC address, each with its own IP.
//!
//! Theory of operation: like macvlan, the container's `eth0` is created directly inside its netns
//! on the parent link, so nothing on the host is recorded. L2 containers route via the gateway;
//! L3 containers have no gateway, their default route points at the link. Kernel support is
//! detected by trying: creating an ipvlan when the kernel lacks the driver fails with
//! EOPNOTSUPP before the parent is even looked at (pier-net maps it to `IpvlanUnavailable`), so
//! `check` probes with a short-lived link on the parent (or on `lo` when no parent was given,
//! only to tell the user the driver is missing before asking for `--parent`). This kernel has no
//! ipvlan: every ipvlan network is refused with a message suggesting macvlan.
//! Privileges: CAP_NET_ADMIN. Tests: crates/engine/tests/priv_network.rs.
use std::net::IpAddr;
use std::os::fd::BorrowedFd;

use pier_net::ipam::Ipam;
use pier_net::{IpvlanMode, NetError, Netlink};

use super::driver::{
    every_gateway, parent_index, refuse, refuse_gateway_modes, required_parent, sublink,
    NetworkDriver,
};
use super::{Attachment, Network, NetworkError, NetworkSpec};

/// ipvlan sublinks.
#[derive(Debug)]
pub(super) struct Ipvlan;

/// `lo`'s index, the probe's parent when none was given.
const LOOPBACK_INDEX: u32 = 1;

/// `--ipvlan-mode`: `l2` (default) or `l3`.
pub(super) fn mode(text: Option<&str>) -> Result<IpvlanMode, NetworkError> {
    match text.unwrap_or("l2") {
        "l2" => Ok(IpvlanMode::L2),
        "l3" => Ok(IpvlanMode::L3),
        other => Err(NetworkError::Invalid(format!(
            "--ipvlan-mode {other:?} is not l2 or l3"
        ))),
    }
}

/// Refuses ipvlan when the kernel has no driver for it; creates nothing that outlives it.
fn probe(nl: &mut Netlink, parent: u32) -> Result<(), NetworkError> {
    let name = format!("pier-probe{}", std::process::id() % 100_000);
    match nl.create_ipvlan(&name, parent, IpvlanMode::L2) {
        Ok(()) => nl
            .delete_link_named(&name)
            .map(drop)
            .map_err(NetworkError::net("delete the ipvlan probe link")),
        Err(NetError::IpvlanUnavailable) => Err(NetworkError::IpvlanUnsupported),
        // The driver exists and refused this parent for its own reason (lo, a busy link): the
        // same reason will be reported when a container's link is made.
        Err(_) => Ok(()),
    }
}

impl NetworkDriver for Ipvlan {
    fn check(&self, spec: &NetworkSpec, nl: &mut Netlink) -> Result<(), NetworkError> {
        refuse(spec.host_shim, "--host-shim", "ipvlan")?;
        refuse_gateway_modes(spec, "ipvlan")?;
        mode(spec.ipvlan_mode.as_deref())?;
        if spec.parent.is_none() {
            probe(nl, LOOPBACK_INDEX)?;
        }
        let parent = parent_index(nl, required_parent(spec, "ipvlan")?)?;
        probe(nl, parent)
    }

    fn interface(&self, spec: &NetworkSpec, _id: &str) -> String {
        spec.parent.clone().unwrap_or_default()
    }

    fn create(
        &self,
        _network: &Network,
        _nl: &mut Netlink,
        _ipam: &Ipam,
    ) -> Result<(), NetworkError> {
        Ok(())
    }

    fn remove(
        &self,
        _network: &Network,
        _others: &[Network],
        _nl: &mut Netlink,
    ) -> Vec<NetworkError> {
        Vec::new()
    }

    fn gateways(&self, network: &Network) -> Vec<IpAddr> {
        match mode(network.ipvlan_mode.as_deref()) {
            Ok(IpvlanMode::L3) => Vec::new(),
            _ => every_gateway(network),
        }
    }

    fn link(
        &self,
        network: &Network,
        attachment: &Attachment,
        nl: &mut Netlink,
        netns: BorrowedFd<'_>,
    ) -> Result<(), NetworkError> {
        let mode = mode(network.ipvlan_mode.as_deref())?;
        sublink(nl, network, "ipvlan", |nl, parent| {
            nl.create_ipvlan_in(&attachment.container_link, parent, mode, Some(netns))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_default_to_l2_and_refuse_others_by_name() {
        assert_eq!(mode(None).unwrap(), IpvlanMode::L2);
        assert_eq!(mode(Some("l3")).unwrap(), IpvlanMode::L3);
        let e = mode(Some("l4")).unwrap_err();
        assert_eq!(e.to_string(), "--ipvlan-mode \"l4\" is not l2 or l3");
    }
}
