//! Subnet pools: where a new network's subnet comes from when none is given.
//!
//! Theory of operation: a [`SubnetPool`] is a base prefix cut into subnets of one size
//! (`172.18.0.0/15:16` gives 172.18.0.0/16 and 172.19.0.0/16). [`choose`] walks the pools in
//! order and returns the first subnet that overlaps nothing in `taken`: the subnets routed in
//! the host's namespace ([`taken_subnets`] reads them over netlink, default routes excluded)
//! and those of every existing pier network. The pools are configuration ([`DEFAULT_POOLS`]
//! is Docker's default set, parsed with `parse_pools`); at most [`MAX_CANDIDATES`] subnets per
//! pool are tried, so a huge IPv6 pool cannot make the search run away.
//! Privileges: none (reading routes needs none). Tests: below.
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::subnet::{Subnet, SubnetError};
use crate::{NetError, Netlink};

/// Docker's default address pools, in its order: pier's bridge and user networks draw from them.
pub const DEFAULT_POOLS: &str =
    "172.17.0.0/16,172.18.0.0/15:16,172.20.0.0/14:16,172.24.0.0/13:16,192.168.0.0/16:20";

/// How many subnets of one pool [`choose`] tries at most.
pub const MAX_CANDIDATES: u128 = 1 << 16;

/// A base prefix and the prefix length of the subnets cut from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubnetPool {
    pub base: Subnet,
    pub size: u8,
}

impl SubnetPool {
    /// The pool's subnets in address order (at most [`MAX_CANDIDATES`]).
    pub fn candidates(&self) -> impl Iterator<Item = Subnet> + '_ {
        (0..MAX_CANDIDATES).map_while(|i| self.base.child(self.size, i))
    }
}

impl fmt::Display for SubnetPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.base, self.size)
    }
}

impl FromStr for SubnetPool {
    type Err = SubnetError;

    /// `BASE/LEN:SIZE`, or `BASE/LEN` for a pool of one subnet.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (base, size) = text.split_once(':').unwrap_or((text, ""));
        let base: Subnet = base.parse()?;
        let size = match size {
            "" => base.prefix(),
            digits => digits
                .parse()
                .map_err(|_| SubnetError::Syntax(text.to_string()))?,
        };
        let max = if base.is_ipv4() { 32 } else { 128 };
        if size < base.prefix() || size > max {
            return Err(SubnetError::Prefix {
                text: text.to_string(),
                prefix: size,
                max,
            });
        }
        Ok(Self { base, size })
    }
}

/// Parses a comma-separated list of pools (the configuration's form).
pub fn parse_pools(text: &str) -> Result<Vec<SubnetPool>, SubnetError> {
    text.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::parse)
        .collect()
}

/// The first subnet of `pools` that overlaps none of `taken`.
pub fn choose(pools: &[SubnetPool], taken: &[Subnet]) -> Result<Subnet, NetError> {
    let free = |candidate: &Subnet| !taken.iter().any(|t| t.overlaps(candidate));
    pools
        .iter()
        .find_map(|pool| pool.candidates().find(free))
        .ok_or_else(|| {
            let prefix = pools.first().map_or(0, |p| p.size);
            let pools = pools
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(",");
            NetError::PoolExhausted { prefix, pools }
        })
}

/// Checks a user-given subnet against `taken`: the first overlap is the error.
pub fn ensure_free(subnet: Subnet, taken: &[Subnet]) -> Result<(), NetError> {
    match taken.iter().find(|t| t.overlaps(&subnet)) {
        Some(other) => Err(NetError::SubnetOverlap {
            subnet,
            other: *other,
        }),
        None => Ok(()),
    }
}

/// The subnets a new network must avoid: every one routed in `netlink`'s namespace plus
/// those of the existing pier networks.
pub fn taken_subnets(netlink: &mut Netlink, networks: &[Subnet]) -> Result<Vec<Subnet>, NetError> {
    let mut taken = netlink.routed_subnets()?;
    taken.extend_from_slice(networks);
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<Subnet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn parses_pools_and_the_default_set() {
        let pools = parse_pools("198.18.0.0/15:24, 198.19.128.0/20").unwrap();
        assert_eq!(pools[0].to_string(), "198.18.0.0/15:24");
        assert_eq!(pools[1].size, 20);
        assert!(parse_pools("198.18.0.0/16:8").is_err());
        assert!(parse_pools("198.18.0.0/16:x").is_err());
        assert_eq!(parse_pools(DEFAULT_POOLS).unwrap().len(), 5);
    }

    #[test]
    fn chooses_the_first_subnet_overlapping_no_route_or_network() {
        let pools = parse_pools("198.18.0.0/16:24").unwrap();
        let routes = nets(&[
            "198.18.0.0/24",
            "198.18.1.128/25",
            "198.18.2.7/32",
            "198.19.0.0/24",
        ]);
        assert_eq!(
            choose(&pools, &routes).unwrap().to_string(),
            "198.18.3.0/24"
        );
        let mut taken = routes;
        taken.extend(nets(&["198.18.3.0/24"]));
        assert_eq!(choose(&pools, &taken).unwrap().to_string(), "198.18.4.0/24");
    }

    #[test]
    fn a_route_covering_a_pool_moves_on_to_the_next_pool() {
        let pools = parse_pools("198.18.0.0/16:24,198.19.0.0/16:24").unwrap();
        let taken = nets(&["198.18.0.0/15"]);
        let e = choose(&pools, &taken).unwrap_err();
        assert!(
            matches!(e, NetError::PoolExhausted { prefix: 24, .. }),
            "{e}"
        );
        let taken = nets(&["198.18.0.0/16"]);
        assert_eq!(choose(&pools, &taken).unwrap().to_string(), "198.19.0.0/24");
    }

    #[test]
    fn a_given_subnet_that_overlaps_is_refused_naming_both() {
        let taken = nets(&["198.18.0.0/16"]);
        let e = ensure_free("198.18.4.0/24".parse().unwrap(), &taken).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("subnet 198.18.4.0/24 overlaps 198.18.0.0/16"),
            "{e}"
        );
        ensure_free("198.19.4.0/24".parse().unwrap(), &taken).unwrap();
    }
}
