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
//! delete; a whole list of mappings (a 1,000-port range) is one transaction. If the host's
//! iptables-nft `ip filter FORWARD` drops by policy (Docker), [`Table::add_network`] also adds
//! accept rules commented "pier" there (see docker.rs); [`Table::teardown`] removes those and
//! the table.
//! Two transports: the table, its chains and rules ([`Table::ensure`], once), Docker's rules and
//! teardown go to the `nft` binary; every element (publish, withdraw, the listing a port pick or
//! a conflict needs, a network's registration and removal, routed marks) is nfnetlink spoken
//! in-process (wire.rs, socket.rs), since an `nft` spawn costs about 3.4 ms against the
//! kernel's microseconds. The publish path lists nothing: [`Table::publish_on`] carries its
//! bridge's set elements (idempotent adds) in the same transaction and ensures the table only
//! when the kernel reports it missing, and [`Table::withdraw`] adds then deletes the recorded
//! elements (idempotent without a listing).
//!
//! Why not the `nftables` crate (JSON to `nft -j -f -`): nft 1.0.6's JSON input breaks on a
//! map with concatenated data (see rules.rs), which is the heart of this table; so the table
//! goes to `nft -f -` in native syntax (one transaction) and only Docker's rules use JSON, by
//! hand with serde_json.
//! Privileges: `CAP_NET_ADMIN` in the network namespace of the calling thread (nft inherits it).
//! Tests: crates/net/tests/priv_nft.rs (root, own namespaces).
mod docker;
mod error;
mod routed;
mod rules;
mod run;
mod socket;
mod wire;

use std::net::IpAddr;

use serde_json::json;

