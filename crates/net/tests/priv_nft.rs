//! Privileged tests of the nat engine (`pier_net::nft`) against the kernel's nftables.
//!
//! Each test builds its own three anonymous network namespaces: a "host" with a bridge
//! `pier-test-br` (198.18.2.1/24) to a "container" (198.18.2.2) and a veth `pier-test-r`
//! (198.18.1.1/24 and 198.18.1.5/24) to a "remote" client (198.18.1.2). `nft` is spawned from a
//! thread inside the host namespace, so every table, rule and sysctl is that namespace's;
//! dropping the namespaces' fds frees everything, also when an assertion fails. The host's own
//! namespace is never touched. Needs root: skips with a reason outside CI, fails under CI=true.
//! The `routed_*` tests add a second network (`pier-test-br2`, 198.18.3.0/24) left in nat mode
//! beside the routed one.
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use pier_net::netns::NetNs;
use pier_net::nft::{Mapping, Proto, Table};
use pier_net::{Netlink, Route};

mod support;

use support::{index, ip};

fn privileged() -> bool {
    support::privileged("priv_nft", "creates network namespaces and nftables tables")
}

struct Lab {
    host: NetNs,
    container: NetNs,
    remote: NetNs,
    server: TcpListener,
}

impl Lab {
    fn new() -> Lab {
        let lab = Lab {
            host: NetNs::new_anonymous().unwrap(),
            container: NetNs::new_anonymous().unwrap(),
            remote: NetNs::new_anonymous().unwrap(),
            server: TcpListener::bind("127.0.0.1:0").unwrap(),
        };
        lab.host
            .run(|| wire_host(&lab.container, &lab.remote))
            .unwrap();
        lab.container
            .run(|| inside("198.18.2.2", "198.18.2.1"))
            .unwrap();
        lab.remote
            .run(|| inside("198.18.1.2", "198.18.1.1"))
            .unwrap();
        let server = lab
            .container
            .run(|| TcpListener::bind("0.0.0.0:80").unwrap())
            .unwrap();
        Lab { server, ..lab }
    }

