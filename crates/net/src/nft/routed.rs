//! Routed bridge networks: Docker 28's per-network gateway mode `routed`
//! (`com.docker.network.bridge.gateway_mode_ipv4=routed`, `..._ipv6=routed`).
//!
//! Theory of operation: a routed network's subnet is an element of `pier_routed4`/`6` (rules.rs,
//! interval sets like `pier_subnets4`/`6`). The table's rules consult it twice: egress from a
//! routed subnet is not masqueraded (it keeps its source address), and the drop of traffic
//! entering a container subnet from outside pier's bridges spares a routed subnet, so a remote
//! client with a route to the subnet reaches its containers directly. Bridge-to-bridge isolation
//! and hairpin masquerade do not look at the set: they hold for routed networks too. Making a
//! subnet routed is an element add over nfnetlink (a no-op when present); unmaking it adds then
//! deletes in one transaction (idempotent without a listing, as [`Table::remove_network`] does),
//! and a missing table or set means nothing is routed. Where Docker's iptables-nft `ip filter FORWARD` drops
//! by policy (docker.rs), inbound IPv4 connections to a routed subnet also need an accept there:
//! one rule `ip daddr SUBNET accept`, commented "pier", inserted at the top of `DOCKER-USER`
//! (else `FORWARD`), so it precedes Docker's own `return`; its first match is on the subnet, so
//! the network's removal (docker.rs `remove_subnet`) and the table's teardown take it too.
//! Privileges: `CAP_NET_ADMIN` in the calling thread's network namespace.
//! Tests: unit tests below; crates/net/tests/priv_nft.rs (`routed_*`).
use std::net::IpAddr;

use serde_json::{json, Value};

use super::run::{apply, list, objects};
use super::wire::{Batch, Op};
use super::{docker, interval, rules, socket, NftError, Table, TABLE};
use crate::Subnet;

/// Docker's chains pier may hold rules in, as docker.rs knows them.
const DOCKER_CHAINS: [&str; 2] = ["DOCKER-USER", "FORWARD"];
const COMMENT: &str = "pier";

impl Table {
    /// Makes `subnet` (a registered container subnet) routed, or not: reachable by routing from
    /// outside pier's bridges, with egress that keeps its source address. Idempotent. Making a
    /// subnet routed needs the table ([`Table::ensure`]); unmaking it without one is no error.
    pub fn set_routed(&self, subnet: Subnet, routed: bool) -> Result<(), NftError> {
        let (set, elems) = (routed_set(subnet), interval(subnet));
        let object = format!("{set} {subnet}");
        let mut batch = Batch::new();
        batch.elements(Op::Add, TABLE, set, &elems);
        if routed {
            socket::commit("mark subnet routed", &object, batch)?;
        } else {
            // The end element at address 0 is every interval's, not this subnet's.
            batch.elements(Op::Delete, TABLE, set, &elems[1..]);
            match socket::commit("unmark routed subnet", &object, batch) {
                Err(e) if e.is_missing() => {}
                other => other?,
            }
        }
        docker_accept(subnet, routed)
    }
}

/// The routed set of `subnet`'s family.
fn routed_set(subnet: Subnet) -> &'static str {
    match subnet.addr() {
        IpAddr::V4(_) => rules::ROUTED4,
        IpAddr::V6(_) => rules::ROUTED6,
    }
}

