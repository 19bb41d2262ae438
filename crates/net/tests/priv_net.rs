//! Privileged tests of pier-net against the kernel: links, addresses, routes and reachability.
//!
//! Every test works only inside anonymous network namespaces it creates itself
//! ([`NetNs::new_anonymous`]); dropping their fds frees the namespaces and every link in them,
//! so nothing touches or stays in the host's namespace, also when an assertion fails. Addresses
//! are in 198.18.0.0/15 (IPv4) and 2001:2::/48 (IPv6), the benchmarking ranges.
//! Needs root: skips with a reason outside CI, fails under CI=true.
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use pier_net::netns::NetNs;
use pier_net::pool;
use pier_net::{IpvlanMode, NetError, Netlink, Route, Subnet};

mod support;

use support::{index, ip};

fn privileged() -> bool {
    support::privileged("priv_net", "creates network namespaces and links")
}

/// `ip -o link show NAME` run from inside the namespace (a spawned child inherits it).
fn ip_link_show(name: &str) -> String {
    let out = Command::new("ip")
        .args(["-o", "link", "show", "dev", name])
        .output()
        .unwrap();
    assert!(out.status.success(), "ip link show {name}: {out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// Bridge `pier-test-br` with 198.18.0.1/24 in `host`; one veth per container whose peer is
/// created directly in the container as `eth0` with 198.18.0.{11,12}/24, 2001:2::{11,12}/64
/// and default routes.
fn wire(host: &NetNs, containers: &[&NetNs]) {
    host.run(|| {
        let mut nl = Netlink::open().unwrap();
        nl.create_bridge("pier-test-br").unwrap();
        let bridge = index(&mut nl, "pier-test-br");
        nl.add_address(bridge, ip("198.18.0.1"), 24).unwrap();
        nl.set_up(bridge, true).unwrap();
        for (i, container) in containers.iter().enumerate() {
            let name = format!("pier-test-v{i}");
            nl.create_veth(&name, "eth0", Some(container.fd())).unwrap();
            let veth = index(&mut nl, &name);
            nl.set_master(veth, bridge).unwrap();
            nl.set_up(veth, true).unwrap();
        }
    })
    .unwrap();
    for (i, container) in containers.iter().enumerate() {
        let (v4, v6) = (
            format!("198.18.0.{}", 11 + i),
            format!("2001:2::{}", 11 + i),
        );
        container.run(|| configure_container(&v4, &v6)).unwrap();
    }
}

fn configure_container(v4: &str, v6: &str) {
    let mut nl = Netlink::open().unwrap();
    let lo = index(&mut nl, "lo");
    nl.set_up(lo, true).unwrap();
    let eth0 = index(&mut nl, "eth0");
    nl.add_address(eth0, ip(v4), 24).unwrap();
    nl.add_address(eth0, ip(v6), 64).unwrap();
    nl.set_up(eth0, true).unwrap();
    nl.add_route(&Route::default_via(ip("198.18.0.1"))).unwrap();
    nl.add_route(&Route::default_via(ip("2001:2::1"))).unwrap();
    let routed = nl.routed_subnets().unwrap();
    assert!(
        routed.contains(&"198.18.0.0/24".parse::<Subnet>().unwrap()),
        "{routed:?}"
    );
}

#[test]
fn two_containers_reach_each_other_through_a_bridge() {
    if !privileged() {
        return;
    }
    let host = NetNs::new_anonymous().unwrap();
    let (c1, c2) = (
        NetNs::new_anonymous().unwrap(),
        NetNs::new_anonymous().unwrap(),
    );
    wire(&host, &[&c1, &c2]);

    let listener = c2
        .run(|| TcpListener::bind("198.18.0.12:0").unwrap())
        .unwrap();
    let target: SocketAddr = listener.local_addr().unwrap();
    let peer = c1
        .run(|| {
            let mut stream = TcpStream::connect_timeout(&target, Duration::from_secs(10)).unwrap();
            stream.write_all(b"hello over pier-test-br").unwrap();
            stream.local_addr().unwrap()
        })
        .unwrap();
    let (mut accepted, from) = listener.accept().unwrap();
    let mut text = String::new();
    accepted.read_to_string(&mut text).unwrap();
    assert_eq!(text, "hello over pier-test-br");
    assert_eq!(from, peer);
    assert_eq!(from.ip(), ip("198.18.0.11"));

    let listener6 = c2
        .run(|| TcpListener::bind("[2001:2::12]:0").unwrap())
        .unwrap();
    let target6 = listener6.local_addr().unwrap();
    c1.run(|| TcpStream::connect_timeout(&target6, Duration::from_secs(10)).unwrap())
        .unwrap();
    assert_eq!(listener6.accept().unwrap().1.ip(), ip("2001:2::11"));

    let ping = c1
        .run(|| {
            Command::new("busybox")
                .args(["ping", "-c", "1", "-W", "5", "198.18.0.12"])
                .output()
        })
        .unwrap()
        .unwrap();
    assert!(
        ping.status.success(),
        "busybox ping from c1 to c2: {ping:?}"
    );
}

#[test]
fn containers_cannot_see_host_links() {
    if !privileged() {
        return;
    }
    let host = NetNs::new_anonymous().unwrap();
    let c1 = NetNs::new_anonymous().unwrap();
    wire(&host, &[&c1]);
    let in_c1 = c1
        .run(|| Netlink::open().unwrap().link_index("pier-test-br").unwrap())
        .unwrap();
    assert_eq!(in_c1, None);
    let in_host = host
        .run(|| Netlink::open().unwrap().link_index("eth0").unwrap())
        .unwrap();
    assert_eq!(in_host, None);
}

/// A veth pair standing in for a physical parent (this kernel has no dummy driver).
fn parent(nl: &mut Netlink) -> u32 {
    nl.create_veth("pier-test-p0", "pier-test-p1", None)
        .unwrap();
    let parent = index(nl, "pier-test-p0");
    nl.set_up(parent, true).unwrap();
    parent
}

#[test]
fn macvlan_in_bridge_mode_moves_into_a_container() {
    if !privileged() {
        return;
    }
    let host = NetNs::new_anonymous().unwrap();
    let container = NetNs::new_anonymous().unwrap();
    host.run(|| {
        let mut nl = Netlink::open().unwrap();
        let parent = parent(&mut nl);
        nl.create_macvlan("pier-test-mv", parent).unwrap();
        let shown = ip_link_show("pier-test-mv");
        assert!(shown.contains("pier-test-mv@pier-test-p0"), "{shown}");
        let mv = index(&mut nl, "pier-test-mv");
        nl.move_to_netns(mv, container.fd()).unwrap();
        assert_eq!(nl.link_index("pier-test-mv").unwrap(), None);
    })
    .unwrap();
    container
        .run(|| {
            let mut nl = Netlink::open().unwrap();
            let mv = index(&mut nl, "pier-test-mv");
            nl.add_address(mv, ip("198.18.1.5"), 24).unwrap();
            nl.set_up(mv, true).unwrap();
            let detail = Command::new("ip")
                .args(["-d", "-o", "link", "show", "pier-test-mv"])
                .output();
            let out = String::from_utf8(detail.unwrap().stdout).unwrap();
            assert!(out.contains("macvlan mode bridge"), "{out}");
        })
        .unwrap();
}

fn kernel_config_says_no_ipvlan() -> Option<bool> {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
    let config = std::fs::read_to_string(format!("/boot/config-{}", release.trim())).ok()?;
    Some(config.contains("# CONFIG_IPVLAN is not set"))
}

#[test]
fn ipvlan_reports_a_missing_driver_clearly() {
    if !privileged() {
        return;
    }
    let ns = NetNs::new_anonymous().unwrap();
    let result = ns
        .run(|| {
            let mut nl = Netlink::open().unwrap();
            let parent = parent(&mut nl);
            let created = nl.create_ipvlan("pier-test-ipv", parent, IpvlanMode::L2);
            created.map(|()| nl.link_index("pier-test-ipv").unwrap())
        })
        .unwrap();
    match result {
        Err(e) => {
            assert!(matches!(e, NetError::IpvlanUnavailable), "{e}");
            assert!(e.to_string().contains("use --driver macvlan"));
            assert_ne!(
                kernel_config_says_no_ipvlan(),
                Some(false),
                "the kernel has ipvlan"
            );
        }
        Ok(found) => {
            assert!(found.is_some(), "ipvlan created but not found");
            assert_ne!(
                kernel_config_says_no_ipvlan(),
                Some(true),
                "created without the driver"
            );
        }
    }
}

#[test]
fn links_addresses_and_routes_are_removed_again() {
    if !privileged() {
        return;
    }
    let ns = NetNs::new_anonymous().unwrap();
    ns.run(|| {
        let mut nl = Netlink::open().unwrap();
        let p0 = parent(&mut nl);
        nl.set_mtu(p0, 1400).unwrap();
        assert!(ip_link_show("pier-test-p0").contains("mtu 1400"));
        nl.add_address(p0, ip("198.18.2.1"), 24).unwrap();
        nl.add_address(p0, ip("2001:2::1"), 64).unwrap();
        let on_p0 = nl.addresses(Some(p0)).unwrap();
        assert!(on_p0.contains(&(p0, ip("198.18.2.1"), 24)), "{on_p0:?}");
        assert!(on_p0.contains(&(p0, ip("2001:2::1"), 64)), "{on_p0:?}");
        let far: Subnet = "198.18.9.0/24".parse().unwrap();
        let route = Route {
            destination: far,
            gateway: Some(ip("198.18.2.254")),
            link: None,
        };
        nl.add_route(&route).unwrap();
        assert!(nl.routed_subnets().unwrap().contains(&far));
        nl.del_route(&route).unwrap();
        assert!(!nl.routed_subnets().unwrap().contains(&far));
        nl.del_address(p0, ip("198.18.2.1"), 24).unwrap();
        nl.del_address(p0, ip("2001:2::1"), 64).unwrap();
        assert!(nl.addresses(Some(p0)).unwrap().is_empty());
        nl.set_up(p0, false).unwrap();
        assert!(!ip_link_show("pier-test-p0").contains(",UP"));
        nl.delete_link(p0).unwrap();
        assert_eq!(nl.link_index("pier-test-p0").unwrap(), None);
        assert_eq!(
            nl.link_index("pier-test-p1").unwrap(),
            None,
            "the peer goes with it"
        );
        let again = nl.delete_link(p0).unwrap_err();
        assert!(
            again.to_string().starts_with("netlink: delete link link #"),
            "{again}"
        );
        assert_eq!(again.errno(), Some(nix::errno::Errno::ENODEV as i32));
    })
    .unwrap();
}

#[test]
fn creating_an_existing_bridge_names_it_and_the_errno() {
    if !privileged() {
        return;
    }
    let ns = NetNs::new_anonymous().unwrap();
    let error = ns
        .run(|| {
            let mut nl = Netlink::open().unwrap();
            nl.create_bridge("pier-test-br").unwrap();
            nl.create_bridge("pier-test-br").unwrap_err()
        })
        .unwrap();
    assert_eq!(
        error.to_string(),
        "netlink: create bridge pier-test-br: File exists (os error 17)"
    );
}

fn current_netns_inode() -> u64 {
    std::fs::metadata("/proc/thread-self/ns/net")
        .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
        .unwrap()
}

#[test]
fn the_guard_never_moves_the_calling_thread() {
    if !privileged() {
        return;
    }
    let before = current_netns_inode();
    let ns = NetNs::new_anonymous().unwrap();
    let inside = ns.run(current_netns_inode).unwrap();
    assert_ne!(inside, before);
    assert!(ns.name().contains(&inside.to_string()), "{}", ns.name());
    let failed: Result<(), NetError> = ns
        .run(|| Err(Netlink::open()?.delete_link(9999).unwrap_err()))
        .unwrap();
    assert!(failed.is_err());
    let panicked = ns.run(|| panic!("pier-test: a panic inside the namespace"));
    assert!(matches!(panicked, Err(NetError::NetnsThreadPanicked(_))));
    assert_eq!(current_netns_inode(), before);
    let reopened = NetNs::open(std::path::Path::new("/proc/thread-self/ns/net")).unwrap();
    assert_eq!(reopened.run(current_netns_inode).unwrap(), before);
}

#[test]
fn the_subnet_pool_avoids_routes_read_over_netlink() {
    if !privileged() {
        return;
    }
    let ns = NetNs::new_anonymous().unwrap();
    let taken = ns
        .run(|| {
            let mut nl = Netlink::open().unwrap();
            let p0 = parent(&mut nl);
            nl.add_address(p0, ip("198.18.0.1"), 24).unwrap();
            nl.add_address(p0, ip("198.18.1.1"), 23).unwrap();
            let network: Subnet = "198.18.4.0/24".parse().unwrap();
            pool::taken_subnets(&mut nl, &[network]).unwrap()
        })
        .unwrap();
    let pools = pool::parse_pools("198.18.0.0/16:24").unwrap();
    assert_eq!(
        pool::choose(&pools, &taken).unwrap().to_string(),
        "198.18.2.0/24"
    );
    let pools = pool::parse_pools("198.18.4.0/22:24").unwrap();
    assert_eq!(
        pool::choose(&pools, &taken).unwrap().to_string(),
        "198.18.5.0/24"
    );
}