    /// Runs `nft` as the host would (in the host namespace).
    fn nft(&self, args: &[&str]) -> String {
        let out = self
            .host
            .run(|| Command::new("nft").args(args).output().unwrap())
            .unwrap();
        assert!(out.status.success(), "nft {args:?}: {out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    fn table<T: Send>(&self, work: impl FnOnce(&Table) -> T + Send) -> T {
        self.host.run(|| work(&Table)).unwrap()
    }

    /// Connects from `from` to `to`; on success returns the source address the server saw.
    fn connect(&self, from: &NetNs, to: &str) -> Option<SocketAddr> {
        seen_by(&self.server, from, to)
    }
}

/// Connects from `from` to `to`, served by `server`; on success the source address it saw.
fn seen_by(server: &TcpListener, from: &NetNs, to: &str) -> Option<SocketAddr> {
    let to: SocketAddr = to.parse().unwrap();
    let local = from
        .run(|| TcpStream::connect_timeout(&to, Duration::from_secs(3)))
        .unwrap()
        .ok()?;
    let (_accepted, peer) = server.accept().unwrap();
    drop(local);
    Some(peer)
}

/// A listener on `addr` inside `ns`.
fn listen_in(ns: &NetNs, addr: &str) -> TcpListener {
    ns.run(|| TcpListener::bind(addr).unwrap()).unwrap()
}

fn wire_host(container: &NetNs, remote: &NetNs) {
    let mut nl = Netlink::open().unwrap();
    nl.create_bridge("pier-test-br").unwrap();
    let bridge = index(&mut nl, "pier-test-br");
    nl.add_address(bridge, ip("198.18.2.1"), 24).unwrap();
    nl.set_up(bridge, true).unwrap();
    nl.create_veth("pier-test-c", "eth0", Some(container.fd()))
        .unwrap();
    let veth = index(&mut nl, "pier-test-c");
    nl.set_master(veth, bridge).unwrap();
    nl.set_up(veth, true).unwrap();
    hairpin_mode("pier-test-c");
    nl.create_veth("pier-test-r", "eth0", Some(remote.fd()))
        .unwrap();
    let uplink = index(&mut nl, "pier-test-r");
    nl.add_address(uplink, ip("198.18.1.1"), 24).unwrap();
    nl.add_address(uplink, ip("198.18.1.5"), 24).unwrap();
    nl.set_up(uplink, true).unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    std::fs::write("/proc/sys/net/ipv4/ip_forward", "1\n").unwrap();
}

/// With br_netfilter loaded (Docker loads it; bridge-nf-call-iptables is 1 in every new
/// namespace), a hairpin packet DNATed back to its own container is bridged, not routed, and
/// must leave by the port it came in: the port needs hairpin mode, as Docker sets it.
fn hairpin_mode(port: &str) {
    let args = [
        "link",
        "set",
        "dev",
        port,
        "type",
        "bridge_slave",
        "hairpin",
        "on",
    ];
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

fn inside(addr: &str, gateway: &str) {
    let mut nl = Netlink::open().unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    let eth0 = index(&mut nl, "eth0");
    nl.add_address(eth0, ip(addr), 24).unwrap();
    nl.set_up(eth0, true).unwrap();
    nl.add_route(&Route::default_via(ip(gateway))).unwrap();
}

fn mapping(host: Option<&str>, host_port: u16) -> Mapping {
    Mapping {
        host: host.map(|h| h.parse().unwrap()),
        proto: Proto::Tcp,
        host_port,
        container: "198.18.2.2".parse().unwrap(),
        container_port: 80,
    }
}

fn ready(lab: &Lab) {
    lab.table(|t| {
        t.ensure().unwrap();
        t.ensure().unwrap();
        t.add_network("198.18.2.0/24".parse().unwrap(), "pier-test-br")
            .unwrap();
    });
}

#[test]
fn publish_reaches_the_container_with_the_clients_address() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    ready(&lab);
    assert_eq!(lab.connect(&lab.remote, "198.18.1.1:8080"), None);
    lab.table(|t| t.publish(&[mapping(Some("198.18.1.1"), 8080)]).unwrap());

    let seen = lab
        .connect(&lab.remote, "198.18.1.1:8080")
        .expect("remote reaches 8080");
    assert_eq!(seen.ip(), ip("198.18.1.2"), "no SNAT for remote clients");
    let hairpin = lab
        .connect(&lab.container, "198.18.1.1:8080")
        .expect("hairpin");
    assert_eq!(hairpin.ip(), ip("198.18.2.1"), "hairpin is masqueraded");
    let local = lab
        .connect(&lab.host, "198.18.1.1:8080")
        .expect("host's own client");
    assert_eq!(local.ip(), ip("198.18.1.1"));
    assert_eq!(
        lab.connect(&lab.remote, "198.18.1.5:8080"),
        None,
        "other address"
    );

    lab.table(|t| t.unpublish(&[mapping(Some("198.18.1.1"), 8080)]).unwrap());
    assert_eq!(
        lab.connect(&lab.remote, "198.18.1.1:8080"),
        None,
        "unpublished"
    );
    lab.table(|t| t.teardown().unwrap());
    assert!(!lab.nft(&["list", "tables"]).contains("pier"));
}

#[test]
fn wildcard_publish_answers_on_every_host_address() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    ready(&lab);
    lab.table(|t| t.publish(&[mapping(None, 9090)]).unwrap());
    for addr in ["198.18.1.1:9090", "198.18.1.5:9090"] {
        let seen = lab.connect(&lab.remote, addr).expect(addr);
        assert_eq!(seen.ip(), ip("198.18.1.2"));
    }
    lab.table(|t| t.unpublish(&[mapping(None, 9090)]).unwrap());
    assert_eq!(lab.connect(&lab.remote, "198.18.1.5:9090"), None);
    lab.table(|t| t.teardown().unwrap());
}

