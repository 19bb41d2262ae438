//! The text of pier's `inet pier` table in nft's native syntax: its maps, sets, chains and
//! rules (one `nft -f -` transaction). Elements are written by wire.rs.
//!
//! Native syntax, not JSON: nft 1.0.6 (Debian 12) cannot take a map with concatenated data
//! (`: ipv4_addr . inet_service`) in JSON input: the map is created broken ("set is not a map"
//! on element add) and a `dnat ... map` rule over it crashes nft (SIGSEGV). The text parser
//! handles both, so the table and its elements are written as text; listings are read as JSON.
use std::fmt::Write;

use super::TABLE;

pub(crate) const DNAT4: &str = "pier_dnat4";
pub(crate) const DNAT4_ANY: &str = "pier_dnat4_any";
pub(crate) const DNAT6: &str = "pier_dnat6";
pub(crate) const DNAT6_ANY: &str = "pier_dnat6_any";
/// Every DNAT map, in the order scripts and listings go through them.
pub(crate) const DNAT_MAPS: [&str; 4] = [DNAT4, DNAT4_ANY, DNAT6, DNAT6_ANY];
pub(crate) const SUBNETS4: &str = "pier_subnets4";
pub(crate) const SUBNETS6: &str = "pier_subnets6";
pub(crate) const BRIDGES: &str = "pier_bridges";
pub(crate) const BRIDGE_NETS4: &str = "pier_bridge_nets4";
pub(crate) const BRIDGE_NETS6: &str = "pier_bridge_nets6";
pub(crate) const HELD: &str = "pier_held";
/// The subnets of routed networks (Docker's `gateway_mode_ipv4=routed`): reachable by routing
/// from outside pier's bridges, and their egress keeps its source address.
pub(crate) const ROUTED4: &str = "pier_routed4";
pub(crate) const ROUTED6: &str = "pier_routed6";

/// One address family's names and nft words.
struct Family {
    /// nft's payload and dnat family (`ip`, `ip6`).
    ip: &'static str,
    addr_type: &'static str,
    dnat: &'static str,
    dnat_any: &'static str,
    subnets: &'static str,
    bridge_nets: &'static str,
    routed: &'static str,
    loopback: &'static str,
}

const V4: Family = Family {
    ip: "ip",
    addr_type: "ipv4_addr",
    dnat: DNAT4,
    dnat_any: DNAT4_ANY,
    subnets: SUBNETS4,
    bridge_nets: BRIDGE_NETS4,
    routed: ROUTED4,
    loopback: "127.0.0.0/8",
};

const V6: Family = Family {
    ip: "ip6",
    addr_type: "ipv6_addr",
    dnat: DNAT6,
    dnat_any: DNAT6_ANY,
    subnets: SUBNETS6,
    bridge_nets: BRIDGE_NETS6,
    routed: ROUTED6,
    loopback: "::1",
};

/// A transport packet for one of this host's addresses.
const LOCAL_DADDR: &str = "meta l4proto { tcp, udp, sctp } fib daddr type local";
/// The same, for an address of the interface the packet came in on.
const LOCAL_ON_IIF: &str = "meta l4proto { tcp, udp, sctp } fib daddr . iif type local";

