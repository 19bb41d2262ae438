//! Black-box tests of the engine's networks: 50 containers started at once on one network get
//! unique addresses and reach each other, and not across networks; egress through masquerade to
//! a server in a separate namespace standing in for the internet; a published port reached from
//! there; `--network none|host|container:` and static addresses; macvlan with a host shim;
//! ipvlan refused on this kernel; `pier network create|ls|inspect|rm`; a routed network (Docker's
//! `gateway_mode_ipv4|ipv6=routed`) reached directly by a remote host over IPv4 and IPv6, its
//! egress unmasqueraded, while a nat network is not, and isolation between them kept; a remote
//! host's connections to a published port kept out of conntrack by auto's tc programs, which
//! `pier gc` detaches once nothing is published, and tracked by nft DNAT with PIER_REMOTE_TC=0.
//! Each test runs pier in its own network namespace and state directory (engine_support).
mod engine_support;

use engine_support::{describe, finish, require_root, unique, Host, Netns};
use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

/// A namespace standing in for the internet, wired to the test host by a veth pair:
/// host 198.19.254.1/24, internet 198.19.254.2/24, the host's default route via the latter.
struct Internet {
    netns: Netns,
}

const HOST_SIDE: &str = "198.19.254.1";
const INTERNET_SIDE: &str = "198.19.254.2";

impl Internet {
    fn wire(host: &Host) -> Internet {
        let internet = Internet {
            netns: Netns::new("inet"),
        };
        host.netns.ip(&[
            "link",
            "add",
            "pier-test-up",
            "type",
            "veth",
            "peer",
            "name",
            "pier-test-dn",
            "netns",
            &internet.netns.name,
        ]);
        host.netns.ip(&[
            "addr",
            "add",
            &format!("{HOST_SIDE}/24"),
            "dev",
            "pier-test-up",
        ]);
        host.netns.ip(&["link", "set", "pier-test-up", "up"]);
        host.netns
            .ip(&["route", "add", "default", "via", INTERNET_SIDE]);
        internet.netns.ip(&[
            "addr",
            "add",
            &format!("{INTERNET_SIDE}/24"),
            "dev",
            "pier-test-dn",
        ]);
        internet.netns.ip(&["link", "set", "pier-test-dn", "up"]);
        internet
    }
}

/// Whether `from` (a container) gets an answer to one ping of `address`.
fn pings(host: &Host, from: &str, address: &str) -> bool {
    let out = host.run(&[
        "exec", from, "busybox", "ping", "-c", "1", "-W", "2", address,
    ]);
    out.status.success()
}

#[test]
fn fifty_containers_get_unique_addresses_and_reach_each_other() {
    if !require_root("fifty_containers_get_unique_addresses_and_reach_each_other") {
        return;
    }
    let host = Host::new("fifty");
    let names: Vec<String> = (0..50).map(|i| unique(&format!("c{i}"))).collect();
    std::thread::scope(|s| {
        for name in &names {
            let host = &host;
            s.spawn(move || host.start(name, &[], &["sleep", "600"]));
        }
    });
    let addresses: Vec<String> = names.iter().map(|n| host.address(n)).collect();
    let unique_addresses: BTreeSet<&String> = addresses.iter().collect();
    assert_eq!(
        unique_addresses.len(),
        50,
        "duplicate addresses: {addresses:?}"
    );
    for (i, name) in names.iter().enumerate() {
        let next = &addresses[(i + 1) % names.len()];
        assert!(pings(&host, name, next), "{name} cannot reach {next}");
    }
    assert_eq!(host.ps_all().len(), 50);
}