#[test]
fn a_thousand_ports_publish_in_one_transaction() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    ready(&lab);
    let range: Vec<Mapping> = (20000..21000)
        .map(|p| mapping(Some("198.18.1.1"), p))
        .collect();
    let one = [mapping(Some("198.18.1.1"), 19999)];
    let (took_one, took_range) = lab.table(|t| {
        let start = Instant::now();
        t.publish(&one).unwrap();
        let took_one = start.elapsed();
        let start = Instant::now();
        t.publish(&range).unwrap();
        (took_one, start.elapsed())
    });
    eprintln!("publish: 1 element {took_one:?}, 1,000 elements {took_range:?}");
    let listed = lab.nft(&["-j", "list", "map", "inet", "pier", "pier_dnat4"]);
    assert_eq!(
        listed.matches("\"concat\": [\"198.18.1.1\"").count(),
        1001,
        "{listed}"
    );
    assert!(lab.connect(&lab.remote, "198.18.1.1:20500").is_some());

    let mut clash = range.clone();
    clash.push(mapping(Some("198.18.1.1"), 19999));
    lab.table(|t| t.unpublish(&range).unwrap());
    let err = lab.table(|t| t.unpublish(&clash).unwrap_err());
    assert!(err.to_string().contains("unpublish"), "{err}");
    assert_eq!(lab.connect(&lab.remote, "198.18.1.1:20500"), None);
    lab.table(|t| t.teardown().unwrap());
}

#[test]
fn direct_routing_to_a_container_works_only_without_pier() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    assert!(
        lab.connect(&lab.remote, "198.18.2.2:80").is_some(),
        "plain routing"
    );
    ready(&lab);
    assert_eq!(
        lab.connect(&lab.remote, "198.18.2.2:80"),
        None,
        "pier's drop"
    );
    lab.table(|t| t.teardown().unwrap());
}

#[test]
fn docker_user_chain_gets_pier_rules_when_docker_made_one() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    docker_filter(&lab);
    lab.nft(&["add", "chain", "ip", "filter", "DOCKER-USER"]);
    // Docker 20.10 (Debian 12's docker.io) ends DOCKER-USER with a return: pier's rules must
    // come before it.
    lab.nft(&["add", "rule", "ip", "filter", "DOCKER-USER", "return"]);
    lab.nft(&[
        "add",
        "rule",
        "ip",
        "filter",
        "FORWARD",
        "jump",
        "DOCKER-USER",
    ]);
    ready(&lab);
    lab.table(|t| t.publish(&[mapping(Some("198.18.1.1"), 8080)]).unwrap());
    assert!(lab.connect(&lab.remote, "198.18.1.1:8080").is_some());
    let user = lab.nft(&["list", "chain", "ip", "filter", "DOCKER-USER"]);
    assert!(user.contains("comment \"pier\""), "{user}");
    lab.table(|t| t.teardown().unwrap());
    let user = lab.nft(&["list", "chain", "ip", "filter", "DOCKER-USER"]);
    assert!(!user.contains("pier"), "{user}");
}

/// Docker's `ip filter` table with its FORWARD chain at policy drop, as dockerd leaves it.
fn docker_filter(lab: &Lab) {
    lab.nft(&["add", "table", "ip", "filter"]);
    lab.nft(&[
        "add",
        "chain",
        "ip",
        "filter",
        "FORWARD",
        "{ type filter hook forward priority 0; policy drop; }",
    ]);
}

#[test]
fn docker_forward_policy_drop_still_forwards_pier_traffic() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    docker_filter(&lab);
    lab.table(|t| {
        t.ensure().unwrap();
        t.publish(&[mapping(Some("198.18.1.1"), 8080)]).unwrap();
    });
    assert_eq!(
        lab.connect(&lab.remote, "198.18.1.1:8080"),
        None,
        "Docker's drop"
    );
    lab.table(|t| {
        t.add_network("198.18.2.0/24".parse().unwrap(), "pier-test-br")
            .unwrap()
    });
    let seen = lab
        .connect(&lab.remote, "198.18.1.1:8080")
        .expect("through Docker's FORWARD");
    assert_eq!(seen.ip(), ip("198.18.1.2"));
    lab.table(|t| {
        t.add_network("198.18.2.0/24".parse().unwrap(), "pier-test-br")
            .unwrap()
    });
    let forward = lab.nft(&["list", "chain", "ip", "filter", "FORWARD"]);
    assert_eq!(forward.matches("comment \"pier\"").count(), 3, "{forward}");

    lab.table(|t| t.teardown().unwrap());
    let forward = lab.nft(&["list", "chain", "ip", "filter", "FORWARD"]);
    assert!(!forward.contains("pier"), "{forward}");
    assert!(forward.contains("policy drop"), "{forward}");
    assert!(!lab.nft(&["list", "tables"]).contains("inet pier"));
}

