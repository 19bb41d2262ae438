//! Everything `pier network create` must refuse before it makes anything: a bad or taken name,
//! flags the driver does not take, a missing parent, a kernel without the driver, a subnet that
//! overlaps a host route or another pier network (naming both), a gateway outside its subnet.
//!
//! Theory of operation: [`network`] turns a [`NetworkSpec`] into the [`Network`] record to be
//! created, with every name and address fixed. A missing `--subnet` is chosen from the subnet
//! pools (`PIER_SUBNET_POOL`, else pier-net's `DEFAULT_POOLS`), skipping every taken subnet; the
//! gateway defaults to the first host address. macvlan and ipvlan networks join the parent's
//! LAN, so a route through the parent itself does not count as an overlap for them.
//! Privileges: none beyond reading routes. Tests: unit tests below; priv_network.rs.
use std::net::IpAddr;

use pier_net::pool::{self, SubnetPool, DEFAULT_POOLS};
use pier_net::{Netlink, Route, Subnet};

use super::driver::driver;
use super::macvlan::shim_name;
use super::store::{new_id, now_rfc3339};
use super::{Driver, Network, NetworkError, NetworkSpec, DEFAULT_NETWORK, POOL_ENV};

/// A subnet a new network must not overlap, and who holds it.
#[derive(Debug)]
enum Taken {
    Route(Route),
    Network(Subnet, String),
}

impl Taken {
    fn subnet(&self) -> Subnet {
        match self {
            Taken::Route(route) => route.destination,
            Taken::Network(subnet, _) => *subnet,
        }
    }
}

/// The record `spec` would create, or why it must not be created.
pub(super) fn network(
    spec: &NetworkSpec,
    existing: &[Network],
    nl: &mut Netlink,
) -> Result<Network, NetworkError> {
    name(spec, existing)?;
    let kind = spec.driver.unwrap_or(Driver::Bridge);
    driver(kind).check(spec, nl)?;
    let taken = taken(kind, spec, existing, nl)?;
    let subnet = subnet(spec.subnet, &taken, nl, true)?;
    let gateway = gateway(subnet, spec.gateway)?;
    let (subnet6, gateway6) = ipv6(spec, &taken, nl)?;
    let id = new_id()?;
    Ok(Network {
        name: spec.name.clone(),
        interface: driver(kind).interface(spec, &id),
        host_shim: spec.host_shim.then(|| shim_name(&id)),
        id,
        driver: kind,
        subnet,
        gateway,
        subnet6,
        gateway6,
        created: now_rfc3339(),
        ipvlan_mode: (kind == Driver::Ipvlan)
            .then(|| spec.ipvlan_mode.clone().unwrap_or_else(|| "l2".into())),
        options: spec.options,
    })
}

/// The pools new subnets come from, as configured (for messages).
pub(super) fn pool_text() -> String {
    std::env::var(POOL_ENV).unwrap_or_else(|_| DEFAULT_POOLS.to_string())
}

fn pools() -> Result<Vec<SubnetPool>, NetworkError> {
    let text = pool_text();
    pool::parse_pools(&text).map_err(|e| NetworkError::Invalid(format!("{POOL_ENV}={text}: {e}")))
}

fn name(spec: &NetworkSpec, existing: &[Network]) -> Result<(), NetworkError> {
    pier_net::ipam::check_name(&spec.name).map_err(NetworkError::net("check the name"))?;
    if ["host", "none"].contains(&spec.name.as_str()) {
        return Err(NetworkError::Invalid(format!(
            "network name {} is reserved for --network {0}",
            spec.name
        )));
    }
    match existing.iter().any(|n| n.name == spec.name) {
        true => Err(NetworkError::Exists(spec.name.clone())),
        false => Ok(()),
    }
}

/// Other networks' subnets (first, so an overlap names the network rather than its bridge's
/// route) and host routes (except through a sublink network's own parent).
fn taken(
    kind: Driver,
    spec: &NetworkSpec,
    existing: &[Network],
    nl: &mut Netlink,
) -> Result<Vec<Taken>, NetworkError> {
    let parent = match (kind, spec.parent.as_deref()) {
        (Driver::Bridge, _) | (_, None) => None,
        (_, Some(parent)) => nl
            .link_index(parent)
            .map_err(NetworkError::net("look up the parent"))?,
    };
    let routes = nl
        .routes()
        .map_err(NetworkError::net("list the host's routes"))?;
    let networks = existing.iter().flat_map(|n| {
        let subnets = std::iter::once(n.subnet).chain(n.subnet6);
        subnets.map(|subnet| Taken::Network(subnet, n.name.clone()))
    });
    let routes = routes
        .into_iter()
        .filter(|r| parent.is_none() || r.link != parent)
        .map(Taken::Route);
    Ok(networks.chain(routes).collect())
}

