//! Address operations: add and delete IPv4/IPv6 addresses on a link.
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::address::{AddressAttribute, AddressHeaderFlags, AddressMessage};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Netlink;
use crate::NetError;

/// `ip/prefix` on link `index`; IPv6 addresses skip duplicate address detection so they are
/// usable at once (a container's address is unique by IPAM).
fn address_message(index: u32, ip: IpAddr, prefix: u8) -> AddressMessage {
    let mut message = AddressMessage::default();
    message.header.index = index;
    message.header.prefix_len = prefix;
    message.header.family = match ip {
        IpAddr::V4(_) => AddressFamily::Inet,
        IpAddr::V6(_) => AddressFamily::Inet6,
    };
    if ip.is_ipv4() {
        message.attributes.push(AddressAttribute::Local(ip));
    } else {
        message.header.flags = AddressHeaderFlags::Nodad;
    }
    message.attributes.push(AddressAttribute::Address(ip));
    message
}

impl Netlink {
    /// Adds `ip/prefix` to link `index`.
    pub fn add_address(&mut self, index: u32, ip: IpAddr, prefix: u8) -> Result<(), NetError> {
        let message = RouteNetlinkMessage::NewAddress(address_message(index, ip, prefix));
        self.change(message, NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| {
                NetError::netlink("add address", format!("{ip}/{prefix} on link #{index}"), e)
            })
    }

    /// Removes `ip/prefix` from link `index`.
    pub fn del_address(&mut self, index: u32, ip: IpAddr, prefix: u8) -> Result<(), NetError> {
        let message = RouteNetlinkMessage::DelAddress(address_message(index, ip, prefix));
        self.change(message, 0).map_err(|e| {
            NetError::netlink(
                "delete address",
                format!("{ip}/{prefix} on link #{index}"),
                e,
            )
        })
    }

    /// The addresses on link `index` (all links when `None`), as `(link, ip, prefix)`.
    pub fn addresses(&mut self, index: Option<u32>) -> Result<Vec<(u32, IpAddr, u8)>, NetError> {
        let answers = self
            .dump(RouteNetlinkMessage::GetAddress(AddressMessage::default()))
            .map_err(|e| NetError::netlink("list addresses", "all links", e))?;
        let found = answers.into_iter().filter_map(|answer| match answer {
            RouteNetlinkMessage::NewAddress(a) => {
                let ip = a.attributes.iter().find_map(|attr| match attr {
                    AddressAttribute::Address(ip) => Some(*ip),
                    _ => None,
                })?;
                Some((a.header.index, ip, a.header.prefix_len))
            }
            _ => None,
        });
        Ok(found
            .filter(|(link, _, _)| index.is_none_or(|i| i == *link))
            .collect())
    }
}