/// The table, its maps and sets, its five base chains, then each chain flushed and refilled:
/// replacing the rules in the same transaction keeps `ensure` idempotent and leaves elements
/// alone.
pub(crate) fn table() -> String {
    let t = format!("inet {TABLE}");
    let mut s = format!("add table {t}\n");
    for f in [V4, V6] {
        let (a, target) = (f.addr_type, format!("{} . inet_service", f.addr_type));
        let _ = writeln!(
            s,
            "add map {t} {} {{ type {a} . inet_proto . inet_service : {target}; }}",
            f.dnat
        );
        let _ = writeln!(
            s,
            "add map {t} {} {{ type inet_proto . inet_service : {target}; }}",
            f.dnat_any
        );
        let _ = writeln!(
            s,
            "add set {t} {} {{ type {a}; flags interval; }}",
            f.subnets
        );
        let _ = writeln!(
            s,
            "add set {t} {} {{ type ifname . {a}; flags interval; }}",
            f.bridge_nets
        );
        let _ = writeln!(
            s,
            "add set {t} {} {{ type {a}; flags interval; }}",
            f.routed
        );
    }
    let _ = writeln!(s, "add set {t} {BRIDGES} {{ type ifname; }}");
    let _ = writeln!(
        s,
        "add set {t} {HELD} {{ type inet_proto . inet_service; }}"
    );
    for (name, kind, hook, prio) in CHAINS {
        let _ = writeln!(
            s,
            "add chain {t} {name} {{ type {kind} hook {hook} priority {prio}; policy accept; }}"
        );
        let _ = writeln!(s, "flush chain {t} {name}");
    }
    for (chain, rule) in rules() {
        let _ = writeln!(s, "add rule {t} {chain} {rule}");
    }
    s
}

const CHAINS: [(&str, &str, &str, &str); 5] = [
    ("prerouting", "nat", "prerouting", "dstnat"),
    ("output", "nat", "output", "-100"),
    ("postrouting", "nat", "postrouting", "srcnat"),
    ("forward", "filter", "forward", "filter"),
    ("input", "filter", "input", "filter"),
];

/// DNAT: a port published on a specific address is DNATed only for packets addressed to it that
/// came in on its own interface or from a pier bridge (hairpin); the wildcard for any local
/// address. Loopback destinations are never DNATed (that needs route_localnet, the hole Docker
/// shipped): local clients of 127.0.0.1 and ::1 are the ebpf engine's (or a proxy's). Packets
/// for a held port (published on a specific address) that were not DNATed reach `input` and are
/// dropped there.
/// Hairpin (a DNATed flow from a container subnet to a container subnet) is masqueraded, or
/// the reply would go container to container past the host's conntrack; so is container
/// egress leaving through anything but a pier bridge, unless its network is routed. Nothing else
/// is. Forwarding accepts replies and DNATed flows, drops traffic from one pier bridge to another
/// bridge's subnet (network isolation, routed networks included), and drops anything else
/// entering a container subnet from outside pier's bridges: a port published on 127.0.0.1 or
/// one host address must not be reachable by a remote client routing to the container's address
/// directly. A routed network's subnet is exempt from that last drop (Docker's routed gateway
/// mode: the network is reached by routing, and its egress is not masqueraded).
fn rules() -> Vec<(&'static str, String)> {
    let mut rules = Vec::new();
    for f in [V4, V6] {
        rules.extend(dnat_rules(&f));
    }
    for f in [V4, V6] {
        let (ip, subnets) = (f.ip, format!("@{}", f.subnets));
        rules.push((
            "postrouting",
            format!("ct status dnat {ip} saddr {subnets} {ip} daddr {subnets} masquerade"),
        ));
        rules.push((
            "postrouting",
            format!(
                "{ip} saddr {subnets} {ip} saddr != @{} oifname != @{BRIDGES} masquerade",
                f.routed
            ),
        ));
    }
    rules.push(("forward", "ct state established,related accept".to_string()));
    rules.push(("forward", "ct status dnat accept".to_string()));
    for f in [V4, V6] {
        let (ip, subnets, nets) = (f.ip, format!("@{}", f.subnets), f.bridge_nets);
        let routed = f.routed;
        rules.push((
            "forward",
            format!("iifname @{BRIDGES} {ip} daddr {subnets} iifname . {ip} daddr != @{nets} drop"),
        ));
        rules.push((
            "forward",
            format!("{ip} daddr {subnets} {ip} daddr != @{routed} iifname != @{BRIDGES} drop"),
        ));
    }
    rules.push((
        "input",
        format!("ct status != dnat meta l4proto . th dport @{HELD} drop"),
    ));
    rules
}

