//! Route operations: add and delete routes in the main table (a default route via a gateway, a
//! subnet on a link) and list the routed subnets (the subnet pool avoids them).
use std::net::IpAddr;

use netlink_packet_core::{NLM_F_CREATE, NLM_F_EXCL};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteHeader, RouteMessage, RouteProtocol, RouteScope, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};

use super::Netlink;
use crate::subnet::Subnet;
use crate::NetError;

/// A route in the main table: a destination reached through a gateway and/or a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub destination: Subnet,
    pub gateway: Option<IpAddr>,
    pub link: Option<u32>,
}

impl Route {
    /// The default route of `gateway`'s family via `gateway`.
    pub fn default_via(gateway: IpAddr) -> Route {
        let any = if gateway.is_ipv4() {
            "0.0.0.0/0"
        } else {
            "::/0"
        };
        let destination = any.parse().expect("a literal default prefix parses");
        Route {
            destination,
            gateway: Some(gateway),
            link: None,
        }
    }
}

fn route_address(ip: IpAddr) -> RouteAddress {
    match ip {
        IpAddr::V4(a) => RouteAddress::Inet(a),
        IpAddr::V6(a) => RouteAddress::Inet6(a),
    }
}

fn route_message(route: &Route) -> RouteMessage {
    let mut message = RouteMessage::default();
    let header = &mut message.header;
    header.address_family = if route.destination.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    };
    header.destination_prefix_length = route.destination.prefix();
    header.table = RouteHeader::RT_TABLE_MAIN;
    header.protocol = RouteProtocol::Static;
    header.kind = RouteType::Unicast;
    header.scope = if route.gateway.is_some() {
        RouteScope::Universe
    } else {
        RouteScope::Link
    };
    if route.destination.prefix() > 0 {
        let dest = route_address(route.destination.addr());
        message.attributes.push(RouteAttribute::Destination(dest));
    }
    if let Some(gateway) = route.gateway {
        message
            .attributes
            .push(RouteAttribute::Gateway(route_address(gateway)));
    }
    if let Some(link) = route.link {
        message.attributes.push(RouteAttribute::Oif(link));
    }
    message
}

/// The destination, gateway and outgoing link of a dumped route (`None` without a destination).
fn parsed(message: &RouteMessage) -> Option<Route> {
    let gateway = message.attributes.iter().find_map(|attr| match attr {
        RouteAttribute::Gateway(RouteAddress::Inet(a)) => Some(IpAddr::V4(*a)),
        RouteAttribute::Gateway(RouteAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
        _ => None,
    });
    let link = message.attributes.iter().find_map(|attr| match attr {
        RouteAttribute::Oif(index) => Some(*index),
        _ => None,
    });
    Some(Route {
        destination: destination(message)?,
        gateway,
        link,
    })
}

fn destination(message: &RouteMessage) -> Option<Subnet> {
    let prefix = message.header.destination_prefix_length;
    let addr = message.attributes.iter().find_map(|attr| match attr {
        RouteAttribute::Destination(RouteAddress::Inet(a)) => Some(IpAddr::V4(*a)),
        RouteAttribute::Destination(RouteAddress::Inet6(a)) => Some(IpAddr::V6(*a)),
        _ => None,
    })?;
    Subnet::new(addr, prefix).ok()
}

impl Netlink {
    /// Adds `route` to the main table.
    pub fn add_route(&mut self, route: &Route) -> Result<(), NetError> {
        let message = RouteNetlinkMessage::NewRoute(route_message(route));
        self.change(message, NLM_F_CREATE | NLM_F_EXCL)
            .map_err(|e| NetError::netlink("add route", route.destination, e))
    }

    /// Deletes `route` from the main table.
    pub fn del_route(&mut self, route: &Route) -> Result<(), NetError> {
        let message = RouteNetlinkMessage::DelRoute(route_message(route));
        self.change(message, 0)
            .map_err(|e| NetError::netlink("delete route", route.destination, e))
    }

    /// Every subnet routed in any table of this namespace, IPv4 and IPv6, except default
    /// routes (prefix 0) and host routes of local addresses in the local table.
    pub fn routed_subnets(&mut self) -> Result<Vec<Subnet>, NetError> {
        let mut subnets: Vec<Subnet> = self.routes()?.iter().map(|r| r.destination).collect();
        subnets.sort();
        subnets.dedup();
        Ok(subnets)
    }

    /// The unicast routes of every table of this namespace with their destination, gateway and
    /// outgoing link, IPv4 and IPv6, except default routes (prefix 0).
    pub fn routes(&mut self) -> Result<Vec<Route>, NetError> {
        let mut routes = Vec::new();
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            let mut query = RouteMessage::default();
            query.header.address_family = family;
            let answers = self
                .dump(RouteNetlinkMessage::GetRoute(query))
                .map_err(|e| NetError::netlink("list routes", "all tables", e))?;
            routes.extend(answers.iter().filter_map(|answer| match answer {
                RouteNetlinkMessage::NewRoute(r) if r.header.kind == RouteType::Unicast => {
                    parsed(r)
                }
                _ => None,
            }));
        }
        routes.retain(|r| r.destination.prefix() > 0);
        Ok(routes)
    }
}
