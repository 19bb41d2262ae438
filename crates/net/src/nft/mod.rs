//! nat engine: pier's one nftables table, `inet pier`, that publishes container ports to remote
//! clients by DNAT, keeping their source address.
//!
//! Theory of operation: [`Table::ensure`] builds the table in one transaction (rules.rs): a
//! `prerouting` and an `output` nat chain whose rules DNAT through four maps, `pier_dnat4`/`6`
//! keyed by `daddr . meta l4proto . th dport` (a published specific host address) and
//! `pier_dnat4_any`/`6_any` keyed by `meta l4proto . th dport` (the wildcard), to
//! `addr . port`; a lookup costs the same with 1 or 10,000 elements, and a miss leaves the
//! packet alone. Loopback destinations are never DNATed (that needs route_localnet): they are
//! the ebpf engine's. A specific address is DNATed only for packets that arrived on its own
//! interface or from a pier bridge; its port is also put in the `pier_held` set, and an `input`
//! chain drops packets for a held port that were not DNATed (so `127.0.0.1:P` or `A:P` is not
//! reachable through another address or interface). A `postrouting` chain masquerades only
//! hairpin flows and container egress leaving through a non-pier interface; a `forward` chain
//! accepts replies and DNATed flows, drops traffic from one pier bridge to another bridge's
//! subnet (`pier_bridge_nets4`/`6`: bridge . subnet), and drops other traffic entering a
//! container subnet from outside pier's bridges. Publishing is an element add (commented with
//! the owning container, which [`Table::published`] reads back), unpublishing an element
//! delete; a whole list of mappings (a 1,000-port range) is one `nft -f -` transaction. If the
//! host's iptables-nft `ip filter FORWARD` drops by policy (Docker), [`Table::add_network`]
//! also adds accept rules commented "pier" there (see docker.rs); [`Table::teardown`] removes
//! those and the table. Every `nft` spawn costs milliseconds, so the publish path lists
//! nothing: [`Table::publish_on`] carries its bridge's set elements (idempotent adds) in the
//! same transaction and ensures the table only when nft reports it missing, and
//! [`Table::withdraw`] adds then deletes the recorded elements (idempotent without a listing).
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
mod listing;
mod routed;
mod rules;
mod run;

use std::net::IpAddr;

use serde_json::json;

pub use error::NftError;

use crate::Subnet;

const FAMILY: &str = "inet";
const TABLE: &str = "pier";

/// Whether the `nft` binary is installed (found on `PATH`; nothing is run).
pub fn installed() -> bool {
    run::installed()
}

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
/// every host address (of the container's family).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub host: Option<IpAddr>,
    pub proto: Proto,
    pub host_port: u16,
    pub container: IpAddr,
    pub container_port: u16,
}