fn dnat_rules(f: &Family) -> Vec<(&'static str, String)> {
    let (ip, lo) = (f.ip, f.loopback);
    let specific = format!(
        "dnat {ip} to {ip} daddr . meta l4proto . th dport map @{}",
        f.dnat
    );
    let any = format!("dnat {ip} to meta l4proto . th dport map @{}", f.dnat_any);
    let not_lo = format!("{ip} daddr != {lo}");
    vec![
        ("prerouting", format!("{not_lo} {LOCAL_ON_IIF} {specific}")),
        (
            "prerouting",
            format!("iifname @{BRIDGES} {not_lo} {LOCAL_DADDR} {specific}"),
        ),
        ("prerouting", format!("{not_lo} {LOCAL_DADDR} {any}")),
        ("output", format!("{not_lo} {LOCAL_DADDR} {specific}")),
        ("output", format!("{not_lo} {LOCAL_DADDR} {any}")),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dnat_goes_through_the_two_maps_in_both_nat_hooks() {
        let text = table();
        let dnat = |chain: &str, map: &str| {
            text.lines()
                .any(|l| l.starts_with(&format!("add rule inet pier {chain} ")) && l.ends_with(map))
        };
        for chain in ["prerouting", "output"] {
            for map in [
                "pier_dnat4",
                "pier_dnat4_any",
                "pier_dnat6",
                "pier_dnat6_any",
            ] {
                assert!(dnat(chain, &format!("map @{map}")), "{text}");
            }
        }
        assert!(text.contains("output ip daddr != 127.0.0.0/8 "), "{text}");
        assert!(text.contains("prerouting ip6 daddr != ::1 "), "{text}");
    }

    #[test]
    fn every_chain_is_flushed_before_its_rules_are_added() {
        let text = table();
        for (name, ..) in CHAINS {
            let flush = text
                .find(&format!("flush chain inet pier {name}\n"))
                .unwrap();
            let first = text.find(&format!("add rule inet pier {name} ")).unwrap();
            assert!(flush < first, "{text}");
        }
    }

    #[test]
    fn masquerade_is_only_for_hairpin_and_egress() {
        let text = table();
        let masquerades: Vec<&str> = text.lines().filter(|l| l.ends_with("masquerade")).collect();
        assert_eq!(masquerades.len(), 4, "{text}");
        assert!(masquerades[0]
            .contains("ct status dnat ip saddr @pier_subnets4 ip daddr @pier_subnets4"));
        assert!(masquerades[1].contains("oifname != @pier_bridges"));
        assert!(masquerades[2].contains("ip6 saddr @pier_subnets6"));
    }

    #[test]
    fn routed_subnets_are_neither_masqueraded_nor_dropped_from_outside() {
        let text = table();
        for (ip, n) in [("ip", 4), ("ip6", 6)] {
            let routed = format!("pier_routed{n}");
            let set = format!("add set inet pier {routed} {{ type ipv{n}_addr; flags interval; }}");
            assert!(text.contains(&set), "{text}");
            let egress = format!(
                "postrouting {ip} saddr @pier_subnets{n} {ip} saddr != @{routed} oifname != \
                 @pier_bridges masquerade"
            );
            assert!(text.contains(&egress), "{egress} in {text}");
            let inbound = format!("{ip} daddr != @{routed} iifname != @pier_bridges drop");
            assert!(text.contains(&inbound), "{inbound} in {text}");
        }
        let hairpin = text.lines().filter(|l| l.contains("ct status dnat ip"));
        assert!(hairpin.clone().count() == 2 && hairpin.clone().all(|l| !l.contains("routed")));
        let isolation: Vec<&str> = text
            .lines()
            .filter(|l| l.contains("iifname @pier_bridges") && l.ends_with("drop"))
            .collect();
        assert_eq!(isolation.len(), 2, "{text}");
        assert!(isolation.iter().all(|l| !l.contains("routed")), "{text}");
    }
}
