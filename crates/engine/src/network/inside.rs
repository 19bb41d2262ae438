//! The container's side of an attachment: `lo` up, the planned addresses on the container link,
//! the link up, and the default routes, done inside the container's network namespace.
//!
//! Theory of operation: pier-net's `run_in` enters the namespace on a scoped thread of its own
//! (no pier thread ever changes namespace) and opens a netlink socket there; `lo` is index 1 in
//! every namespace. Addresses go on before the link comes up and the routes after, since a
//! gateway is reachable only through the connected route of an up link. With no gateway
//! (ipvlan L3) the default route points at the link itself.
//! Privileges: CAP_SYS_ADMIN (setns) and CAP_NET_ADMIN. Tests: crates/engine/tests/priv_network.rs.
use std::os::fd::BorrowedFd;

use pier_net::netns::run_in;
use pier_net::{Route, Subnet};

use super::{open_netlink, Attachment, NetworkError};

/// `lo`'s index in every network namespace (LOOPBACK_IFINDEX).
const LOOPBACK_INDEX: u32 = 1;

/// Configures the attachment's link inside `netns` (created there by the driver).
pub(super) fn configure(
    attachment: &Attachment,
    netns: BorrowedFd<'_>,
) -> Result<(), NetworkError> {
    let name = format!("the netns of container {}", attachment.container_id);
    run_in(netns, &name, || configure_here(attachment))
        .map_err(NetworkError::net("enter the container's netns"))?
}

/// Brings `lo` up inside `netns`.
pub(super) fn loopback_up(netns: BorrowedFd<'_>) -> Result<(), NetworkError> {
    run_in(netns, "the container's netns", || {
        open_netlink()?
            .set_up(LOOPBACK_INDEX, true)
            .map_err(NetworkError::net("bring lo up"))
    })
    .map_err(NetworkError::net("enter the container's netns"))?
}

fn configure_here(attachment: &Attachment) -> Result<(), NetworkError> {
    let mut nl = open_netlink()?;
    nl.set_up(LOOPBACK_INDEX, true)
        .map_err(NetworkError::net("bring lo up"))?;
    let name = &attachment.container_link;
    let link = nl
        .link_index(name)
        .map_err(NetworkError::net("look up the container link"))?
        .ok_or_else(|| NetworkError::Invalid(format!("container link {name} was not created")))?;
    for &(ip, prefix) in &attachment.addresses {
        nl.add_address(link, ip, prefix)
            .map_err(NetworkError::net(format!("address {name}")))?;
    }
    nl.set_up(link, true)
        .map_err(NetworkError::net(format!("bring {name} up")))?;
    for route in default_routes(attachment, link) {
        nl.add_route(&route)
            .map_err(NetworkError::net(format!("default route of {name}")))?;
    }
    Ok(())
}

/// One default route per gateway, or per address family via the link when there is none.
fn default_routes(attachment: &Attachment, link: u32) -> Vec<Route> {
    if !attachment.gateways.is_empty() {
        return attachment
            .gateways
            .iter()
            .map(|g| Route::default_via(*g))
            .collect();
    }
    let any = |v4: bool| if v4 { "0.0.0.0/0" } else { "::/0" };
    attachment
        .addresses
        .iter()
        .map(|(ip, _)| Route {
            destination: any(ip.is_ipv4())
                .parse::<Subnet>()
                .expect("a literal prefix parses"),
            gateway: None,
            link: Some(link),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attachment(gateways: &[&str]) -> Attachment {
        Attachment {
            network: "n1".into(),
            container_id: "c1".into(),
            host_link: None,
            container_link: "eth0".into(),
            addresses: vec![
                ("198.18.0.2".parse().unwrap(), 24),
                ("2001:2::2".parse().unwrap(), 64),
            ],
            gateways: gateways.iter().map(|g| g.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn default_routes_go_via_each_gateway() {
        let routes = default_routes(&attachment(&["198.18.0.1", "2001:2::1"]), 7);
        assert_eq!(routes.len(), 2);
        assert_eq!(routes[0].gateway, Some("198.18.0.1".parse().unwrap()));
        assert_eq!(routes[1].destination.to_string(), "::/0");
        assert!(routes.iter().all(|r| r.link.is_none()));
    }

    #[test]
    fn without_gateways_default_routes_use_the_link_per_family() {
        let routes = default_routes(&attachment(&[]), 7);
        let texts: Vec<String> = routes.iter().map(|r| r.destination.to_string()).collect();
        assert_eq!(texts, ["0.0.0.0/0", "::/0"]);
        assert!(routes
            .iter()
            .all(|r| r.link == Some(7) && r.gateway.is_none()));
    }
}
