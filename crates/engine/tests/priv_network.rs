//! Privileged tests of the engine's networks against the kernel: create, list, inspect and remove
//! networks; the default bridge's subnet choice; containers reaching each other over a bridge and
//! the host reaching macvlan containers through the host shim; ipvlan's refusal; IPAM checks,
//! idempotent detach and lease reclaim.
//!
//! Every test builds a stand-in host: an anonymous network namespace ([`NetNs::new_anonymous`])
//! in which the test body runs on its own thread, so the bridges, veths, shims, routes, sysctls
//! and nftables table pier makes live there; "containers" are more anonymous namespaces; the
//! state directory is a tempdir. Dropping the namespaces' fds frees them with every link in them,
//! so the real host is left exactly as found, also when an assertion fails. Addresses are in
//! 198.18.0.0/15 and 2001:2::/48, and the subnet pool is `PIER_SUBNET_POOL=198.18.0.0/15:24`.
//! Needs root: skips with a reason outside CI, fails under CI=true.
use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::Duration;

use pier_engine::network::{
    Attachment, Driver, Network, NetworkError, NetworkSpec, Networks, POOL_ENV,
};
use pier_engine::Paths;
use pier_net::netns::NetNs;
use pier_net::Netlink;
use tempfile::TempDir;

fn privileged(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        std::env::set_var(POOL_ENV, "198.18.0.0/15:24");
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "{test} needs root under CI"
    );
    eprintln!("skipping: {test} needs root (creates namespaces, links and nftables tables)");
    false
}

/// A stand-in host: its own network namespace and state directory.
struct Host {
    ns: NetNs,
    state: TempDir,
}

impl Host {
    fn new() -> Self {
        Self {
            ns: NetNs::new_anonymous().unwrap(),
            state: tempfile::tempdir().unwrap(),
        }
    }

    /// Runs `body` inside the host namespace with the networks of the state directory.
    fn run<T: Send>(&self, body: impl FnOnce(&Networks) -> T + Send) -> T {
        let paths = Paths {
            state_dir: self.state.path().to_path_buf(),
        };
        self.ns.run(|| body(&Networks::new(&paths))).unwrap()
    }
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn bridge_spec(name: &str, subnet: &str) -> NetworkSpec {
    NetworkSpec {
        name: name.into(),
        driver: Some(Driver::Bridge),
        subnet: Some(subnet.parse().unwrap()),
        ..NetworkSpec::default()
    }
}

/// Runs `ip ARGS` in the calling thread's namespace.
fn ip_cmd(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(out.status.success(), "ip {args:?}: {out:?}");
}

/// An up Ethernet link `name` standing in for a host NIC (this kernel has no dummy driver, so
/// one end of a veth pair whose other end, `<name>p`, is up too for carrier).
fn stand_in_nic(name: &str) {
    let peer = format!("{name}p");
    ip_cmd(&["link", "add", name, "type", "veth", "peer", "name", &peer]);
    ip_cmd(&["link", "set", &peer, "up"]);
    ip_cmd(&["link", "set", name, "up"]);
}

fn link_exists(name: &str) -> bool {
    Netlink::open().unwrap().link_index(name).unwrap().is_some()
}

/// The names of every link in the calling thread's namespace.
fn links() -> Vec<String> {
    let out = Command::new("ip").args(["-o", "link"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let name = |line: &str| {
        line.split(": ")
            .nth(1)
            .map(|n| n.split('@').next().unwrap().to_string())
    };
    text.lines().filter_map(name).collect()
}

/// Plans and attaches a new "container" namespace to `network`.
fn container(nets: &Networks, network: &Network, id: &str) -> (NetNs, Attachment) {
    let netns = NetNs::new_anonymous().unwrap();
    let plan = nets.plan(network, id, None, None).unwrap();
    nets.attach(&plan, netns.fd()).unwrap();
    (netns, plan)
}

/// A TCP echo server of one connection on `ip` inside `ns`; returns its address.
fn serve(ns: &NetNs, ip: IpAddr) -> SocketAddr {
    let listener = ns.run(|| TcpListener::bind((ip, 0)).unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut buf = [0; 4];
            if stream.read_exact(&mut buf).is_ok() {
                let _ = stream.write_all(&buf);
            }
        }
    });
    addr
}

/// Whether a TCP exchange with `addr` succeeds from the calling thread's namespace.
fn reaches(addr: SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_secs(3)) else {
        return false;
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let mut echo = [0; 4];
    stream.write_all(b"pier").is_ok() && stream.read_exact(&mut echo).is_ok() && &echo == b"pier"
}

#[test]
fn networks_are_created_listed_inspected_and_removed() {
    if !privileged("networks_are_created_listed_inspected_and_removed") {
        return;
    }
    Host::new().run(|nets| {
        let n1 = nets.create(&bridge_spec("n1", "198.18.10.0/24")).unwrap();
        assert_eq!(n1.gateway, ip("198.18.10.1"));
        assert!(n1.interface.starts_with("pier-") && n1.interface.len() <= 15);
        assert!(link_exists(&n1.interface));
        assert_eq!(nets.get("n1").unwrap(), n1);
        let mut spec6 = bridge_spec("n2", "198.18.11.0/24");
        spec6.ipv6 = true;
        spec6.subnet6 = Some("2001:2:0:11::/64".parse().unwrap());
        let n2 = nets.create(&spec6).unwrap();
        assert_eq!(n2.gateway6, Some(ip("2001:2:0:11::1")));
        let names: Vec<String> = nets.list().unwrap().into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["n1", "n2"]);
        nets.remove("n1").unwrap();
        assert!(!link_exists(&n1.interface));
        assert!(matches!(nets.remove("n1"), Err(NetworkError::NotFound(_))));
        assert!(matches!(nets.get("n1"), Err(NetworkError::NotFound(_))));
        nets.remove("n2").unwrap();
        assert!(nets.list().unwrap().is_empty());
    });
}

