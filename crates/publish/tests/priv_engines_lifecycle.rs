//! The publish engines' lifecycle against the real kernel: conflicts named with their owner,
//! a 1,000-port range in one step, idempotent removal, all-or-nothing apply, and recovery from
//! a crash between recording entries and knowing the proxy pids, and pins an older pier made
//! (no client map): replaced when empty, kept working when ports are published there.
//!
//! Theory: the labs of priv_engines_support; the engine is driven on a thread in the host
//! namespace (`Lab::host.run`), and what exists afterwards is read from the kernel: the pinned
//! map (pier-bpf), the nft maps (pier-net) and /proc (proxy children).
//!
//! Needs root, cgroup2, nft and (for the proxy cases) the pier binary.
mod priv_engines_support;

use std::net::{SocketAddr, TcpListener};

use pier_bpf::Layout;
use pier_net::nft::Table;
use pier_publish::engine::{
    client_netns, register_client, retire_old_pins, select, sweep_clients, ClientNetns, Entry,
    Mode, PublishError,
};
use pier_publish::PortMapping;
use priv_engines_support::{
    pier_binary, privileged, run_client, with_engine, Client, Lab, Report, HOST_ADDR,
    OTHER_HOST_ADDR,
};

/// Not a test: the body of the client processes (unused here, shared support).
#[test]
fn client_process() {
    if let Ok(spec) = std::env::var("PIER_TEST_CLIENT") {
        priv_engines_support::client_main(&spec);
    }
}

fn specs(texts: &[&str]) -> Vec<PortMapping> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

/// How many map entries and nft elements exist in the lab's host.
fn counts(lab: &Lab) -> (usize, usize) {
    lab.host
        .run(|| {
            let bpf = pier_bpf::Publisher::open(&lab.settings.bpf_pin_dir)
                .map(|p| p.published().unwrap().len())
                .unwrap_or(0);
            (bpf, Table.published().unwrap().len())
        })
        .unwrap()
}

fn proxies_running(lab: &Lab) -> usize {
    let binary = lab.settings.proxy_binary.to_string_lossy().into_owned();
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|p| std::fs::read(p.path().join("cmdline")).ok())
        .filter(|c| c.starts_with(binary.as_bytes()) && c.windows(5).any(|w| w == b"proxy"))
        .filter(|c| String::from_utf8_lossy(c).contains("198.18.2.2"))
        .count()
}

#[test]
fn conflicts_name_the_port_and_its_owner() {
    if !privileged("conflicts") {
        return;
    }
    let lab = Lab::new("conflicts");
    lab.with_engine(Mode::Auto, |engine| {
        let first = lab.target();
        let (_, entries) = engine.plan(&first, &specs(&["18080:80"])).unwrap();
        engine.apply(&first, &entries).unwrap();
        let other = pier_publish::engine::Target {
            container_id: "pier-test-c2".into(),
            addresses: vec!["198.18.2.3".parse().unwrap()],
            bridge: Some("pier-test-br".into()),
        };
        let err = engine
            .plan(&other, &specs(&[&format!("{HOST_ADDR}:18080:80")]))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("port 18080/tcp on {HOST_ADDR} is already published by container pier-test-c1")
        );
        let holder = TcpListener::bind(format!("{OTHER_HOST_ADDR}:18081")).unwrap();
        let err = engine.plan(&other, &specs(&["18081:80"])).unwrap_err();
        let me = std::process::id() as i32;
        assert!(
            matches!(&err, PublishError::Bound { port: 18081, pid, .. } if *pid == me),
            "{err}"
        );
        drop(holder);
        // Another test's child forked between our bind and its exec holds a copy of the
        // listener until it execs (CLOEXEC): wait for the socket to be gone, not just closed here.
        let freed = (0..50).find_map(|_| match engine.plan(&other, &specs(&["18081:80"])) {
            Err(PublishError::Bound { .. }) => {
                std::thread::sleep(std::time::Duration::from_millis(20));
                None
            }
            other => Some(other),
        });
        assert!(matches!(freed, Some(Ok(_))), "{freed:?}");
        let udp_same_port = engine.plan(&other, &specs(&["18080:80/udp"]));
        assert!(udp_same_port.is_ok(), "{udp_same_port:?}");
        engine.remove(&entries).unwrap();
        assert!(engine.plan(&other, &specs(&["18080:80"])).is_ok());
    });
}