impl Mapping {
    fn map(&self) -> &'static str {
        match (self.container.is_ipv4(), self.host.is_some()) {
            (true, true) => rules::DNAT4,
            (true, false) => rules::DNAT4_ANY,
            (false, true) => rules::DNAT6,
            (false, false) => rules::DNAT6_ANY,
        }
    }

    /// `198.18.0.1 . tcp . 8080 comment "c1" : 198.19.0.2 . 80` (no address for the wildcard
    /// maps, no comment without an owner).
    fn element(&self, owner: &str) -> String {
        let (proto, port) = (self.proto.name(), self.host_port);
        let target = format!("{} . {}", self.container, self.container_port);
        let comment = match owner {
            "" => String::new(),
            _ => format!(" comment \"{owner}\""),
        };
        match self.host {
            Some(host) => format!("{host} . {proto} . {port}{comment} : {target}"),
            None => format!("{proto} . {port}{comment} : {target}"),
        }
    }

    /// `tcp . 8080`, the element of the held-ports set.
    fn held(&self) -> String {
        format!("{} . {}", self.proto.name(), self.host_port)
    }

    fn check(&self, step: &'static str) -> Result<(), NftError> {
        let same = self
            .host
            .is_none_or(|h| h.is_ipv4() == self.container.is_ipv4());
        if same {
            return Ok(());
        }
        Err(NftError::Family {
            step,
            mapping: describe(std::slice::from_ref(self)),
        })
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
    /// bridge is not an egress and may reach only its own subnet (unless DNATed), and Docker's
    /// FORWARD policy drop (if any) lets IPv4 through.
    pub fn add_network(&self, subnet: Subnet, bridge: &str) -> Result<(), NftError> {
        let script = network_script("add network", subnet, bridge)?;
        let object = format!(
            "{} {subnet}, {} {bridge}",
            subnet_sets(subnet).0,
            rules::BRIDGES
        );
        run::apply_text("add network", &object, &script)?;
        match (docker::hook_chain()?, subnet.addr()) {
            (Some(chain), IpAddr::V4(addr)) => {
                docker::allow(chain, &addr.to_string(), subnet.prefix())
            }
            _ => Ok(()),
        }
    }

    /// Publishes `mappings` in one transaction (all or none).
    pub fn publish(&self, mappings: &[Mapping]) -> Result<(), NftError> {
        self.publish_owned(mappings, "")
    }

    /// Publishes `mappings` in one transaction (all or none), each element commented with
    /// `owner` (a container id: letters, digits, `-`, `_`, `.`), which [`Table::published`]
    /// reports.
    pub fn publish_owned(&self, mappings: &[Mapping], owner: &str) -> Result<(), NftError> {
        self.publish_on(mappings, owner, None)
    }

    /// Like [`Table::publish_owned`], and in the same transaction registers `bridge` with its
    /// `subnets` in the table's sets (adds of existing set elements are no-ops); Docker's
    /// FORWARD rules are [`Table::add_network`]'s, done when the network is made. No listing:
    /// when the table is missing ("No such file or directory") it is ensured and the
    /// transaction retried once. A key published with another value fails "File exists"
    /// ([`NftError::is_exists`]); the caller lists to name its owner.
    pub fn publish_on(
        &self,
        mappings: &[Mapping],
        owner: &str,
        bridge: Option<(&str, &[Subnet])>,
    ) -> Result<(), NftError> {
        let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
        if !owner.chars().all(plain) || owner.len() > 128 {
            return Err(NftError::BadOwner {
                owner: owner.to_string(),
            });
        }
        let mut script = String::new();
        if let Some((name, subnets)) = bridge {
            for &subnet in subnets {
                script += &network_script("publish", subnet, name)?;
            }
        }
        script += &self.script("add", mappings, owner, "publish")?;
        let held: Vec<String> = mappings
            .iter()
            .filter(|m| m.host.is_some())
            .map(Mapping::held)
            .collect();
        if !held.is_empty() {
            script += &rules::elements("add", rules::HELD, &held);
        }
        match apply_script("publish", mappings, &script) {
            Err(e) if e.is_missing() => {
                self.ensure()?;
                apply_script("publish", mappings, &script)
            }
            other => other,
        }
    }

    /// Unpublishes `mappings` in one transaction (all or none), then releases the held ports
    /// no remaining specific publish uses.
    pub fn unpublish(&self, mappings: &[Mapping]) -> Result<(), NftError> {
        let script = self.script("delete", mappings, "", "unpublish")?;
        apply_script("unpublish", mappings, &script)?;
        self.release_held(mappings)
    }

    /// Deletes whichever of `mappings` exist with exactly their recorded value, and releases
    /// the held ports no remaining specific publish uses. Idempotent and, on the usual path,
    /// one transaction with no listing: each element is added then deleted (an add of an
    /// existing key with the same value is a no-op, a delete of what the add made is harmless).
    /// A missing table means nothing to remove. When a key is held with ANOTHER value (the
    /// port was published again by someone else) the add fails "File exists"; then the maps
    /// are listed and only the elements still carrying our value are deleted.
    pub fn withdraw(&self, mappings: &[Mapping]) -> Result<(), NftError> {
        let mut script = self.script("add", mappings, "", "withdraw")?;
        script += &self.script("delete", mappings, "", "withdraw")?;
        match apply_deletes("withdraw", mappings, &script) {
            Err(e) if e.is_missing() => return Ok(()),
            Err(e) if e.is_exists() => {
                let listed = self.published()?;
                let ours: Vec<Mapping> = mappings
                    .iter()
                    .filter(|m| listed.iter().any(|(l, _)| l == *m))
                    .copied()
                    .collect();
                let script = self.script("delete", &ours, "", "withdraw")?;
                apply_deletes("withdraw", &ours, &script)?;
            }
            other => other?,
        }
        self.release_held(mappings)
    }

    fn script(
        &self,
        verb: &str,
        mappings: &[Mapping],
        owner: &str,
        step: &'static str,
    ) -> Result<String, NftError> {
        let mut script = String::new();
        for map in rules::DNAT_MAPS {
            let mut elems = Vec::new();
            for m in mappings.iter().filter(|m| m.map() == map) {
                m.check(step)?;
                elems.push(m.element(owner));
            }
            if !elems.is_empty() {
                script += &rules::elements(verb, map, &elems);
            }
        }
        Ok(script)
    }

    /// Deletes from the held set the ports of `gone` that no specific publish still has.
    fn release_held(&self, gone: &[Mapping]) -> Result<(), NftError> {
        let mut ports: Vec<(Proto, u16)> = gone
            .iter()
            .filter(|m| m.host.is_some())
            .map(|m| (m.proto, m.host_port))
            .collect();
        if ports.is_empty() {
            return Ok(());
        }
        let still = self.published()?;
        ports.retain(|p| {
            !still
                .iter()
                .any(|(m, _)| m.host.is_some() && (m.proto, m.host_port) == *p)
        });
        ports.sort_by_key(|(proto, port)| (proto.name(), *port));
        ports.dedup();
        let mut script = String::new();
        for (proto, port) in ports {
            script += &format!(
                "delete element inet {TABLE} {} {{ {} . {port} }}\n",
                rules::HELD,
                proto.name()
            );
        }
        if script.is_empty() {
            return Ok(());
        }
        // An element another process released in between is no error worth failing for.
        run::apply_text_committed("release held ports", rules::HELD, &script).or(Ok(()))
    }

    /// Every published element with its owner ("" when uncommented); empty without the table.
    /// One `nft -j list table inet pier` (its maps' elements included).
    pub fn published(&self) -> Result<Vec<(Mapping, String)>, NftError> {
        let Some(listing) = run::list("list published", &["table", FAMILY, TABLE])? else {
            return Ok(Vec::new());
        };
        let maps = run::objects(&listing, "map")
            .filter(|m| rules::DNAT_MAPS.iter().any(|name| m["name"] == *name));
        let elements = maps.flat_map(|m| m["elem"].as_array().into_iter().flatten());
        Ok(elements.filter_map(listing::element).collect())
    }

    /// Unregisters a container network (the reverse of [`Table::add_network`]): its subnet and
    /// bridge leave the table's sets and pier's rules for it leave Docker's chains. Idempotent:
    /// each element is added then deleted in one transaction, so a missing one is no error, and
    /// a missing table means there is nothing to remove.
    pub fn remove_network(&self, subnet: Subnet, bridge: &str) -> Result<(), NftError> {
        if !is_ifname(bridge) {
            return Err(NftError::BadIfname {
                step: "remove network",
                name: bridge.to_string(),
            });
        }
        if run::list("list table inet pier", &["table", FAMILY, TABLE])?.is_none() {
            return docker::remove_subnet(subnet);
        }
        let (subnets, nets) = subnet_sets(subnet);
        let sets = [
            (subnets, subnet.to_string()),
            (rules::BRIDGES, format!("\"{bridge}\"")),
            (nets, format!("\"{bridge}\" . {subnet}")),
        ];
        let mut script = String::new();
        for verb in ["add", "delete"] {
            for (set, elem) in &sets {
                script += &rules::elements(verb, set, std::slice::from_ref(elem));
            }
        }
        let object = format!("{subnets} {subnet}, {} {bridge}", rules::BRIDGES);
        run::apply_text("remove network", &object, &script)?;
        docker::remove_subnet(subnet)
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

/// The sets of `subnet`'s family: its subnets and its bridge . subnet pairs.
fn subnet_sets(subnet: Subnet) -> (&'static str, &'static str) {
    match subnet.addr() {
        IpAddr::V4(_) => (rules::SUBNETS4, rules::BRIDGE_NETS4),
        IpAddr::V6(_) => (rules::SUBNETS6, rules::BRIDGE_NETS6),
    }
}

/// The element adds registering `bridge` with `subnet` (idempotent: adding an existing set
/// element, interval ones included, is no error).
fn network_script(step: &'static str, subnet: Subnet, bridge: &str) -> Result<String, NftError> {
    if !is_ifname(bridge) {
        return Err(NftError::BadIfname {
            step,
            name: bridge.to_string(),
        });
    }
    let (subnets, nets) = subnet_sets(subnet);
    let mut script = rules::elements("add", subnets, &[subnet.to_string()]);
    script += &rules::elements("add", rules::BRIDGES, &[format!("\"{bridge}\"")]);
    script += &rules::elements("add", nets, &[format!("\"{bridge}\" . {subnet}")]);
    Ok(script)
}

fn apply_script(step: &'static str, mappings: &[Mapping], script: &str) -> Result<(), NftError> {
    if script.is_empty() {
        return Ok(());
    }
    run::apply_text(step, &describe(mappings), script)
}

/// [`apply_script`] for a batch that deletes: done when the kernel reports the commit.
fn apply_deletes(step: &'static str, mappings: &[Mapping], script: &str) -> Result<(), NftError> {
    if script.is_empty() {
        return Ok(());
    }
    run::apply_text_committed(step, &describe(mappings), script)
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
            specific.element(""),
            "198.18.0.1 . udp . 8080 : 198.19.0.2 . 80"
        );
        let wildcard = mapping(None);
        assert_eq!(wildcard.map(), "pier_dnat4_any");
        assert_eq!(
            wildcard.element("c1"),
            "udp . 8080 comment \"c1\" : 198.19.0.2 . 80"
        );
        let v6 = Mapping {
            host: None,
            container: "2001:2::2".parse().unwrap(),
            ..wildcard
        };
        assert_eq!(v6.map(), "pier_dnat6_any");
        let mixed = Mapping {
            host: Some("198.18.0.1".parse().unwrap()),
            ..v6
        };
        assert!(matches!(
            mixed.check("publish"),
            Err(NftError::Family { .. })
        ));
        assert!(matches!(
            Table.publish_owned(&[wildcard], "a\"b"),
            Err(NftError::BadOwner { .. })
        ));
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
    }
}
