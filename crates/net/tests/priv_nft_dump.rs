//! Privileged test of the listing a port pick makes (`Table::published`): its four map dumps
//! share one NETLINK_NETFILTER socket and still read every map right.
//!
//! The test runs itself again under `strace -f -e trace=socket,chdir` with
//! [`CHILD`] set; the child makes an anonymous network namespace, the `inet pier` table in it
//! and one element in each of the four DNAT maps, then marks the moment with `chdir(".")` and
//! lists. The parent counts the netfilter sockets the trace shows after the mark. Dropping the
//! namespace frees everything; the host's own namespace is never touched. Needs root and strace:
//! skips with a reason outside CI, fails under CI=true.
use std::net::IpAddr;
use std::process::Command;

use pier_net::netns::NetNs;
use pier_net::nft::{Mapping, Proto, Table};

// The shared support also holds helpers this test does not need.
#[allow(dead_code)]
mod support;

/// Set in the traced child's environment.
const CHILD: &str = "PIER_TEST_NFT_DUMP_CHILD";
const TEST: &str = "a_listing_dumps_the_four_maps_on_one_socket";

/// One mapping per DNAT map: IPv4 and IPv6 containers, a specific host address or none.
fn mappings() -> Vec<Mapping> {
    use support::ip;
    let mapping = |host: Option<IpAddr>, container: IpAddr, host_port| Mapping {
        host,
        proto: Proto::Tcp,
        host_port,
        container,
        container_port: 80,
    };
    vec![
        mapping(Some(ip("198.18.1.1")), ip("198.18.2.2"), 8081),
        mapping(None, ip("198.18.2.2"), 8082),
        mapping(Some(ip("2001:2::1")), ip("2001:2:0:2::2"), 8083),
        mapping(None, ip("2001:2:0:2::2"), 8084),
    ]
}

/// The traced side: publishes, marks, lists; prints what it listed.
fn child() {
    let netns = NetNs::new_anonymous().unwrap();
    let listed = netns
        .run(|| {
            Table.ensure().unwrap();
            Table.publish_owned(&mappings(), "pier-test").unwrap();
            std::env::set_current_dir(".").unwrap();
            Table.published().unwrap()
        })
        .unwrap();
    let mut ports: Vec<u16> = listed.iter().map(|(m, _)| m.host_port).collect();
    ports.sort();
    assert_eq!(ports, [8081, 8082, 8083, 8084], "every map listed");
    assert!(listed.iter().all(|(_, owner)| owner == "pier-test"));
}

#[test]
fn a_listing_dumps_the_four_maps_on_one_socket() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    if !support::privileged(TEST, "creates a network namespace and an nftables table") {
        return;
    }
    if Command::new("strace").arg("-V").output().is_err() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "{TEST} needs strace under CI"
        );
        eprintln!("skipping: {TEST} needs strace");
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap();
    let trace = dir.path().join("trace");
    let out = Command::new("strace")
        .args([
            "-f",
            "-qq",
            "-e",
            "trace=socket,chdir",
            "-e",
            "signal=none",
            "-o",
        ])
        .arg(&trace)
        .arg(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "traced child: {out:?}");
    let text = std::fs::read_to_string(&trace).unwrap();
    let after_mark = text
        .lines()
        .skip_while(|l| !l.contains("chdir(\".\")"))
        .filter(|l| l.contains("NETLINK_NETFILTER"))
        .count();
    assert!(
        text.contains("chdir(\".\")"),
        "no mark in the trace:\n{text}"
    );
    assert_eq!(after_mark, 1, "netfilter sockets of one listing:\n{text}");
}