#[test]
fn networks_are_isolated_from_each_other() {
    if !require_root("networks_are_isolated_from_each_other") {
        return;
    }
    let host = Host::new("iso");
    let (net_a, net_b) = (unique("na"), unique("nb"));
    host.ok(&["network", "create", "--subnet", "198.18.210.0/24", &net_a]);
    host.ok(&["network", "create", "--subnet", "198.18.211.0/24", &net_b]);
    let (a1, a2, b1) = (unique("a1"), unique("a2"), unique("b1"));
    host.start(&a1, &["--network", &net_a], &["sleep", "600"]);
    host.start(&a2, &["--network", &net_a], &["sleep", "600"]);
    host.start(&b1, &["--network", &net_b], &["sleep", "600"]);
    let (addr_a2, addr_b1) = (host.address(&a2), host.address(&b1));
    assert!(addr_a2.starts_with("198.18.210.") && addr_b1.starts_with("198.18.211."));
    assert!(
        pings(&host, &a1, &addr_a2),
        "{a1} cannot reach {a2} on its own network"
    );
    assert!(
        !pings(&host, &a1, &addr_b1),
        "{a1} reaches {b1} across networks"
    );
    assert!(
        !pings(&host, &b1, &addr_a2),
        "{b1} reaches {a2} across networks"
    );
    host.fails_naming(&["network", "rm", &net_a], &net_a);
    host.ok(&["rm", "-f", &a1, &a2]);
    assert_eq!(host.ok(&["network", "rm", &net_a]).trim(), net_a);
    let listed = host.ok(&["network", "ls", "-q"]);
    assert!(
        !listed.contains(&net_a) && listed.contains(&net_b),
        "{listed}"
    );
}

#[test]
fn egress_is_masqueraded_to_the_internet() {
    if !require_root("egress_is_masqueraded_to_the_internet") {
        return;
    }
    let host = Host::new("egress");
    let internet = Internet::wire(&host);
    let listener = internet
        .netns
        .within(|| TcpListener::bind((INTERNET_SIDE, 80)).expect("binding the server"));
    let server = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("accepting the container");
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request).expect("reading the request");
        let answer = "HTTP/1.0 200 OK\r\nContent-Length: 15\r\n\r\npier-egress-ok\n";
        stream.write_all(answer.as_bytes()).expect("answering");
        peer.ip().to_string()
    });
    let url = format!("http://{INTERNET_SIDE}/");
    let out = host.run(&[
        "run", "--rm", "host", "busybox", "wget", "-q", "-O", "-", &url,
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "pier-egress-ok\n");
    assert_eq!(
        server.join().expect("server thread"),
        HOST_SIDE,
        "egress was not masqueraded"
    );
}