/// Adds (or removes) the accept for inbound flows to a routed IPv4 subnet in Docker's chain.
/// Only needed, and only added, where Docker's FORWARD drops by policy; removal looks in both
/// chains whatever the policy is now.
fn docker_accept(subnet: Subnet, routed: bool) -> Result<(), NftError> {
    let IpAddr::V4(addr) = subnet.addr() else {
        return Ok(());
    };
    let right = json!({"prefix": {"addr": addr.to_string(), "len": subnet.prefix()}});
    if routed {
        let Some(chain) = docker::hook_chain()? else {
            return Ok(());
        };
        if accept_rules(&right)?.iter().any(|(c, _)| *c == chain) {
            return Ok(());
        }
        let expr = json!([
            {"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}},
                "right": right}},
            {"accept": null}
        ]);
        let rule = json!({"family": "ip", "table": "filter", "chain": chain,
            "comment": COMMENT, "expr": expr});
        return apply(
            "accept routed subnet in Docker's filter",
            &format!("ip filter {chain} {subnet}"),
            vec![json!({"insert": {"rule": rule}})],
        );
    }
    let existing = accept_rules(&right)?;
    if existing.is_empty() {
        return Ok(());
    }
    let deletes = existing.into_iter().map(|(chain, handle)| {
        json!({"delete": {"rule": {"family": "ip", "table": "filter", "chain": chain,
            "handle": handle}}})
    });
    apply(
        "remove routed accept from Docker's filter",
        &format!("ip filter {subnet}"),
        deletes.collect(),
    )
}

/// pier's `ip daddr SUBNET accept` rules in Docker's chains: (chain, handle).
fn accept_rules(right: &Value) -> Result<Vec<(&'static str, Value)>, NftError> {
    let mut found = Vec::new();
    for chain in DOCKER_CHAINS {
        let Some(listing) = list("list Docker's chain", &["chain", "ip", "filter", chain])? else {
            continue;
        };
        let ours = objects(&listing, "rule").filter(|r| is_routed_accept(r, right));
        found.extend(ours.map(|r| (chain, r["handle"].clone())));
    }
    Ok(found)
}

/// Whether `rule` (as nft lists it) is exactly pier's routed accept for the subnet `right`.
fn is_routed_accept(rule: &Value, right: &Value) -> bool {
    let expr = &rule["expr"];
    rule["comment"] == COMMENT
        && expr.as_array().is_some_and(|e| e.len() == 2)
        && expr[0]["match"]["left"]["payload"]["field"] == "daddr"
        && expr[0]["match"]["right"] == *right
        && expr[1].get("accept").is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subnet_is_an_interval_from_its_first_address_to_past_its_last() {
        let elems = interval("198.18.4.0/24".parse().unwrap());
        let keys: Vec<(Vec<u8>, bool)> = elems
            .iter()
            .map(|e| (e.key.clone(), e.interval_end))
            .collect();
        assert_eq!(
            keys,
            [
                (vec![0, 0, 0, 0], true),
                (vec![198, 18, 4, 0], false),
                (vec![198, 18, 5, 0], true)
            ]
        );
        let top = interval("255.255.255.0/24".parse().unwrap());
        assert_eq!(top.len(), 2, "no end past the last address");
    }

    #[test]
    fn the_set_follows_the_family() {
        assert_eq!(routed_set("198.18.4.0/24".parse().unwrap()), "pier_routed4");
        assert_eq!(
            routed_set("2001:2:0:4::/64".parse().unwrap()),
            "pier_routed6"
        );
    }

    #[test]
    fn only_the_exact_routed_accept_is_recognised() {
        let right = json!({"prefix": {"addr": "198.18.4.0", "len": 24}});
        let daddr = json!({"payload": {"protocol": "ip", "field": "daddr"}});
        let rule = |comment: &str, extra: Option<Value>| {
            let mut expr = vec![json!({"match": {"op": "==", "left": daddr, "right": right}})];
            expr.extend(extra);
            expr.push(json!({"accept": null}));
            json!({"comment": comment, "handle": 7, "expr": expr})
        };
        assert!(is_routed_accept(&rule("pier", None), &right));
        assert!(!is_routed_accept(&rule("other", None), &right));
        let established = json!({"match": {"op": "in", "left": {"ct": {"key": "state"}},
            "right": ["established", "related"]}});
        assert!(!is_routed_accept(&rule("pier", Some(established)), &right));
        let other = json!({"prefix": {"addr": "198.18.5.0", "len": 24}});
        assert!(!is_routed_accept(&rule("pier", None), &other));
    }
}
