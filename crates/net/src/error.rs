//! The errors of pier-net: one variant per failed step, carrying the interface, namespace, file
//! or address involved and the kernel's errno text.
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;

use crate::subnet::Subnet;

/// Everything pier-net can fail at.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("netlink: opening a NETLINK_ROUTE socket: {0}")]
    Socket(#[source] io::Error),
    #[error("netlink: {op} {iface}: {source}")]
    Netlink {
        op: &'static str,
        iface: String,
        #[source]
        source: io::Error,
    },
    #[error("netlink: {op}: undecodable reply: {detail}")]
    Decode { op: &'static str, detail: String },
    #[error("ipvlan is not available in this kernel (no ipvlan module); use --driver macvlan")]
    IpvlanUnavailable,
    #[error("netns: {step} {target}: {source}")]
    Netns {
        step: &'static str,
        target: String,
        #[source]
        source: io::Error,
    },
    #[error("netns: the thread running in {0} panicked")]
    NetnsThreadPanicked(String),
    #[error("ipam: {step} {path}: {source}")]
    IpamFile {
        step: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("ipam: {path} is not valid allocation state: {source}")]
    IpamState {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("network name {0:?} is invalid: use letters, digits and _.- (starting with a letter or digit)")]
    NetworkName(String),
    #[error("ipam: network {network:?}: subnet {subnet} has no free address left")]
    Exhausted { network: String, subnet: Subnet },
    #[error("ipam: address {ip} is outside the subnet {subnet} of network {network:?}")]
    OutsideSubnet {
        network: String,
        ip: IpAddr,
        subnet: Subnet,
    },
    #[error("ipam: address {ip} is reserved in network {network:?} (network, gateway or broadcast address)")]
    Reserved { network: String, ip: IpAddr },
    #[error("ipam: address {ip} in network {network:?} is already allocated to container {owner}")]
    Taken {
        network: String,
        ip: IpAddr,
        owner: String,
    },
    #[error("subnet {subnet} overlaps {other}, already routed on the host or used by a pier network; choose another --subnet")]
    SubnetOverlap { subnet: Subnet, other: Subnet },
    #[error("subnet pool: no free /{prefix} left in {pools}: every one overlaps a host route or a pier network; configure another pool")]
    PoolExhausted { prefix: u8, pools: String },
}

impl NetError {
    pub(crate) fn netlink(op: &'static str, iface: impl ToString, source: io::Error) -> Self {
        NetError::Netlink {
            op,
            iface: iface.to_string(),
            source,
        }
    }

    /// The errno of a failed kernel call, if the error carries one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            NetError::Netlink { source, .. } | NetError::Netns { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipvlan_message_names_the_cause_and_the_way_out() {
        let text = NetError::IpvlanUnavailable.to_string();
        assert_eq!(
            text,
            "ipvlan is not available in this kernel (no ipvlan module); use --driver macvlan"
        );
    }

    #[test]
    fn netlink_errors_name_operation_interface_and_errno() {
        let e = NetError::netlink("create bridge", "pier0", io::Error::from_raw_os_error(17));
        assert_eq!(
            e.to_string(),
            "netlink: create bridge pier0: File exists (os error 17)"
        );
        assert_eq!(e.errno(), Some(17));
    }
}