#[test]
fn bad_creates_are_refused_naming_the_culprit_and_create_nothing() {
    if !privileged("bad_creates_are_refused_naming_the_culprit_and_create_nothing") {
        return;
    }
    Host::new().run(|nets| {
        stand_in_nic("pier-test-d0");
        ip_cmd(&["addr", "add", "198.18.30.1/24", "dev", "pier-test-d0"]);
        nets.create(&bridge_spec("n1", "198.18.10.0/24")).unwrap();
        let before = links();
        let refused = |spec: NetworkSpec| nets.create(&spec).unwrap_err().to_string();
        assert_eq!(refused(bridge_spec("n1", "198.18.12.0/24")), "network n1 already exists");
        assert_eq!(
            refused(bridge_spec("n2", "198.18.10.128/25")),
            "subnet 198.18.10.128/25 overlaps 198.18.10.0/24 (pier network n1); choose another --subnet"
        );
        assert_eq!(
            refused(bridge_spec("n2", "198.18.30.0/23")),
            "subnet 198.18.30.0/23 overlaps 198.18.30.0/24 (routed on the host via pier-test-d0); \
             choose another --subnet"
        );
        let mut outside = bridge_spec("n2", "198.18.12.0/24");
        outside.gateway = Some(ip("198.18.13.1"));
        assert_eq!(refused(outside), "gateway 198.18.13.1 is outside the subnet 198.18.12.0/24");
        let no_parent = NetworkSpec {
            driver: Some(Driver::Macvlan),
            parent: Some("pier-test-nope".into()),
            ..bridge_spec("n2", "198.18.12.0/24")
        };
        assert!(refused(no_parent).starts_with("parent interface pier-test-nope does not exist"));
        assert!(refused(bridge_spec("bad/name", "198.18.12.0/24")).contains("bad/name"));
        assert_eq!(links(), before);
        let names: Vec<String> = nets.list().unwrap().into_iter().map(|n| n.name).collect();
        assert_eq!(names, ["n1"]);
    });
}

#[test]
fn the_default_bridge_takes_a_pool_subnet_no_route_uses() {
    if !privileged("the_default_bridge_takes_a_pool_subnet_no_route_uses") {
        return;
    }
    Host::new().run(|nets| {
        stand_in_nic("pier-test-d0");
        ip_cmd(&["route", "add", "198.18.0.0/23", "dev", "pier-test-d0"]);
        let bridge = nets.get("bridge").unwrap();
        assert_eq!(bridge.subnet.to_string(), "198.18.2.0/24");
        assert_eq!(bridge.interface, "pier0");
        assert!(link_exists("pier0"));
        assert_eq!(nets.get("bridge").unwrap(), bridge);
        let user = nets.create(&NetworkSpec {
            name: "n1".into(),
            ..NetworkSpec::default()
        });
        assert_eq!(user.unwrap().subnet.to_string(), "198.18.3.0/24");
    });
}