pub use error::NftError;
use wire::{Batch, Concat, Elem, Fields, Op};

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

    /// The IP protocol number (`inet_proto`).
    fn number(self) -> u8 {
        match self {
            Proto::Tcp => 6,
            Proto::Udp => 17,
            Proto::Sctp => 132,
        }
    }

    fn from_number(number: u8) -> Option<Proto> {
        [Proto::Tcp, Proto::Udp, Proto::Sctp]
            .into_iter()
            .find(|p| p.number() == number)
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

    /// The map element: key `[host .] proto . port`, data `container . port`, the owner as
    /// its comment (none when empty).
    fn element(&self, owner: &str) -> Elem {
        let key = self
            .host
            .map_or(Concat::default(), |h| Concat::default().addr(h));
        Elem {
            key: key.proto(self.proto.number()).port(self.host_port).done(),
            data: Some(
                Concat::default()
                    .addr(self.container)
                    .port(self.container_port)
                    .done(),
            ),
            comment: (!owner.is_empty()).then(|| owner.to_string()),
            ..Elem::default()
        }
    }

    /// `proto . port`, the element of the held-ports set.
    fn held(&self) -> Elem {
        Elem::key(held_key(self.proto, self.host_port))
    }

    /// The mapping and owner ("" when uncommented) of an element of `map`.
    fn from_element(map: &str, elem: &Elem) -> Option<(Mapping, String)> {
        let v6 = matches!(map, rules::DNAT6 | rules::DNAT6_ANY);
        let mut key = Fields::new(&elem.key);
        let host = match map {
            rules::DNAT4 | rules::DNAT6 => Some(key.addr(v6)?),
            _ => None,
        };
        let (proto, host_port) = (Proto::from_number(key.proto()?)?, key.port()?);
        let mut data = Fields::new(elem.data.as_deref()?);
        let mapping = Mapping {
            host,
            proto,
            host_port,
            container: data.addr(v6)?,
            container_port: data.port()?,
        };
        let whole = key.is_empty() && data.is_empty();
        whole.then(|| (mapping, elem.comment.clone().unwrap_or_default()))
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
        let mut batch = Batch::new();
        for (set, elems) in network_elements("add network", subnet, bridge)? {
            batch.elements(Op::Add, TABLE, set, &elems);
        }
        socket::commit("add network", &network_object(subnet, bridge), batch)?;
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
        let batch = || -> Result<Batch, NftError> {
            let mut batch = Batch::new();
            if let Some((name, subnets)) = bridge {
                for &subnet in subnets {
                    for (set, elems) in network_elements("publish", subnet, name)? {
                        batch.elements(Op::Add, TABLE, set, &elems);
                    }
                }
            }
            self.mapping_elements(&mut batch, Op::Add, mappings, owner, "publish")?;
            let held: Vec<Elem> = mappings
                .iter()
                .filter(|m| m.host.is_some())
                .map(Mapping::held)
                .collect();
            batch.elements(Op::Add, TABLE, rules::HELD, &held);
            Ok(batch)
        };
        let object = describe(mappings);
        match socket::commit("publish", &object, batch()?) {
            Err(e) if e.is_missing() => {
                self.ensure()?;
                socket::commit("publish", &object, batch()?)
            }
            other => other,
        }
    }

    /// Unpublishes `mappings` in one transaction (all or none), then releases the held ports
    /// no remaining specific publish uses.
    pub fn unpublish(&self, mappings: &[Mapping]) -> Result<(), NftError> {
        let mut batch = Batch::new();
        self.mapping_elements(&mut batch, Op::Delete, mappings, "", "unpublish")?;
        socket::commit("unpublish", &describe(mappings), batch)?;
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
        let mut batch = Batch::new();
        self.mapping_elements(&mut batch, Op::Add, mappings, "", "withdraw")?;
        self.mapping_elements(&mut batch, Op::Delete, mappings, "", "withdraw")?;
        match socket::commit("withdraw", &describe(mappings), batch) {
            Err(e) if e.is_missing() => return Ok(()),
            Err(e) if e.is_exists() => {
                let listed = self.published()?;
                let ours: Vec<Mapping> = mappings
                    .iter()
                    .filter(|m| listed.iter().any(|(l, _)| l == *m))
                    .copied()
                    .collect();
                let mut batch = Batch::new();
                self.mapping_elements(&mut batch, Op::Delete, &ours, "", "withdraw")?;
                socket::commit("withdraw", &describe(&ours), batch)?;
            }
            other => other?,
        }
        self.release_held(mappings)
    }

    /// Appends `mappings` to `batch`, one message per map.
    fn mapping_elements(
        &self,
        batch: &mut Batch,
        op: Op,
        mappings: &[Mapping],
        owner: &str,
        step: &'static str,
    ) -> Result<(), NftError> {
        for map in rules::DNAT_MAPS {
            let mut elems = Vec::new();
            for m in mappings.iter().filter(|m| m.map() == map) {
                m.check(step)?;
                elems.push(m.element(owner));
            }
            batch.elements(op, TABLE, map, &elems);
        }
        Ok(())
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
        ports.sort_by_key(|(proto, port)| (proto.number(), *port));
        ports.dedup();
        let elems: Vec<Elem> = ports
            .into_iter()
            .map(|(proto, port)| Elem::key(held_key(proto, port)))
            .collect();
        // Each is added then deleted, so one another process released in between is no error.
        let mut batch = Batch::new();
        batch.elements(Op::Add, TABLE, rules::HELD, &elems);
        batch.elements(Op::Delete, TABLE, rules::HELD, &elems);
        match socket::commit("release held ports", rules::HELD, batch) {
            Err(e) if e.is_missing() => Ok(()),
            other => other,
        }
    }

    /// Every published element with its owner ("" when uncommented); empty without the table.
    /// One netlink dump per map, all on one socket.
    pub fn published(&self) -> Result<Vec<(Mapping, String)>, NftError> {
        let dumps = socket::dump("list published", TABLE, &rules::DNAT_MAPS)?;
        let mut out = Vec::new();
        for (map, elems) in rules::DNAT_MAPS.iter().zip(dumps) {
            let elems = elems.unwrap_or_default();
            out.extend(elems.iter().filter_map(|e| Mapping::from_element(map, e)));
        }
        Ok(out)
    }

    /// Unregisters a container network (the reverse of [`Table::add_network`]): its subnet and
    /// bridge leave the table's sets and pier's rules for it leave Docker's chains. Idempotent:
    /// each element is added then deleted in one transaction, so a missing one is no error, and
    /// a missing table means there is nothing to remove.
    pub fn remove_network(&self, subnet: Subnet, bridge: &str) -> Result<(), NftError> {
        let sets = network_elements("remove network", subnet, bridge)?;
        let mut batch = Batch::new();
        for op in [Op::Add, Op::Delete] {
            for (set, elems) in &sets {
                // The end element at address 0 is every interval's, not this subnet's.
                let own = match *set == subnet_sets(subnet).0 {
                    true => &elems[1..],
                    false => &elems[..],
                };
                batch.elements(op, TABLE, set, own);
            }
        }
        match socket::commit("remove network", &network_object(subnet, bridge), batch) {
            Err(e) if e.is_missing() => {}
            other => other?,
        }
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

/// `pier_subnets4 198.18.0.0/24, pier_bridges pier0`, for error messages.
fn network_object(subnet: Subnet, bridge: &str) -> String {
    format!(
        "{} {subnet}, {} {bridge}",
        subnet_sets(subnet).0,
        rules::BRIDGES
    )
}

/// The elements registering `bridge` with `subnet`, by set: the subnet as an interval (an
/// end element at address 0, as nft adds to an interval set, then the subnet's start and the
/// end flagged past its last address), the bridge's name, and `bridge . subnet` as a
/// concatenated interval.
fn network_elements(
    step: &'static str,
    subnet: Subnet,
    bridge: &str,
) -> Result<Vec<(&'static str, Vec<Elem>)>, NftError> {
    if !is_ifname(bridge) {
        return Err(NftError::BadIfname {
            step,
            name: bridge.to_string(),
        });
    }
    let (subnets, nets) = subnet_sets(subnet);
    let (first, last) = (subnet.addr(), last_addr(subnet));
    let pair = Elem {
        key_end: Some(Concat::default().ifname(bridge).addr(last).done()),
        ..Elem::key(Concat::default().ifname(bridge).addr(first).done())
    };
    Ok(vec![
        (subnets, interval(subnet)),
        (
            rules::BRIDGES,
            vec![Elem::key(Concat::default().ifname(bridge).done())],
        ),
        (nets, vec![pair]),
    ])
}

/// `subnet` as interval-set elements, as nft adds them: an end element at address 0 (every
/// interval's, never deleted with one), the subnet's first address, and an end element just past
/// its last address (none at the top of the address space).
fn interval(subnet: Subnet) -> Vec<Elem> {
    let zero = match subnet.addr() {
        IpAddr::V4(_) => IpAddr::from([0u8; 4]),
        IpAddr::V6(_) => IpAddr::from([0u8; 16]),
    };
    let end = |addr| Elem {
        interval_end: true,
        ..Elem::key(Concat::default().addr(addr).done())
    };
    let mut elems = vec![
        end(zero),
        Elem::key(Concat::default().addr(subnet.addr()).done()),
    ];
    elems.extend(next_addr(last_addr(subnet)).map(end));
    elems
}

fn last_addr(subnet: Subnet) -> IpAddr {
    subnet.nth(subnet.size() - 1).unwrap_or(subnet.addr())
}

/// The address after `addr` (None past the last one).
fn next_addr(addr: IpAddr) -> Option<IpAddr> {
    match addr {
        IpAddr::V4(a) => u32::from(a)
            .checked_add(1)
            .map(|n| IpAddr::from(n.to_be_bytes())),
        IpAddr::V6(a) => u128::from(a)
            .checked_add(1)
            .map(|n| IpAddr::from(n.to_be_bytes())),
    }
}

/// The key of the held-ports set: `proto . port`.
fn held_key(proto: Proto, port: u16) -> Vec<u8> {
    Concat::default().proto(proto.number()).port(port).done()
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
        let elem = specific.element("");
        assert_eq!(elem.key, [198, 18, 0, 1, 17, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        assert_eq!(
            elem.data.as_deref(),
            Some(&[198, 19, 0, 2, 0, 80, 0, 0][..])
        );
        assert_eq!(elem.comment, None);
        assert_eq!(
            Mapping::from_element("pier_dnat4", &elem),
            Some((specific, String::new()))
        );
        let wildcard = mapping(None);
        assert_eq!(wildcard.map(), "pier_dnat4_any");
        let elem = wildcard.element("c1");
        assert_eq!(elem.key, [17, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        assert_eq!(
            Mapping::from_element("pier_dnat4_any", &elem),
            Some((wildcard, "c1".to_string()))
        );
        assert_eq!(Mapping::from_element("pier_dnat4", &elem), None);
        let v6 = Mapping {
            host: None,
            container: "2001:2::2".parse().unwrap(),
            ..wildcard
        };
        assert_eq!(v6.map(), "pier_dnat6_any");
        let elem = v6.element("c2");
        assert_eq!(elem.data.as_ref().map(Vec::len), Some(20));
        assert_eq!(
            Mapping::from_element("pier_dnat6_any", &elem),
            Some((v6, "c2".to_string()))
        );
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
    fn a_network_registers_its_subnet_as_an_interval_and_its_bridge() {
        let sets = network_elements("t", "198.18.0.0/24".parse().unwrap(), "pier0").unwrap();
        let (name, range) = &sets[0];
        assert_eq!(*name, "pier_subnets4");
        let keys: Vec<(&[u8], bool)> = range.iter().map(|e| (&e.key[..], e.interval_end)).collect();
        // What nft 1.0.6 sends for `{ 198.18.0.0/24 }` into an empty interval set.
        let nft: [(&[u8], bool); 3] = [
            (&[0, 0, 0, 0], true),
            (&[198, 18, 0, 0], false),
            (&[198, 18, 1, 0], true),
        ];
        assert_eq!(keys, nft);
        let pair = &sets[2].1[0];
        assert_eq!(&pair.key_end.as_ref().unwrap()[16..], [198, 18, 0, 255]);
        let top = network_elements("t", "255.255.255.0/24".parse().unwrap(), "b").unwrap();
        assert_eq!(top[0].1.len(), 2, "no end element past the last address");
        assert_eq!(
            next_addr("::1".parse().unwrap()),
            Some("::2".parse().unwrap())
        );
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
