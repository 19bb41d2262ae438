//! nat engine: pier's one nftables table, `inet pier`, that publishes container ports to remote
//! clients by DNAT, keeping their source address.
//!
//! Theory of operation: [`Table::ensure`] builds the table in one transaction: a `prerouting`
//! and an `output` nat chain whose rules DNAT through two maps, `pier_dnat4` keyed by
//! `ip daddr . meta l4proto . th dport` (a published specific host address) and
//! `pier_dnat4_any` keyed by `meta l4proto . th dport` (the wildcard), both to
//! `ip addr . port`; a lookup costs the same with 1 or 10,000 elements, and a miss leaves the
//! packet alone, so a port published on one host address is not DNATed for another. The output
//! chain skips 127.0.0.0/8 (local clients are the ebpf engine's). A `postrouting` chain
//! masquerades only hairpin flows (DNATed, container subnet to container subnet) and container
//! egress leaving through a non-pier interface; a `forward` chain accepts replies and DNATed
//! flows and drops other traffic entering a container subnet from outside pier's bridges. Publishing is an element add, unpublishing an element delete; a whole list of
//! mappings (a 1,000-port range) is one `nft -j -f -` transaction. If the host's iptables-nft
//! `ip filter FORWARD` drops by policy (Docker), [`Table::add_network`] also adds accept rules
//! commented "pier" there (see docker.rs); [`Table::teardown`] removes those and the table.
//!
//! Why not the `nftables` crate (JSON to `nft -j -f -`): nft 1.0.6's JSON input breaks on a
//! map with concatenated data (see rules.rs), which is the heart of this table; so the table
//! and its elements go to `nft -f -` in native syntax (still one transaction per batch) and
//! only listings and Docker's rules use JSON, by hand with serde_json (pier-net already has it,
//! and its Cargo.toml is not this module's to change).
//! Privileges: `CAP_NET_ADMIN` in the network namespace of the calling thread (nft inherits it).
//! Tests: crates/net/tests/priv_nft.rs (root, own namespaces).
mod docker;
mod error;
mod rules;
mod run;

use std::net::{IpAddr, Ipv4Addr};

use serde_json::json;

pub use error::NftError;

use crate::Subnet;

const FAMILY: &str = "inet";
const TABLE: &str = "pier";

/// A transport protocol nft can DNAT by port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
    Sctp,
}

impl Proto {
    fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
            Proto::Sctp => "sctp",
        }
    }
}

/// One published port: `host:host_port/proto` to `container:container_port`; `host` None is
/// every host address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub host: Option<Ipv4Addr>,
    pub proto: Proto,
    pub host_port: u16,
    pub container: Ipv4Addr,
    pub container_port: u16,
}

impl Mapping {
    fn map(&self) -> &'static str {
        match self.host {
            Some(_) => rules::DNAT4,
            None => rules::DNAT4_ANY,
        }
    }

    /// `198.18.0.1 . tcp . 8080 : 198.19.0.2 . 80` (no address for the wildcard map).
    fn element(&self) -> String {
        let (proto, port) = (self.proto.name(), self.host_port);
        let target = format!("{} . {}", self.container, self.container_port);
        match self.host {
            Some(host) => format!("{host} . {proto} . {port} : {target}"),
            None => format!("{proto} . {port} : {target}"),
        }
    }
}

/// pier's `inet pier` table in the network namespace of the calling thread.
#[derive(Debug, Default, Clone, Copy)]
pub struct Table;

impl Table {
    /// Creates the table, maps, sets and chains, or replaces the chains' rules if they exist.
    pub fn ensure(&self) -> Result<(), NftError> {
        run::apply_text("ensure", "table inet pier", &rules::table())
    }

    /// Registers a container network: its subnet is masqueraded on egress and hairpin, its
    /// bridge is not an egress, and Docker's FORWARD policy drop (if any) lets it through.
    pub fn add_network(&self, subnet: Subnet, bridge: &str) -> Result<(), NftError> {
        let IpAddr::V4(addr) = subnet.addr() else {
            return Err(NftError::NotIpv4 {
                step: "add network",
                subnet: subnet.to_string(),
            });
        };
        if !is_ifname(bridge) {
            return Err(NftError::BadIfname {
                step: "add network",
                name: bridge.to_string(),
            });
        }
        let mut script = rules::elements("add", rules::SUBNETS4, &[subnet.to_string()]);
        script += &rules::elements("add", rules::BRIDGES, &[format!("\"{bridge}\"")]);
        let object = format!("{} {subnet}, {} {bridge}", rules::SUBNETS4, rules::BRIDGES);
        run::apply_text("add network", &object, &script)?;
        match docker::hook_chain()? {
            Some(chain) => docker::allow(chain, &addr.to_string(), subnet.prefix()),
            None => Ok(()),
        }
    }