#[test]
fn published_port_is_reached_from_the_internet() {
    if !require_root("published_port_is_reached_from_the_internet") {
        return;
    }
    let host = Host::new("pub");
    let internet = Internet::wire(&host);
    let name = unique("web");
    let serve = "mkdir -p /tmp/www && echo pier-published > /tmp/www/index.html && exec busybox httpd -f -p 80 -h /tmp/www";
    host.start(
        &name,
        &["-p", "8080:80", "--publish-mode", "nat"],
        &["sh", "-c", serve],
    );
    assert_eq!(host.ok(&["port", &name]).trim(), "80/tcp -> 0.0.0.0:8080");
    let ps = host.ps_all();
    assert!(
        ps[0]["ports"]
            .as_str()
            .unwrap_or_default()
            .contains("8080->80/tcp"),
        "{ps:?}"
    );
    let page = internet.netns.within(|| {
        (0..100)
            .find_map(|_| {
                let answer = http_get(HOST_SIDE, 8080);
                if answer.is_none() {
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                answer
            })
            .expect("the published port never answered")
    });
    assert!(page.contains("pier-published"), "{page}");
}

#[test]
fn proxy_publish_on_a_picked_loopback_port() {
    if !require_root("proxy_publish_on_a_picked_loopback_port") {
        return;
    }
    let host = Host::new("proxy");
    let name = unique("web");
    let serve = "mkdir -p /tmp/www && echo pier-proxied > /tmp/www/index.html && exec busybox httpd -f -p 80 -h /tmp/www";
    host.start(
        &name,
        &["-p", "127.0.0.1::80", "--publish-mode", "proxy"],
        &["sh", "-c", serve],
    );
    let line = host.ok(&["port", &name]);
    let port: u16 = line
        .trim()
        .strip_prefix("80/tcp -> 127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("pier port: {line:?}"));
    // The proxy accepts before busybox listens, then closes an empty answer: retry those too,
    // for as long as a loaded CI machine may take to start busybox in the container.
    let (page, last) = host.netns.within(|| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let mut last = None;
        while std::time::Instant::now() < deadline {
            last = http_get("127.0.0.1", port);
            if last.as_deref().is_some_and(|a| a.contains("pier-proxied")) {
                return (true, last);
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        (false, last)
    });
    assert!(
        page,
        "127.0.0.1:{port} never served the page in 20 s; last answer {last:?}; {}",
        host.ok(&["logs", &name])
    );
    host.ok(&["rm", "-f", &name]);
    let after = host
        .netns
        .within(|| TcpStream::connect(("127.0.0.1", port)).is_err());
    assert!(after, "the proxy still listens on {port} after rm");
}

/// `GET /` over HTTP/1.0; the whole answer, or None when the connection fails.
fn http_get(address: &str, port: u16) -> Option<String> {
    let mut stream = TcpStream::connect((address, port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

#[test]
fn network_modes_and_static_addresses() {
    if !require_root("network_modes_and_static_addresses") {
        return;
    }
    let host = Host::new("modes");
    host.netns.dummy("pier-test-dmy", "198.19.253.1/24");
    let none = host.ok(&[
        "run",
        "--rm",
        "--network",
        "none",
        "host",
        "ip",
        "-o",
        "link",
        "show",
    ]);
    assert_eq!(none.lines().count(), 1, "--network none: {none}");
    let shared = host.ok(&[
        "run",
        "--rm",
        "--network",
        "host",
        "host",
        "ip",
        "-o",
        "link",
        "show",
    ]);
    assert!(shared.contains("pier-test-dmy"), "--network host: {shared}");

    let net = unique("static");
    host.ok(&[
        "network",
        "create",
        "--subnet",
        "198.18.220.0/24",
        "--ipv6",
        "--subnet6",
        "2001:2:0:220::/64",
        &net,
    ]);
    let inspect: serde_json::Value =
        serde_json::from_str(&host.ok(&["network", "inspect", &net])).expect("inspect JSON");
    assert_eq!(inspect[0]["subnet"], "198.18.220.0/24", "{inspect}");
    let name = unique("fixed");
    host.start(
        &name,
        &[
            "--network",
            &net,
            "--ip",
            "198.18.220.50",
            "--ip6",
            "2001:2:0:220::50",
        ],
        &["sleep", "600"],
    );
    assert_eq!(host.address(&name), "198.18.220.50");
    let v6 = host.ok(&[
        "exec", &name, "ip", "-6", "-o", "addr", "show", "dev", "eth0",
    ]);
    assert!(v6.contains("2001:2:0:220::50/64"), "{v6}");
    let joined = host.ok(&[
        "run",
        "--rm",
        "--network",
        &format!("container:{name}"),
        "host",
        "ip",
        "-4",
        "-o",
        "addr",
        "show",
        "dev",
        "eth0",
    ]);
    assert!(
        joined.contains("198.18.220.50/24"),
        "container:{name}: {joined}"
    );
}

#[test]
fn macvlan_with_host_shim_and_ipvlan_refused() {
    if !require_root("macvlan_with_host_shim_and_ipvlan_refused") {
        return;
    }
    let host = Host::new("mac");
    host.netns.dummy("pier-test-par", "198.19.252.1/24");
    let net = unique("mac");
    host.ok(&[
        "network",
        "create",
        "-d",
        "macvlan",
        "--parent",
        "pier-test-par",
        "--subnet",
        "198.18.230.0/24",
        "--gateway",
        "198.18.230.1",
        "--host-shim",
        &net,
    ]);
    let (m1, m2) = (unique("m1"), unique("m2"));
    host.start(&m1, &["--network", &net], &["sleep", "600"]);
    host.start(&m2, &["--network", &net], &["sleep", "600"]);
    let (a1, a2) = (host.address(&m1), host.address(&m2));
    assert_ne!(a1, a2);
    assert!(
        pings(&host, &m1, &a2),
        "macvlan containers cannot reach each other"
    );
    let from_host = host.netns.within(|| {
        std::process::Command::new("busybox")
            .args(["ping", "-c", "1", "-W", "2", &a1])
            .output()
            .expect("ping")
    });
    assert!(
        from_host.status.success(),
        "the host shim does not reach {a1}: {}",
        describe(&from_host)
    );
    let listed = host.ok(&["network", "ls"]);
    assert!(
        listed
            .lines()
            .any(|l| l.contains(&net) && l.contains("macvlan")),
        "{listed}"
    );

    let stderr = host.fails_naming(
        &[
            "network",
            "create",
            "-d",
            "ipvlan",
            "--parent",
            "pier-test-par",
            "--subnet",
            "198.18.231.0/24",
            &unique("ipv"),
        ],
        "ipvlan",
    );
    assert!(
        stderr.contains("macvlan"),
        "the ipvlan refusal does not suggest macvlan: {stderr}"
    );
}

/// Docker's gateway mode option for IPv4.
const GATEWAY_MODE_IPV4: &str = "com.docker.network.bridge.gateway_mode_ipv4";

/// A remote host on the test host's LAN: a namespace joined by veth (host 198.19.250.1/24 and
/// 2001:2:0:250::1/64, remote .2 and ::2) whose default routes are the test host, so it has a
/// route to every container subnet through it.
fn remote_host(host: &Host) -> Netns {
    let remote = Netns::new("remote");
    host.netns.ip(&[
        "link",
        "add",
        "pier-test-lan",
        "type",
        "veth",
        "peer",
        "name",
        "pier-test-rem",
        "netns",
        &remote.name,
    ]);
    host.netns
        .ip(&["addr", "add", "198.19.250.1/24", "dev", "pier-test-lan"]);
    host.netns.ip(&["link", "set", "pier-test-lan", "up"]);
    remote.ip(&["addr", "add", "198.19.250.2/24", "dev", "pier-test-rem"]);
    remote.ip(&["link", "set", "pier-test-rem", "up"]);
    remote.ip(&["route", "add", "default", "via", "198.19.250.1"]);
    let six = ["2001:2:0:250::1/64", "2001:2:0:250::2/64"];
    host.netns
        .ip(&["addr", "add", six[0], "dev", "pier-test-lan", "nodad"]);
    remote.ip(&["addr", "add", six[1], "dev", "pier-test-rem", "nodad"]);
    remote.ip(&["-6", "route", "add", "default", "via", "2001:2:0:250::1"]);
    remote
}

/// Docker's gateway mode option for IPv6.
const GATEWAY_MODE_IPV6: &str = "com.docker.network.bridge.gateway_mode_ipv6";

/// `GET /` over HTTP/1.0, giving up on the connection after 3 s (a dropped SYN).
fn http_get_soon(address: &str, port: u16) -> Option<String> {
    let to = SocketAddr::new(address.parse().expect("an address"), port);
    let mut stream = TcpStream::connect_timeout(&to, Duration::from_secs(3)).ok()?;
    stream.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// A busybox httpd container on `network` serving `page`; its address.
fn web_on(host: &Host, name: &str, network: &str, page: &str) -> String {
    let serve = format!(
        "mkdir -p /tmp/www && echo {page} > /tmp/www/index.html && exec busybox httpd -f -p 80 -h /tmp/www"
    );
    host.start(name, &["--network", network], &["sh", "-c", &serve]);
    host.address(name)
}

#[test]
fn a_routed_network_is_reached_directly_and_stays_isolated() {
    if !require_root("a_routed_network_is_reached_directly_and_stays_isolated") {
        return;
    }
    let host = Host::new("routed");
    let remote = remote_host(&host);
    let (routed, nat) = (unique("rt"), unique("nat"));
    let (mode, mode6) = (
        format!("{GATEWAY_MODE_IPV4}=routed"),
        format!("{GATEWAY_MODE_IPV6}=routed"),
    );
    host.ok(&[
        "network",
        "create",
        "--subnet",
        "198.18.240.0/24",
        "--ipv6",
        "--subnet6",
        "2001:2:0:240::/64",
        "-o",
        &mode,
        "-o",
        &mode6,
        &routed,
    ]);
    host.ok(&["network", "create", "--subnet", "198.18.241.0/24", &nat]);
    let inspect: serde_json::Value =
        serde_json::from_str(&host.ok(&["network", "inspect", &routed])).expect("inspect JSON");
    assert_eq!(
        inspect[0]["options"][GATEWAY_MODE_IPV4], "routed",
        "{inspect}"
    );
    assert_eq!(
        inspect[0]["options"][GATEWAY_MODE_IPV6], "routed",
        "{inspect}"
    );
    let (r1, n1) = (unique("r1"), unique("n1"));
    let addr_r = web_on(&host, &r1, &routed, "pier-routed");
    let addr_n = web_on(&host, &n1, &nat, "pier-nat");

    let page = remote.within(|| {
        (0..50).find_map(|_| {
            let answer = http_get_soon(&addr_r, 80);
            if answer.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            answer
        })
    });
    assert!(
        page.is_some_and(|p| p.contains("pier-routed")),
        "the remote host does not reach {addr_r} on the routed network"
    );
    let addr6 = global_address6(&host, &r1);
    let page6 = remote.within(|| http_get_soon(&addr6, 80));
    assert!(
        page6.is_some_and(|p| p.contains("pier-routed")),
        "the remote host does not reach [{addr6}] on the routed network"
    );
    assert_eq!(
        remote.within(|| http_get_soon(&addr_n, 80)),
        None,
        "the remote host reaches {addr_n} on a nat network directly"
    );
    assert!(
        !pings(&host, &r1, &addr_n),
        "{r1} reaches {n1} across networks"
    );
    assert!(
        !pings(&host, &n1, &addr_r),
        "{n1} reaches {r1} across networks"
    );
    assert_eq!(
        egress_source(&host, &remote, &r1),
        addr_r,
        "routed egress was masqueraded"
    );
    assert_eq!(
        egress_source(&host, &remote, &n1),
        "198.19.250.1",
        "nat egress was not masqueraded"
    );

    host.ok(&["rm", "-f", &r1]);
    host.ok(&["network", "rm", &routed]);
    let table = host.nft(&["list", "table", "inet", "pier"]);
    assert!(!table.contains("198.18.240.0/24"), "{table}");
}

/// The container's global IPv6 address on eth0.
fn global_address6(host: &Host, container: &str) -> String {
    let out = host.ok(&[
        "exec", container, "ip", "-6", "-o", "addr", "show", "dev", "eth0", "scope", "global",
    ]);
    let inet6 = out
        .split_whitespace()
        .skip_while(|w| *w != "inet6")
        .nth(1)
        .unwrap_or_else(|| panic!("no global inet6 address on eth0 of {container}: {out}"));
    inet6.split('/').next().unwrap_or(inet6).to_string()
}

/// The address a server in `remote` sees when container `from` connects to it.
fn egress_source(host: &Host, remote: &Netns, from: &str) -> String {
    let listener = remote.within(|| TcpListener::bind(("198.19.250.2", 0)).expect("binding"));
    let port = listener.local_addr().expect("local address").port();
    let server = std::thread::spawn(move || {
        let (mut stream, peer) = listener.accept().expect("accepting the container");
        let mut request = [0u8; 1024];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n");
        peer.ip().to_string()
    });
    let url = format!("http://198.19.250.2:{port}/");
    let out = host.run(&["exec", from, "busybox", "wget", "-q", "-O", "-", &url]);
    assert!(out.status.success(), "{}", describe(&out));
    server.join().expect("server thread")
}

#[test]
fn gateway_modes_refuse_bad_values_and_sublink_drivers() {
    if !require_root("gateway_modes_refuse_bad_values_and_sublink_drivers") {
        return;
    }
    let host = Host::new("gwmode");
    host.fails_naming(
        &[
            "network",
            "create",
            "-o",
            &format!("{GATEWAY_MODE_IPV4}=bogus"),
            &unique("bad"),
        ],
        "bogus",
    );
    host.netns.dummy("pier-test-par", "198.19.252.1/24");
    host.fails_naming(
        &[
            "network",
            "create",
            "-d",
            "macvlan",
            "--parent",
            "pier-test-par",
            "--subnet",
            "198.18.232.0/24",
            "-o",
            &format!("{GATEWAY_MODE_IPV4}=routed"),
            &unique("mac"),
        ],
        GATEWAY_MODE_IPV4,
    );
    assert_eq!(host.ok(&["network", "ls", "-q"]), "");
}

/// The tc links pinned for `host` (`link-in-<ifindex>` on uplinks, `link-reply-<ifindex>` on
/// bridges), sorted by kind.
fn tc_links(host: &Host) -> Vec<String> {
    let dir = host.bpf_pins().join("remote");
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("link-"))
                .map(|n| n.trim_end_matches(|c: char| c.is_ascii_digit()).to_string())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names.dedup();
    names
}

/// The host namespace's conntrack entries from the remote host to `port`.
fn remote_conntrack(host: &Host, port: u16) -> Vec<String> {
    let table = host
        .netns
        .within(|| std::fs::read_to_string("/proc/thread-self/net/nf_conntrack"))
        .expect("reading nf_conntrack (CONFIG_NF_CONNTRACK_PROCFS)");
    let (src, dport) = ("src=198.19.250.2 ", format!("dport={port} "));
    table
        .lines()
        .filter(|l| l.contains(src) && l.contains(&dport))
        .map(str::to_string)
        .collect()
}

/// `GET /` from the remote host to the test host's LAN address, retried for up to 2.5 s until
/// the answer holds `page`.
fn remote_page(remote: &Netns, port: u16, page: &str) -> Option<String> {
    remote.within(|| {
        (0..50).find_map(|_| {
            let answer = http_get_soon("198.19.250.1", port).filter(|a| a.contains(page));
            if answer.is_none() {
                std::thread::sleep(Duration::from_millis(50));
            }
            answer
        })
    })
}

/// Runs a busybox httpd on `net` published on `port` (with PIER_REMOTE_TC set to `tc` if
/// given), has the remote host fetch its page, and returns the tc links pinned meanwhile and the
/// conntrack entries of the remote host's fetch; the container is removed afterwards.
fn publish_and_fetch(
    (host, remote): (&Host, &Netns),
    net: &str,
    port: u16,
    tc: Option<&str>,
) -> (Vec<String>, Vec<String>) {
    let name = unique("web");
    let serve = "mkdir -p /tmp/www && echo pier-tc > /tmp/www/index.html && exec busybox httpd -f -p 80 -h /tmp/www";
    let publish = format!("{port}:80");
    let mut run = host.command(&["run", "-d", "--name", &name, "--network", net, "-p"]);
    run.args([publish.as_str(), "host", "sh", "-c", serve]);
    if let Some(value) = tc {
        run.env("PIER_REMOTE_TC", value);
    }
    let out = finish(&mut run);
    assert!(
        out.status.success(),
        "pier run (PIER_REMOTE_TC {tc:?}): {}",
        describe(&out)
    );
    let links = tc_links(host);
    let page = remote_page(remote, port, "pier-tc");
    assert!(page.is_some(), "the remote host does not reach :{port}");
    let conntrack = remote_conntrack(host, port);
    host.ok(&["rm", "-f", &name]);
    (links, conntrack)
}

#[test]
fn remote_clients_skip_conntrack_unless_pier_remote_tc_is_0() {
    if !require_root("remote_clients_skip_conntrack_unless_pier_remote_tc_is_0") {
        return;
    }
    let host = Host::new("tcpath");
    let remote = remote_host(&host);
    let net = unique("tc");
    host.ok(&["network", "create", "--subnet", "198.18.243.0/24", &net]);

    let (links, conntrack) = publish_and_fetch((&host, &remote), &net, 8080, None);
    assert_eq!(
        links,
        ["link-in-", "link-reply-"],
        "by default the programs are attached on publish"
    );
    assert_eq!(conntrack, Vec::<String>::new(), "tc path: no conntrack");
    let left = tc_links(&host);
    assert_eq!(left, ["link-in-", "link-reply-"], "kept attached after rm");
    host.ok(&["gc"]);
    assert_eq!(
        tc_links(&host),
        Vec::<String>::new(),
        "pier gc: nothing published, nothing attached"
    );

    let (links, conntrack) = publish_and_fetch((&host, &remote), &net, 8081, Some("0"));
    assert_eq!(
        links,
        Vec::<String>::new(),
        "PIER_REMOTE_TC=0: nothing at tc"
    );
    assert_ne!(conntrack, Vec::<String>::new(), "nft DNAT is tracked");
    host.ok(&["network", "rm", &net]);
}
