//! `Subnet`: an IPv4 or IPv6 prefix (`198.18.0.0/24`, `fd00::/64`) with the arithmetic IPAM and
//! the subnet pool need: containment, overlap, the n-th address, the broadcast address.
//!
//! Theory of operation: an address is handled as a `u128` (IPv4 in the low 32 bits) together with
//! its family's width, so one set of shifts serves both families. The stored address is always
//! the network address (host bits cleared), so two equal prefixes compare equal.
//! Privileges: none. Tests: below.
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A network prefix; the address is the network address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Subnet {
    addr: IpAddr,
    prefix: u8,
}

/// Why a subnet string or value was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubnetError {
    #[error("subnet {0:?} is not ADDRESS/PREFIX")]
    Syntax(String),
    #[error("subnet {text:?}: prefix length {prefix} is longer than {max}")]
    Prefix { text: String, prefix: u8, max: u8 },
}

fn width(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

fn to_bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u32::from(a) as u128,
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_bits(v4: bool, bits: u128) -> IpAddr {
    if v4 {
        IpAddr::V4(Ipv4Addr::from(bits as u32))
    } else {
        IpAddr::V6(Ipv6Addr::from(bits))
    }
}

impl Subnet {
    /// The prefix containing `addr` with `prefix` bits (host bits are cleared).
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Self, SubnetError> {
        let max = width(addr);
        if prefix > max {
            let text = format!("{addr}/{prefix}");
            return Err(SubnetError::Prefix { text, prefix, max });
        }
        let bits = to_bits(addr) & Self::mask(max, prefix);
        Ok(Self {
            addr: from_bits(addr.is_ipv4(), bits),
            prefix,
        })
    }

    fn mask(width: u8, prefix: u8) -> u128 {
        let all = if width == 32 {
            u32::MAX as u128
        } else {
            u128::MAX
        };
        if prefix == 0 {
            0
        } else {
            all & !(all >> prefix)
        }
    }

    /// The network address.
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether this is an IPv4 subnet.
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }

    fn host_bits(&self) -> u32 {
        u32::from(width(self.addr) - self.prefix)
    }

    /// Whether `ip` lies inside this subnet (same family, same prefix bits).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.is_ipv4()
            && to_bits(ip) & Self::mask(width(ip), self.prefix) == to_bits(self.addr)
    }

    /// Whether the two subnets share any address.
    pub fn overlaps(&self, other: &Subnet) -> bool {
        self.contains(other.addr) || other.contains(self.addr)
    }

    /// The address `n` places after the network address, if it is still inside the subnet.
    pub fn nth(&self, n: u128) -> Option<IpAddr> {
        let bits = self.host_bits();
        if bits < 128 && n >> bits != 0 {
            return None;
        }
        Some(from_bits(self.is_ipv4(), to_bits(self.addr) + n))
    }

    /// The number of addresses, saturating at `u128::MAX` for a /0 IPv6 subnet.
    pub fn size(&self) -> u128 {
        1u128.checked_shl(self.host_bits()).unwrap_or(u128::MAX)
    }

    /// The IPv4 broadcast address (the last one); IPv6 has none.
    pub fn broadcast(&self) -> Option<IpAddr> {
        self.is_ipv4().then(|| self.nth(self.size() - 1)).flatten()
    }

    /// The `index`-th subnet of length `prefix` inside this one (`None` when past the end).
    pub fn child(&self, prefix: u8, index: u128) -> Option<Subnet> {
        if prefix < self.prefix || prefix > width(self.addr) {
            return None;
        }
        let step_bits = u32::from(width(self.addr) - prefix);
        let offset = index.checked_shl(step_bits)?;
        if offset >> step_bits != index {
            return None;
        }
        let first = self.nth(offset)?;
        Subnet::new(first, prefix).ok()
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl FromStr for Subnet {
    type Err = SubnetError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let syntax = || SubnetError::Syntax(text.to_string());
        let (addr, prefix) = text.split_once('/').ok_or_else(syntax)?;
        let addr: IpAddr = addr.parse().map_err(|_| syntax())?;
        let prefix: u8 = prefix.parse().map_err(|_| syntax())?;
        Subnet::new(addr, prefix)
    }
}

impl TryFrom<String> for Subnet {
    type Error = SubnetError;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl From<Subnet> for String {
    fn from(subnet: Subnet) -> String {
        subnet.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(s: &str) -> Subnet {
        s.parse().unwrap()
    }

    #[test]
    fn parse_clears_host_bits_and_rejects_bad_text() {
        assert_eq!(net("198.18.3.7/24").to_string(), "198.18.3.0/24");
        assert_eq!(net("fd00::1/64").to_string(), "fd00::/64");
        assert!(matches!(
            "198.18.0.0".parse::<Subnet>(),
            Err(SubnetError::Syntax(_))
        ));
        assert!(matches!(
            "198.18.0.0/33".parse::<Subnet>(),
            Err(SubnetError::Prefix { .. })
        ));
    }

    #[test]
    fn contains_and_overlaps() {
        let a = net("198.18.0.0/16");
        assert!(a.contains("198.18.255.1".parse().unwrap()));
        assert!(!a.contains("198.19.0.1".parse().unwrap()));
        assert!(!a.contains("::1".parse().unwrap()));
        assert!(a.overlaps(&net("198.18.4.0/24")));
        assert!(net("198.18.4.0/24").overlaps(&a));
        assert!(!a.overlaps(&net("198.19.0.0/24")));
    }

    #[test]
    fn nth_broadcast_and_children() {
        let a = net("198.18.1.0/30");
        assert_eq!(a.nth(3).unwrap().to_string(), "198.18.1.3");
        assert_eq!(a.nth(4), None);
        assert_eq!(a.broadcast().unwrap().to_string(), "198.18.1.3");
        assert_eq!(net("fd00::/64").broadcast(), None);
        let base = net("198.18.0.0/15");
        assert_eq!(base.child(24, 257).unwrap().to_string(), "198.19.1.0/24");
        assert_eq!(base.child(24, 512), None);
    }
}