#[test]
fn picked_host_ports_are_free_and_reported() {
    if !privileged("picked") {
        return;
    }
    let lab = Lab::new("picked");
    lab.with_engine(Mode::Nat, |engine| {
        let (published, entries) = engine
            .plan(&lab.target(), &specs(&["80", "53/udp"]))
            .unwrap();
        let ports: Vec<u16> = published
            .iter()
            .flat_map(|p| p.host_ports.clone())
            .collect();
        assert_eq!(ports.len(), 2);
        assert!(ports.iter().all(|&p| p >= 1024), "{ports:?}");
        assert_eq!(
            entries.len(),
            4,
            "one element per port and container family"
        );
    });
}

#[test]
fn a_thousand_port_range_publishes_in_one_step_and_goes_away() {
    if !privileged("range") {
        return;
    }
    let lab = Lab::new("range");
    let entries = lab.with_engine(Mode::Auto, |engine| {
        let (published, entries) = engine
            .plan(
                &lab.target(),
                &specs(&[&format!("{HOST_ADDR}:20000-20999:1000-1999")]),
            )
            .unwrap();
        assert_eq!(published[0].host_ports.len(), 1000);
        engine.apply(&lab.target(), &entries).unwrap();
        entries
    });
    assert_eq!(
        counts(&lab),
        (1000, 1000),
        "one map entry and one nft element per port"
    );
    lab.with_engine(Mode::Auto, |engine| {
        engine.remove(&entries).unwrap();
        engine.remove(&entries).unwrap();
    });
    assert_eq!(counts(&lab), (0, 0));
}

#[test]
fn a_failure_in_the_middle_of_apply_leaves_nothing() {
    if !privileged("midway") {
        return;
    }
    let lab = Lab::new("midway");
    lab.with_engine(Mode::Auto, |engine| {
        let (_, entries) = engine
            .plan(&lab.target(), &specs(&["19000:80", "19001:80"]))
            .unwrap();
        // Someone else takes 19001 in the nft maps between plan and apply.
        let thief = pier_net::nft::Mapping {
            host: None,
            proto: pier_net::nft::Proto::Tcp,
            host_port: 19001,
            container: "198.18.2.3".parse().unwrap(),
            container_port: 80,
        };
        Table.publish_owned(&[thief], "pier-test-thief").unwrap();
        let err = engine.apply(&lab.target(), &entries).unwrap_err();
        assert!(err.to_string().contains("publish"), "{err}");
        Table.unpublish(&[thief]).unwrap();
    });
    assert_eq!(
        counts(&lab),
        (0, 0),
        "the map entries made before the failure are gone"
    );
}

#[test]
fn proxy_failure_midway_and_crash_recovery_leave_no_process() {
    if !privileged("proxy-crash") {
        return;
    }
    if pier_binary().is_none() {
        assert_ne!(
            std::env::var("CI").as_deref(),
            Ok("true"),
            "needs the pier binary under CI"
        );
        eprintln!("skipping: needs the pier binary (cargo build -p pier, or PIER_BINARY)");
        return;
    }
    let lab = Lab::new("proxy-crash");
    lab.with_engine(Mode::Proxy, |engine| {
        let target = lab.target();
        let (_, entries) = engine
            .plan(
                &target,
                &specs(&[
                    &format!("{HOST_ADDR}:19100:80"),
                    &format!("{HOST_ADDR}:19101:80"),
                ]),
            )
            .unwrap();
        let holder = TcpListener::bind(format!("{HOST_ADDR}:19101")).unwrap();
        assert!(engine.apply(&target, &entries).is_err());
        assert_eq!(proxies_running(&lab), 0, "the first proxy was stopped");
        drop(holder);

        // A crash after recording the planned entries (no pids) and starting the children.
        let made = engine.apply_recorded(&target, &entries).unwrap();
        assert!(made
            .iter()
            .all(|e| matches!(e, Entry::Proxy { pid: Some(_), .. })));
        assert_eq!(proxies_running(&lab), 2);
        engine.remove(&entries).unwrap();
        assert_eq!(
            proxies_running(&lab),
            0,
            "found by command line and stopped"
        );
        engine.remove(&made).unwrap();
    });
}