/// The given subnet if it is free and of the right family, else one from the pools (IPv4 only).
fn subnet(
    given: Option<Subnet>,
    taken: &[Taken],
    nl: &mut Netlink,
    v4: bool,
) -> Result<Subnet, NetworkError> {
    let flag = if v4 { "--subnet" } else { "--subnet6" };
    let Some(subnet) = given else {
        let subnets: Vec<Subnet> = taken.iter().map(Taken::subnet).collect();
        return pool::choose(&pools()?, &subnets).map_err(NetworkError::net("choose a subnet"));
    };
    let (max, family) = if v4 {
        (30, "an IPv4")
    } else {
        (126, "an IPv6")
    };
    if subnet.is_ipv4() != v4 || subnet.prefix() > max {
        return Err(NetworkError::Invalid(format!(
            "{flag} {subnet} must be {family} subnet with a prefix of at most /{max}"
        )));
    }
    match taken.iter().find(|t| t.subnet().overlaps(&subnet)) {
        Some(t) => Err(NetworkError::Overlap {
            subnet,
            other: t.subnet(),
            owner: owner(t, nl),
            flag,
        }),
        None => Ok(subnet),
    }
}

/// Who holds a taken subnet, for the overlap message.
fn owner(taken: &Taken, nl: &mut Netlink) -> String {
    match taken {
        Taken::Network(_, name) => format!("pier network {name}"),
        Taken::Route(route) => {
            let link = route.link.and_then(|i| nl.link_name(i).ok().flatten());
            match link {
                Some(link) => format!("routed on the host via {link}"),
                None => "routed on the host".to_string(),
            }
        }
    }
}

/// The gateway: given (inside the subnet, not its network or broadcast address) or the first
/// host address.
fn gateway(subnet: Subnet, given: Option<IpAddr>) -> Result<IpAddr, NetworkError> {
    let Some(gateway) = given else {
        return Ok(subnet
            .nth(1)
            .expect("a subnet of /30 or wider has a first host"));
    };
    if !subnet.contains(gateway) {
        return Err(NetworkError::Invalid(format!(
            "gateway {gateway} is outside the subnet {subnet}"
        )));
    }
    if Some(gateway) == subnet.nth(0) || Some(gateway) == subnet.broadcast() {
        return Err(NetworkError::Invalid(format!(
            "gateway {gateway} is the network or broadcast address of {subnet}"
        )));
    }
    Ok(gateway)
}

fn ipv6(
    spec: &NetworkSpec,
    taken: &[Taken],
    nl: &mut Netlink,
) -> Result<(Option<Subnet>, Option<IpAddr>), NetworkError> {
    match (spec.ipv6, spec.subnet6) {
        (false, None) if spec.gateway6.is_none() => Ok((None, None)),
        (false, _) => Err(NetworkError::Invalid(
            "--subnet6 and --gateway6 need --ipv6".to_string(),
        )),
        (true, None) => Err(NetworkError::Invalid(
            "--ipv6 needs --subnet6 (for example 2001:db8:1::/64)".to_string(),
        )),
        (true, Some(given)) => {
            let subnet6 = subnet(Some(given), taken, nl, false)?;
            Ok((Some(subnet6), Some(gateway(subnet6, spec.gateway6)?)))
        }
    }
}

/// The default network's spec (a bridge with a subnet from the pools).
pub(super) fn default_spec() -> NetworkSpec {
    NetworkSpec {
        name: DEFAULT_NETWORK.to_string(),
        driver: Some(Driver::Bridge),
        ..NetworkSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Subnet {
        text.parse().unwrap()
    }

    #[test]
    fn gateways_must_be_host_addresses_of_the_subnet() {
        let s = net("198.18.3.0/24");
        assert_eq!(gateway(s, None).unwrap().to_string(), "198.18.3.1");
        assert_eq!(
            gateway(s, Some("198.18.3.254".parse().unwrap()))
                .unwrap()
                .to_string(),
            "198.18.3.254"
        );
        let e = gateway(s, Some("198.18.4.1".parse().unwrap())).unwrap_err();
        assert_eq!(
            e.to_string(),
            "gateway 198.18.4.1 is outside the subnet 198.18.3.0/24"
        );
        assert!(gateway(s, Some("198.18.3.255".parse().unwrap())).is_err());
        assert!(gateway(s, Some("198.18.3.0".parse().unwrap())).is_err());
    }

    #[test]
    fn names_must_be_valid_free_and_not_reserved() {
        let spec = |name: &str| NetworkSpec {
            name: name.into(),
            ..NetworkSpec::default()
        };
        assert!(name(&spec("n1"), &[]).is_ok());
        assert!(name(&spec("host"), &[]).is_err());
        assert!(name(&spec("a/b"), &[]).is_err());
    }

    #[test]
    fn ipv6_flags_must_come_together() {
        let mut nl = Netlink::open().unwrap();
        let mut spec = NetworkSpec::default();
        assert_eq!(ipv6(&spec, &[], &mut nl).unwrap(), (None, None));
        spec.subnet6 = Some(net("2001:2::/64"));
        assert!(ipv6(&spec, &[], &mut nl).is_err());
        spec.ipv6 = true;
        let (s6, g6) = ipv6(&spec, &[], &mut nl).unwrap();
        assert_eq!(
            (s6.unwrap().to_string(), g6.unwrap().to_string()),
            ("2001:2::/64".into(), "2001:2::1".into())
        );
        let taken = [Taken::Network(net("2001:2::/48"), "n6".into())];
        let e = ipv6(&spec, &taken, &mut nl).unwrap_err();
        assert_eq!(
            e.to_string(),
            "subnet 2001:2::/64 overlaps 2001:2::/48 (pier network n6); choose another --subnet6"
        );
    }
}