/// A second pier network (bridge `pier-test-br2`, 198.18.3.0/24) with one container.
fn second_network(lab: &Lab) -> NetNs {
    let other = NetNs::new_anonymous().unwrap();
    lab.host
        .run(|| {
            let mut nl = Netlink::open().unwrap();
            nl.create_bridge("pier-test-br2").unwrap();
            let bridge = index(&mut nl, "pier-test-br2");
            nl.add_address(bridge, ip("198.18.3.1"), 24).unwrap();
            nl.set_up(bridge, true).unwrap();
            nl.create_veth("pier-test-o", "eth0", Some(other.fd()))
                .unwrap();
            let veth = index(&mut nl, "pier-test-o");
            nl.set_master(veth, bridge).unwrap();
            nl.set_up(veth, true).unwrap();
        })
        .unwrap();
    other.run(|| inside("198.18.3.2", "198.18.3.1")).unwrap();
    other
}

#[test]
fn pier_networks_are_isolated_from_each_other_unless_dnated() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    let other = second_network(&lab);
    assert!(
        lab.connect(&other, "198.18.2.2:80").is_some(),
        "plain routing between the bridges"
    );
    ready(&lab);
    lab.table(|t| {
        t.add_network("198.18.3.0/24".parse().unwrap(), "pier-test-br2")
            .unwrap();
        t.publish(&[mapping(Some("198.18.1.1"), 8080)]).unwrap();
    });
    assert_eq!(
        lab.connect(&other, "198.18.2.2:80"),
        None,
        "another pier network's container"
    );
    assert!(
        lab.connect(&other, "198.18.1.1:8080").is_some(),
        "a published port is reachable from another network"
    );
    lab.table(|t| t.teardown().unwrap());
}

#[test]
fn owners_read_back_and_a_specific_port_is_held_until_its_last_publish_goes() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    ready(&lab);
    let on_1 = mapping(Some("198.18.1.1"), 8080);
    let on_5 = mapping(Some("198.18.1.5"), 8080);
    lab.table(|t| {
        t.publish_owned(&[on_1], "c1").unwrap();
        t.publish_owned(&[on_5], "c2").unwrap();
        let mut owners: Vec<String> = t.published().unwrap().into_iter().map(|(_, o)| o).collect();
        owners.sort();
        assert_eq!(owners, ["c1", "c2"]);
        t.unpublish(&[on_1]).unwrap();
    });
    assert!(lab
        .nft(&["list", "set", "inet", "pier", "pier_held"])
        .contains("tcp . 8080"));
    lab.table(|t| t.unpublish(&[on_5]).unwrap());
    assert!(!lab
        .nft(&["list", "set", "inet", "pier", "pier_held"])
        .contains("8080"));
    lab.table(|t| t.teardown().unwrap());
}

#[test]
fn removing_one_network_keeps_the_others_and_can_repeat() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    docker_filter(&lab);
    lab.table(|t| {
        t.ensure().unwrap();
        t.add_network("198.18.2.0/24".parse().unwrap(), "pier-test-br")
            .unwrap();
        t.add_network("198.18.3.0/24".parse().unwrap(), "pier-test-br2")
            .unwrap();
    });
    for _ in 0..2 {
        lab.table(|t| {
            t.remove_network("198.18.3.0/24".parse().unwrap(), "pier-test-br2")
                .unwrap()
        });
        let table = lab.nft(&["list", "table", "inet", "pier"]);
        assert!(!table.contains("198.18.3.0/24"), "{table}");
        assert!(!table.contains("pier-test-br2"), "{table}");
        assert!(table.contains("198.18.2.0/24"), "{table}");
        assert!(table.contains("\"pier-test-br\""), "{table}");
        let forward = lab.nft(&["list", "chain", "ip", "filter", "FORWARD"]);
        assert!(!forward.contains("198.18.3.0/24"), "{forward}");
        assert_eq!(forward.matches("comment \"pier\"").count(), 3, "{forward}");
    }
    lab.table(|t| t.teardown().unwrap());
    lab.table(|t| {
        t.remove_network("198.18.2.0/24".parse().unwrap(), "pier-test-br")
            .unwrap()
    });
}