#[test]
fn containers_on_one_bridge_reach_each_other_and_the_host() {
    if !privileged("containers_on_one_bridge_reach_each_other_and_the_host") {
        return;
    }
    Host::new().run(|nets| {
        let mut spec = bridge_spec("n1", "198.18.10.0/24");
        spec.ipv6 = true;
        spec.subnet6 = Some("2001:2:0:10::/64".parse().unwrap());
        let n1 = nets.create(&spec).unwrap();
        let (a, plan_a) = container(nets, &n1, "aaaa1111");
        let (b, plan_b) = container(nets, &n1, "bbbb2222");
        assert_eq!(plan_a.addresses[0], (ip("198.18.10.2"), 24));
        assert_eq!(plan_b.addresses[1], (ip("2001:2:0:10::3"), 64));
        for (server_ns, client_ns, plan) in [(&a, &b, &plan_a), (&b, &a, &plan_b)] {
            for (address, _) in &plan.addresses {
                let server = serve(server_ns, *address);
                assert!(client_ns.run(|| reaches(server)).unwrap(), "to {server}");
            }
        }
        let server = serve(&a, plan_a.addresses[0].0);
        assert!(reaches(server), "host to {server}");
        let veth = plan_a.host_link.as_deref().unwrap();
        let details = Command::new("ip")
            .args(["-d", "link", "show", veth])
            .output()
            .unwrap();
        let details = String::from_utf8(details.stdout).unwrap();
        assert!(
            details.contains("master pier-") && details.contains("hairpin on"),
            "{details}"
        );
    });
}

#[test]
#[ignore = "needs p-engines' rule dropping traffic between two pier bridges (not merged yet)"]
fn containers_on_different_networks_cannot_reach_each_other() {
    if !privileged("containers_on_different_networks_cannot_reach_each_other") {
        return;
    }
    Host::new().run(|nets| {
        let n1 = nets.create(&bridge_spec("n1", "198.18.10.0/24")).unwrap();
        let n2 = nets.create(&bridge_spec("n2", "198.18.11.0/24")).unwrap();
        let (a, plan_a) = container(nets, &n1, "aaaa1111");
        let (b, _) = container(nets, &n2, "bbbb2222");
        let server = serve(&a, plan_a.addresses[0].0);
        assert!(!b.run(|| reaches(server)).unwrap());
    });
}

#[test]
fn the_host_reaches_macvlan_containers_through_the_shim() {
    if !privileged("the_host_reaches_macvlan_containers_through_the_shim") {
        return;
    }
    Host::new().run(|nets| {
        stand_in_nic("pier-test-d0");
        let spec = NetworkSpec {
            driver: Some(Driver::Macvlan),
            parent: Some("pier-test-d0".into()),
            host_shim: true,
            ..bridge_spec("mv", "198.18.20.0/24")
        };
        let mv = nets.create(&spec).unwrap();
        let shim = mv.host_shim.clone().unwrap();
        assert!(link_exists(&shim));
        let (a, plan) = container(nets, &mv, "cccc3333");
        assert_eq!(plan.host_link, None);
        assert_eq!(plan.addresses[0].0, ip("198.18.20.3"), "the shim holds .2");
        let server = serve(&a, plan.addresses[0].0);
        assert!(reaches(server), "host to {server} through {shim}");
        let busy = nets.remove("mv").unwrap_err().to_string();
        assert_eq!(busy, "network mv is in use by container(s) cccc3333");
        nets.detach(&plan).unwrap();
        nets.remove("mv").unwrap();
        assert!(!link_exists(&shim));
    });
}