#[test]
fn auto_without_cgroup2_falls_back_to_nat_and_a_loopback_proxy() {
    if !privileged("fallback") {
        return;
    }
    let mut lab = Lab::new("fallback");
    let not_cgroup2 = tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap();
    lab.settings.bpf_cgroup = not_cgroup2.path().to_owned();
    lab.with_engine(Mode::Auto, |engine| {
        let (_, entries) = engine.plan(&lab.target(), &specs(&["19200:80"])).unwrap();
        let kinds: Vec<String> = entries
            .iter()
            .map(|e| match e {
                Entry::Bpf { .. } => "bpf".to_string(),
                Entry::Nft { host, .. } => format!("nft {host:?}"),
                Entry::Remote { host, .. } => format!("remote {host:?}"),
                Entry::Proxy { host, .. } => format!("proxy {host}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "proxy 127.0.0.1:19200",
                "proxy [::1]:19200",
                "nft None",
                "nft None"
            ],
            "{entries:?}"
        );
    });
    assert!(
        !lab.settings.bpf_pin_dir.exists(),
        "nothing loaded or pinned"
    );
}

#[test]
fn recovery_after_a_crash_during_unpublish_removes_the_rest() {
    if !privileged("unpublish-crash") {
        return;
    }
    let lab = Lab::new("unpublish-crash");
    lab.with_engine(Mode::Auto, |engine| {
        let (_, entries) = engine
            .plan(
                &lab.target(),
                &specs(&["19300-19309:1000-1009", "19300-19309:1000-1009/udp"]),
            )
            .unwrap();
        engine.apply(&lab.target(), &entries).unwrap();
        // The crash: removal got through the first third of the entries only.
        engine.remove(&entries[..entries.len() / 3]).unwrap();
        // Recovery (pier gc) removes the recorded entries, whatever still exists.
        pier_publish::engine::remove(&lab.settings, &entries).unwrap();
    });
    assert_eq!(counts(&lab), (0, 0));
}

#[test]
fn pins_made_for_another_network_namespace_are_refused() {
    if !privileged("other-netns") {
        return;
    }
    let lab = Lab::new("other-netns");
    lab.host
        .run(|| select(Mode::Ebpf, &lab.settings).map(drop))
        .unwrap()
        .unwrap();
    let elsewhere = lab
        .remote
        .run(|| select(Mode::Ebpf, &lab.settings).map(drop))
        .unwrap();
    let err = elsewhere.unwrap_err().to_string();
    assert!(err.contains("serve another network namespace"), "{err}");
    lab.host
        .run(|| select(Mode::Ebpf, &lab.settings).map(drop))
        .unwrap()
        .unwrap();
}

#[test]
fn an_ebpf_published_port_stays_reserved_on_the_host() {
    if !privileged("reserved") {
        return;
    }
    let lab = Lab::new("reserved");
    let wildcard: SocketAddr = "0.0.0.0:19400".parse().unwrap();
    let before = run_client(&lab, Client::Host127, "bind", wildcard);
    assert_eq!(
        before,
        Report::Ok {
            seen: wildcard.ip()
        }
    );
    with_engine(&lab, Mode::Ebpf, &specs(&["19400:80"]), |outcomes| {
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        assert_eq!(
            run_client(&lab, Client::Host127, "bind", wildcard),
            Report::Refused
        );
        let in_container = run_client(&lab, Client::Own, "bind", wildcard);
        assert_eq!(
            in_container,
            Report::Ok {
                seen: wildcard.ip()
            },
            "a container's own port"
        );
    });
}

/// Makes the lab's pins look like an older pier's: the programs loaded, no client map pin.
fn old_pins(lab: &Lab) {
    lab.with_engine(Mode::Ebpf, |_| ());
    let clients = lab.settings.bpf_pin_dir.join(pier_bpf::CLIENTS_MAP);
    std::fs::remove_file(clients).unwrap();
    assert_eq!(pier_bpf::layout(&lab.settings.bpf_pin_dir), Layout::Old);
}

/// Whether c2 registers as a client (on the host's thread, as the engine's run does).
fn c2_registers(lab: &Lab) -> bool {
    let netns = client_netns(lab.c2.fd()).unwrap();
    let subnets = [("198.18.2.0".parse().unwrap(), 24)];
    lab.host
        .run(|| register_client(&lab.settings, netns, &subnets).unwrap())
        .unwrap()
}

#[test]
fn an_older_piers_empty_pins_are_replaced() {
    if !privileged("old-empty") {
        return;
    }
    let lab = Lab::new("old-empty");
    old_pins(&lab);
    assert!(!c2_registers(&lab), "no client map, nothing registered");
    lab.with_engine(Mode::Auto, |_| ());
    assert_eq!(pier_bpf::layout(&lab.settings.bpf_pin_dir), Layout::Current);
    assert!(c2_registers(&lab), "the reloaded programs serve containers");
}

#[test]
fn an_older_piers_pins_with_ports_keep_working_until_gc_retires_them() {
    if !privileged("old-busy") {
        return;
    }
    let lab = Lab::new("old-busy");
    old_pins(&lab);
    let older = pier_bpf::Mapping {
        proto: pier_bpf::Proto::Tcp,
        host: "0.0.0.0:19500".parse().unwrap(),
        target: "198.18.2.2:80".parse().unwrap(),
    };
    let publisher = pier_bpf::Publisher::open(&lab.settings.bpf_pin_dir).unwrap();
    publisher.publish_owned(&older, "pier-test-older").unwrap();
    with_engine(&lab, Mode::Auto, &specs(&["19501:80"]), |outcomes| {
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        assert_eq!(pier_bpf::layout(&lab.settings.bpf_pin_dir), Layout::Old);
        for port in [19500, 19501] {
            let report = run_client(&lab, Client::Host127, "tcp", Client::Host127.dial(port));
            assert!(matches!(report, Report::Ok { .. }), "{port}: {report:?}");
        }
        assert!(!c2_registers(&lab), "old pins serve no container");
        assert!(
            !retire_old_pins(&lab.settings).unwrap(),
            "ports are published"
        );
    });
    publisher.unpublish(&older).unwrap();
    assert!(retire_old_pins(&lab.settings).unwrap());
    assert_eq!(pier_bpf::layout(&lab.settings.bpf_pin_dir), Layout::Missing);
    assert!(
        !retire_old_pins(&lab.settings).unwrap(),
        "nothing left to retire"
    );
}

/// A child process killed and reaped on drop.
struct Sleeper(std::process::Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn gc_sweeps_client_entries_of_namespaces_that_are_gone() {
    if !privileged("client-sweep") {
        return;
    }
    let lab = Lab::new("client-sweep");
    lab.with_engine(Mode::Ebpf, |_| ());
    // The lab's namespaces are held by fds only; a container's has its init in it.
    let in_c2 = lab
        .c2
        .run(|| std::process::Command::new("sleep").arg("600").spawn());
    let _init = Sleeper(in_c2.unwrap().unwrap());
    assert!(c2_registers(&lab));
    let gone = ClientNetns {
        cookie: u64::MAX,
        inode: 1,
    };
    let subnets = [("198.18.9.0".parse().unwrap(), 24)];
    let registered = lab
        .host
        .run(|| register_client(&lab.settings, gone, &subnets));
    assert!(registered.unwrap().unwrap());
    assert_eq!(sweep_clients(&lab.settings).unwrap(), [u64::MAX]);
    let clients = pier_bpf::Clients::open(&lab.settings.bpf_pin_dir).unwrap();
    let left: Vec<u64> = clients.list().unwrap().iter().map(|c| c.cookie).collect();
    assert_eq!(left, [client_netns(lab.c2.fd()).unwrap().cookie]);
    assert!(sweep_clients(&lab.settings).unwrap().is_empty());
}