/// Both lab networks registered, the first (198.18.2.0/24) routed; a server in the second
/// network's container on port 80 and one in the remote namespace on port 81.
fn routed_lab(lab: &Lab) -> (NetNs, TcpListener, TcpListener) {
    let other = second_network(lab);
    ready(lab);
    lab.table(|t| {
        t.add_network("198.18.3.0/24".parse().unwrap(), "pier-test-br2")
            .unwrap();
        for _ in 0..2 {
            t.set_routed("198.18.2.0/24".parse().unwrap(), true)
                .unwrap();
        }
    });
    let other_server = listen_in(&other, "0.0.0.0:80");
    let remote_server = listen_in(&lab.remote, "0.0.0.0:81");
    (other, other_server, remote_server)
}

#[test]
fn routed_subnet_is_reached_directly_and_its_egress_keeps_its_address() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    let (other, other_server, remote_server) = routed_lab(&lab);
    let seen = lab
        .connect(&lab.remote, "198.18.2.2:80")
        .expect("remote reaches the routed container by its address");
    assert_eq!(seen.ip(), ip("198.18.1.2"), "no NAT on the way in");
    assert_eq!(
        seen_by(&other_server, &lab.remote, "198.18.3.2:80"),
        None,
        "a nat network stays closed to routing from outside"
    );
    let egress = seen_by(&remote_server, &lab.container, "198.18.1.2:81").expect("routed egress");
    assert_eq!(
        egress.ip(),
        ip("198.18.2.2"),
        "routed egress is not masqueraded"
    );
    let egress = seen_by(&remote_server, &other, "198.18.1.2:81").expect("nat egress");
    assert_eq!(egress.ip(), ip("198.18.1.1"), "nat egress is masqueraded");
    assert_eq!(
        lab.connect(&other, "198.18.2.2:80"),
        None,
        "another network's container does not reach a routed one"
    );
    assert_eq!(
        seen_by(&other_server, &lab.container, "198.18.3.2:80"),
        None,
        "a routed network's container does not reach another network"
    );

    for _ in 0..2 {
        lab.table(|t| {
            t.set_routed("198.18.2.0/24".parse().unwrap(), false)
                .unwrap()
        });
    }
    assert_eq!(lab.connect(&lab.remote, "198.18.2.2:80"), None, "unrouted");
    let egress = seen_by(&remote_server, &lab.container, "198.18.1.2:81").expect("egress");
    assert_eq!(egress.ip(), ip("198.18.1.1"), "masqueraded again");
    lab.table(|t| t.teardown().unwrap());
    lab.table(|t| {
        t.set_routed("198.18.2.0/24".parse().unwrap(), false)
            .unwrap()
    });
}

#[test]
fn routed_subnet_passes_dockers_forward_drop_until_unrouted() {
    if !privileged() {
        return;
    }
    let lab = Lab::new();
    docker_filter(&lab);
    lab.nft(&["add", "chain", "ip", "filter", "DOCKER-USER"]);
    lab.nft(&[
        "add",
        "rule",
        "ip",
        "filter",
        "FORWARD",
        "jump",
        "DOCKER-USER",
    ]);
    let (_other, _other_server, _remote_server) = routed_lab(&lab);
    assert!(
        lab.connect(&lab.remote, "198.18.2.2:80").is_some(),
        "through Docker's FORWARD drop"
    );
    let user = lab.nft(&["list", "chain", "ip", "filter", "DOCKER-USER"]);
    let first = user
        .lines()
        .find(|l| l.contains("comment"))
        .unwrap_or_default();
    assert!(
        first.contains("ip daddr 198.18.2.0/24 accept comment \"pier\""),
        "{user}"
    );
    assert_eq!(user.matches("comment \"pier\"").count(), 7, "{user}");
    lab.table(|t| {
        t.set_routed("198.18.2.0/24".parse().unwrap(), false)
            .unwrap()
    });
    assert_eq!(lab.connect(&lab.remote, "198.18.2.2:80"), None, "unrouted");
    let user = lab.nft(&["list", "chain", "ip", "filter", "DOCKER-USER"]);
    assert_eq!(user.matches("comment \"pier\"").count(), 6, "{user}");
    lab.table(|t| {
        t.set_routed("198.18.2.0/24".parse().unwrap(), true)
            .unwrap()
    });
    lab.table(|t| t.teardown().unwrap());
    let user = lab.nft(&["list", "chain", "ip", "filter", "DOCKER-USER"]);
    assert!(!user.contains("pier"), "{user}");
}
