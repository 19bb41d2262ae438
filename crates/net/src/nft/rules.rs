//! The text of pier's `inet pier` table in nft's native syntax: its maps, sets, chains and
//! rules (one `nft -f -` transaction), and its map and set elements.
//!
//! Native syntax, not JSON: nft 1.0.6 (Debian 12) cannot take a map with concatenated data
//! (`: ipv4_addr . inet_service`) in JSON input: the map is created broken ("set is not a map"
//! on element add) and a `dnat ... map` rule over it crashes nft (SIGSEGV). The text parser
//! handles both, so the table and its elements are written as text; listings are read as JSON.
use std::fmt::Write;

use super::TABLE;

pub(crate) const DNAT4: &str = "pier_dnat4";
pub(crate) const DNAT4_ANY: &str = "pier_dnat4_any";
pub(crate) const SUBNETS4: &str = "pier_subnets4";
pub(crate) const BRIDGES: &str = "pier_bridges";

/// A transport packet for one of this host's addresses.
const LOCAL_DADDR: &str = "meta nfproto ipv4 meta l4proto { tcp, udp, sctp } fib daddr type local";
/// Loopback destinations are the ebpf engine's (DNAT to them needs route_localnet).
const NOT_LOOPBACK: &str = "ip daddr != 127.0.0.0/8";
const DNAT_SPECIFIC: &str = "dnat ip to ip daddr . meta l4proto . th dport map @pier_dnat4";
const DNAT_ANY: &str = "dnat ip to meta l4proto . th dport map @pier_dnat4_any";

/// The table, its maps and sets, its four base chains, then each chain flushed and refilled:
/// replacing the rules in the same transaction keeps `ensure` idempotent and leaves elements
/// alone.
pub(crate) fn table() -> String {
    let t = format!("inet {TABLE}");
    let mut s = format!("add table {t}\n");
    let target = "ipv4_addr . inet_service";
    let _ = writeln!(
        s,
        "add map {t} {DNAT4} {{ type ipv4_addr . inet_proto . inet_service : {target}; }}"
    );
    let _ = writeln!(
        s,
        "add map {t} {DNAT4_ANY} {{ type inet_proto . inet_service : {target}; }}"
    );
    let _ = writeln!(
        s,
        "add set {t} {SUBNETS4} {{ type ipv4_addr; flags interval; }}"
    );
    let _ = writeln!(s, "add set {t} {BRIDGES} {{ type ifname; }}");
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

const CHAINS: [(&str, &str, &str, &str); 4] = [
    ("prerouting", "nat", "prerouting", "dstnat"),
    ("output", "nat", "output", "-100"),
    ("postrouting", "nat", "postrouting", "srcnat"),
    ("forward", "filter", "forward", "filter"),
];

/// Hairpin (a DNATed flow from a container subnet to a container subnet) is masqueraded, or
/// the reply would go container to container past the host's conntrack; so is container
/// egress leaving through anything but a pier bridge. Nothing else is. Forwarding accepts
/// replies and DNATed flows, and drops anything else entering a container subnet from outside
/// pier's bridges: a port published on 127.0.0.1 or one host address must not be reachable by
/// a remote client routing to the container's address directly.
fn rules() -> Vec<(&'static str, String)> {
    let mut rules = Vec::new();
    for dnat in [DNAT_SPECIFIC, DNAT_ANY] {
        rules.push(("prerouting", format!("{LOCAL_DADDR} {dnat}")));
        rules.push(("output", format!("{NOT_LOOPBACK} {LOCAL_DADDR} {dnat}")));
    }
    let subnets = format!("@{SUBNETS4}");
    rules.push((
        "postrouting",
        format!("ct status dnat ip saddr {subnets} ip daddr {subnets} masquerade"),
    ));
    rules.push((
        "postrouting",
        format!("ip saddr {subnets} oifname != @{BRIDGES} masquerade"),
    ));
    rules.push(("forward", "ct state established,related accept".to_string()));
    rules.push(("forward", "ct status dnat accept".to_string()));
    rules.push((
        "forward",
        format!("ip daddr {subnets} iifname != @{BRIDGES} drop"),
    ));
    rules
}

/// `VERB element inet pier SET { E1, E2, ... }`
pub(crate) fn elements(verb: &str, set: &str, elems: &[String]) -> String {
    format!(
        "{verb} element inet {TABLE} {set} {{ {} }}\n",
        elems.join(", ")
    )
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
            assert!(dnat(chain, "map @pier_dnat4"), "{text}");
            assert!(dnat(chain, "map @pier_dnat4_any"), "{text}");
        }
        assert!(text.contains("output ip daddr != 127.0.0.0/8 "), "{text}");
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
        assert_eq!(masquerades.len(), 2, "{text}");
        assert!(masquerades[0]
            .contains("ct status dnat ip saddr @pier_subnets4 ip daddr @pier_subnets4"));
        assert!(masquerades[1].contains("oifname != @pier_bridges"));
    }
}