    /// Publishes `mappings` in one transaction (all or none).
    pub fn publish(&self, mappings: &[Mapping]) -> Result<(), NftError> {
        self.elements("add", "publish", mappings)
    }

    /// Unpublishes `mappings` in one transaction (all or none).
    pub fn unpublish(&self, mappings: &[Mapping]) -> Result<(), NftError> {
        self.elements("delete", "unpublish", mappings)
    }

    fn elements(
        &self,
        verb: &str,
        step: &'static str,
        mappings: &[Mapping],
    ) -> Result<(), NftError> {
        let mut script = String::new();
        for map in [rules::DNAT4, rules::DNAT4_ANY] {
            let elems: Vec<String> = mappings
                .iter()
                .filter(|m| m.map() == map)
                .map(Mapping::element)
                .collect();
            if !elems.is_empty() {
                script += &rules::elements(verb, map, &elems);
            }
        }
        if script.is_empty() {
            return Ok(());
        }
        run::apply_text(step, &describe(mappings), &script)
    }

    /// Deletes the table and pier's rules in Docker's chains; keeps going past a failure and
    /// reports every one.
    pub fn teardown(&self) -> Result<(), NftError> {
        let table = json!({"table": {"family": FAMILY, "name": TABLE}});
        let commands = vec![json!({"add": table.clone()}), json!({"delete": table})];
        let errors: Vec<NftError> = [
            run::apply("teardown", "table inet pier", commands),
            docker::remove_all(),
        ]
        .into_iter()
        .filter_map(Result::err)
        .collect();
        if errors.is_empty() {
            Ok(())
        } else {
            Err(NftError::Teardown(errors))
        }
    }
}

/// A name the kernel takes for a link and nft's parser takes in quotes.
fn is_ifname(name: &str) -> bool {
    let plain = |c: char| c.is_ascii_graphic() && !matches!(c, '"' | '\\' | '/');
    (1..16).contains(&name.len()) && name.chars().all(plain)
}

/// Names the first mapping (and how many more) for error messages.
fn describe(mappings: &[Mapping]) -> String {
    let Some(first) = mappings.first() else {
        return String::new();
    };
    let host = first.host.map_or("*".to_string(), |h| h.to_string());
    let text = format!(
        "{} element {host}:{}/{} -> {}:{}",
        first.map(),
        first.host_port,
        first.proto.name(),
        first.container,
        first.container_port
    );
    match mappings.len() {
        1 => text,
        n => format!("{text} and {} more", n - 1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(host: Option<&str>) -> Mapping {
        Mapping {
            host: host.map(|h| h.parse().unwrap()),
            proto: Proto::Udp,
            host_port: 8080,
            container: "198.19.0.2".parse().unwrap(),
            container_port: 80,
        }
    }

    #[test]
    fn elements_key_by_address_protocol_and_port() {
        let specific = mapping(Some("198.18.0.1"));
        assert_eq!(specific.map(), "pier_dnat4");
        assert_eq!(
            specific.element(),
            "198.18.0.1 . udp . 8080 : 198.19.0.2 . 80"
        );
        let wildcard = mapping(None);
        assert_eq!(wildcard.map(), "pier_dnat4_any");
        assert_eq!(wildcard.element(), "udp . 8080 : 198.19.0.2 . 80");
    }

    #[test]
    fn errors_name_the_first_element_and_the_count() {
        let three = [mapping(None), mapping(None), mapping(None)];
        assert_eq!(
            describe(&three),
            "pier_dnat4_any element *:8080/udp -> 198.19.0.2:80 and 2 more"
        );
    }

    #[test]
    fn bridge_names_are_checked_before_reaching_nft() {
        assert!(is_ifname("pier0"));
        for bad in ["", "a\"b", "has space", "sixteen-chars-xx"] {
            assert!(!is_ifname(bad), "{bad}");
        }
        let err = Table.add_network("198.18.0.0/24".parse().unwrap(), "a\"b");
        assert!(matches!(err, Err(NftError::BadIfname { .. })), "{err:?}");
        let v6 = Table.add_network("2001:2::/64".parse().unwrap(), "pier0");
        assert!(matches!(v6, Err(NftError::NotIpv4 { .. })), "{v6:?}");
    }
}