#[test]
fn ipvlan_is_refused_clearly_where_the_kernel_lacks_it() {
    if !privileged("ipvlan_is_refused_clearly_where_the_kernel_lacks_it") {
        return;
    }
    Host::new().run(|nets| {
        stand_in_nic("pier-test-d0");
        let spec = NetworkSpec {
            driver: Some(Driver::Ipvlan),
            parent: Some("pier-test-d0".into()),
            ..bridge_spec("iv", "198.18.21.0/24")
        };
        let no_parent = NetworkSpec {
            parent: None,
            ..spec.clone()
        };
        match nets.create(&spec) {
            Err(e) => {
                let text = "this kernel has no ipvlan support (module ipvlan not available); \
                            use --driver macvlan";
                assert_eq!(e.to_string(), text);
                assert_eq!(nets.create(&no_parent).unwrap_err().to_string(), text);
                assert!(nets.list().unwrap().is_empty());
            }
            Ok(iv) => {
                let (_c, plan) = container(nets, &iv, "dddd4444");
                nets.detach(&plan).unwrap();
                nets.remove("iv").unwrap();
            }
        }
    });
}

#[test]
fn static_addresses_are_checked_and_leases_released_and_reclaimed() {
    if !privileged("static_addresses_are_checked_and_leases_released_and_reclaimed") {
        return;
    }
    Host::new().run(|nets| {
        let n1 = nets.create(&bridge_spec("n1", "198.18.10.0/24")).unwrap();
        let plan = nets
            .plan(&n1, "c1", Some(ip("198.18.10.50")), None)
            .unwrap();
        assert_eq!(plan.addresses, [(ip("198.18.10.50"), 24)]);
        let taken = nets
            .plan(&n1, "c2", Some(ip("198.18.10.50")), None)
            .unwrap_err();
        assert!(
            taken
                .to_string()
                .ends_with("198.18.10.50 in network \"n1\" is already allocated to container c1"),
            "{taken}"
        );
        let outside = nets
            .plan(&n1, "c2", Some(ip("198.18.11.5")), None)
            .unwrap_err();
        assert!(
            outside
                .to_string()
                .contains("198.18.11.5 is outside the subnet 198.18.10.0/24"),
            "{outside}"
        );
        let no_v6 = nets
            .plan(&n1, "c2", None, Some(ip("2001:2::5")))
            .unwrap_err();
        assert!(no_v6.to_string().contains("has no IPv6 subnet"), "{no_v6}");
        nets.plan(&n1, "c2", None, None).unwrap();
        nets.plan(&n1, "c3", None, None).unwrap();
        let mut freed = nets.reclaim(&["c1".to_string(), "c3".to_string()]).unwrap();
        freed.sort();
        assert_eq!(freed, [("c2".to_string(), ip("198.18.10.2"))]);
        assert_eq!(nets.reclaim(&["c1".into(), "c3".into()]).unwrap(), []);
        nets.detach(&plan).unwrap();
        let again = nets
            .plan(&n1, "c4", Some(ip("198.18.10.50")), None)
            .unwrap();
        assert_eq!(again.addresses[0].0, ip("198.18.10.50"));
    });
}

#[test]
fn detach_removes_the_veth_and_lease_and_is_idempotent() {
    if !privileged("detach_removes_the_veth_and_lease_and_is_idempotent") {
        return;
    }
    Host::new().run(|nets| {
        let n1 = nets.create(&bridge_spec("n1", "198.18.10.0/24")).unwrap();
        let (_a, plan) = container(nets, &n1, "aaaa1111");
        let veth = plan.host_link.clone().unwrap();
        assert!(link_exists(&veth));
        nets.detach(&plan).unwrap();
        assert!(!link_exists(&veth));
        nets.detach(&plan).unwrap();
        nets.remove("n1").unwrap();
        nets.detach(&plan).unwrap();
    });
}

#[test]
fn a_missing_bridge_is_made_again_at_attach() {
    if !privileged("a_missing_bridge_is_made_again_at_attach") {
        return;
    }
    Host::new().run(|nets| {
        let n1 = nets.create(&bridge_spec("n1", "198.18.10.0/24")).unwrap();
        ip_cmd(&["link", "del", &n1.interface]);
        let (a, plan) = container(nets, &n1, "aaaa1111");
        assert!(link_exists(&n1.interface));
        let server = serve(&a, plan.addresses[0].0);
        assert!(reaches(server), "host to {server} through the remade bridge");
    });
}
