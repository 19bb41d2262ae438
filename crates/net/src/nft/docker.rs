//! Coexistence with Docker: when the iptables-nft `ip filter` table has a `FORWARD` chain with
//! policy drop, an accept in pier's own table does not save pier's traffic (a drop in any
//! table wins), so pier adds accept rules, commented "pier", to Docker's `DOCKER-USER` chain
//! (its sanctioned hook) or, without one, to `FORWARD`; teardown deletes every rule so
//! commented, found by handle. They are inserted at the top: Docker 20.10 ends DOCKER-USER with
//! a `return`, and its FORWARD jumps to chains that drop, so anything appended is never reached.
use serde_json::{json, Value};
use std::net::IpAddr;

use super::run::{apply, list, objects};
use super::NftError;

const COMMENT: &str = "pier";
const CHAINS: [&str; 2] = ["DOCKER-USER", "FORWARD"];

/// The chain to put pier's accept rules in, if the host's `ip filter` FORWARD drops by policy.
pub(crate) fn hook_chain() -> Result<Option<&'static str>, NftError> {
    let Some(listing) = list("list ip filter", &["table", "ip", "filter"])? else {
        return Ok(None);
    };
    let chain = |name: &str| {
        objects(&listing, "chain")
            .find(|c| c["name"] == name)
            .cloned()
    };
    let drops = chain("FORWARD").is_some_and(|c| c["policy"] == "drop");
    if !drops {
        return Ok(None);
    }
    Ok(Some(if chain("DOCKER-USER").is_some() {
        "DOCKER-USER"
    } else {
        "FORWARD"
    }))
}

/// Accept rules in `ip filter <chain>` for a container subnet: its egress, and inbound flows
/// that are replies or DNATed to it; none added if pier's rules for the subnet are there.
pub(crate) fn allow(chain: &str, addr: &str, len: u8) -> Result<(), NftError> {
    let subnet = json!({"prefix": {"addr": addr, "len": len}});
    if has_rules_for(chain, &subnet)? {
        return Ok(());
    }
    let bodies = [
        vec![
            matches("==", payload("ip", "saddr"), subnet.clone()),
            accept(),
        ],
        vec![
            matches("==", payload("ip", "daddr"), subnet.clone()),
            ct_in("state", json!(["established", "related"])),
            accept(),
        ],
        vec![
            matches("==", payload("ip", "daddr"), subnet),
            ct_in("status", json!("dnat")),
            accept(),
        ],
    ];
    let commands = bodies
        .into_iter()
        .map(|expr| rule_command("insert", chain, json!({"expr": expr})));
    apply(
        "allow pier in Docker's filter",
        &format!("ip filter {chain} {addr}/{len}"),
        commands.collect(),
    )
}

/// Whether `chain` already holds a rule commented "pier" whose first match is on `subnet`.
fn has_rules_for(chain: &str, subnet: &Value) -> Result<bool, NftError> {
    let Some(listing) = list("list Docker's chain", &["chain", "ip", "filter", chain])? else {
        return Ok(false);
    };
    let found = objects(&listing, "rule")
        .filter(|rule| rule["comment"] == COMMENT)
        .any(|rule| rule["expr"][0]["match"]["right"] == *subnet);
    Ok(found)
}

fn rule_command(verb: &str, chain: &str, extra: Value) -> Value {
    let mut rule = json!({"family": "ip", "table": "filter", "chain": chain, "comment": COMMENT});
    if let (Some(rule), Some(extra)) = (rule.as_object_mut(), extra.as_object()) {
        rule.extend(extra.clone());
    }
    json!({ verb: {"rule": rule} })
}

/// Deletes every rule commented "pier" from Docker's chains (none is fine).
pub(crate) fn remove_all() -> Result<(), NftError> {
    remove_matching(|_| true)
}

/// Deletes pier's rules for one container subnet from Docker's chains (none is fine).
pub(crate) fn remove_subnet(subnet: crate::Subnet) -> Result<(), NftError> {
    let IpAddr::V4(addr) = subnet.addr() else {
        return Ok(());
    };
    let right = json!({"prefix": {"addr": addr.to_string(), "len": subnet.prefix()}});
    remove_matching(|rule| rule["expr"][0]["match"]["right"] == right)
}

/// Deletes the rules commented "pier" that `selects` picks, found by handle.
fn remove_matching(selects: impl Fn(&Value) -> bool) -> Result<(), NftError> {
    let mut commands = Vec::new();
    for chain in CHAINS {
        let Some(listing) = list("list Docker's chain", &["chain", "ip", "filter", chain])? else {
            continue;
        };
        let ours = objects(&listing, "rule").filter(|r| r["comment"] == COMMENT && selects(r));
        for rule in ours {
            commands.push(
                json!({"delete": {"rule": {"family": "ip", "table": "filter",
                "chain": chain, "handle": rule["handle"]}}}),
            );
        }
    }
    if commands.is_empty() {
        return Ok(());
    }
    apply("remove pier from Docker's filter", "ip filter", commands)
}

fn matches(op: &str, left: Value, right: Value) -> Value {
    json!({"match": {"op": op, "left": left, "right": right}})
}

fn payload(protocol: &str, field: &str) -> Value {
    json!({"payload": {"protocol": protocol, "field": field}})
}

fn ct_in(key: &str, right: Value) -> Value {
    matches("in", json!({"ct": {"key": key}}), right)
}

fn accept() -> Value {
    json!({"accept": null})
}
