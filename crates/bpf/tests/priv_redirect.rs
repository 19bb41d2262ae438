//! Privileged test of the eBPF publish programs against the real kernel.
//!
//! Theory: the programs are loaded and pinned on a private bpffs mounted on a temp dir, and attached to a
//! child cgroup2 directory of the test's own (`/sys/fs/cgroup/unified/pier-test-<pid>`), so nothing outside
//! the test is affected. Echo servers listen on 127.0.0.1:B (TCP and UDP); 127.0.0.1:A, [::1]:A or the
//! wildcard :A is published to B.
//! The test process itself is the client: it moves into the test cgroup (cgroup.procs) for the redirected
//! checks and stays in its original cgroup for the scoping check. Client namespaces: a thread of the test
//! unshares a network namespace of its own (addresses on its loopback, 198.18.0.0/15 and 2001:2::/48) and
//! is the "container" whose connections are redirected once its cookie is registered. Everything is undone by `Fixture`'s drop,
//! also when an assertion fails: back to the original cgroup, detach and unpin, rmdir the cgroup, unmount.
//!
//! Needs root, cgroup2 at /sys/fs/cgroup/unified and BTF. Skips without root unless CI=true.

use std::io::{self, Read, Write};
use std::net::{
    Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, TcpListener, TcpStream, UdpSocket,
};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::thread;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use pier_bpf::{Client, Clients, Layout, Mapping, Programs, Proto, Publisher};

const CGROUP2: &str = "/sys/fs/cgroup/unified";
const LOCALHOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// The tests move the whole process between cgroups: one at a time.
/// No test may hang on a lost datagram or a silent peer.
const TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
static SERIAL: Mutex<()> = Mutex::new(());

fn privileged() -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: this test needs root"
    );
    eprintln!("skipping: needs root (cgroup BPF, bpffs)");
    false
}

/// A private bpffs, a test cgroup with the programs attached, and the way back. Cleans up on drop.
struct Fixture {
    bpffs: tempfile::TempDir,
    cgroup: PathBuf,
    home_cgroup: PathBuf,
    programs: Option<Programs>,
    _serial: MutexGuard<'static, ()>,
}

impl Fixture {
    fn new(name: &str) -> Self {
        let serial = SERIAL
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let bpffs = tempfile::Builder::new()
            .prefix("pier-test-bpffs-")
            .tempdir()
            .unwrap();
        mount(
            Some("bpf"),
            bpffs.path(),
            Some("bpf"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        let cgroup = Path::new(CGROUP2).join(format!("pier-test-{}-{name}", std::process::id()));
        let mut fx = Fixture {
            bpffs,
            cgroup,
            home_cgroup: own_cgroup(),
            programs: None,
            _serial: serial,
        };
        std::fs::create_dir(&fx.cgroup).unwrap();
        let programs = Programs::load_and_pin(&fx.pin_dir()).unwrap();
        programs.attach(&fx.cgroup).unwrap();
        fx.programs = Some(programs);
        fx
    }

    fn pin_dir(&self) -> PathBuf {
        self.bpffs.path().join("pier")
    }

    fn publisher(&self) -> Publisher {
        self.programs.as_ref().unwrap().publisher().unwrap()
    }

    fn enter(&self) {
        move_self(&self.cgroup).unwrap();
    }

    fn leave(&self) {
        move_self(&self.home_cgroup).unwrap();
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let mut errors = Vec::new();
        if let Err(e) = move_self(&self.home_cgroup) {
            errors.push(format!("leaving test cgroup: {e}"));
        }
        self.programs = None;
        if let Err(e) = pier_bpf::unpin_all(&self.pin_dir()) {
            errors.push(e.to_string());
        }
        if let Err(e) = std::fs::remove_dir(&self.cgroup) {
            errors.push(format!("rmdir {}: {e}", self.cgroup.display()));
        }
        if let Err(e) = umount2(self.bpffs.path(), MntFlags::MNT_DETACH) {
            errors.push(format!("umount {}: {e}", self.bpffs.path().display()));
        }
        if !errors.is_empty() && !thread::panicking() {
            panic!("cleanup failed: {errors:?}");
        }
    }
}

/// This process's cgroup2 directory, from the `0::` line of /proc/self/cgroup.
fn own_cgroup() -> PathBuf {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let rel = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("a cgroup2 line");
    Path::new(CGROUP2).join(rel.trim_start_matches('/'))
}

fn move_self(cgroup: &Path) -> io::Result<()> {
    std::fs::write(cgroup.join("cgroup.procs"), std::process::id().to_string())
}

/// A port that is free now (bound and released).
fn free_port() -> u16 {
    TcpListener::bind((LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn tcp_echo_server() -> u16 {
    let listener = TcpListener::bind((LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            thread::spawn(move || {
                let mut buf = [0u8; 64];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            });
        }
    });
    port
}

fn udp_echo_server() -> u16 {
    let sock = UdpSocket::bind((LOCALHOST, 0)).unwrap();
    let port = sock.local_addr().unwrap().port();
    thread::spawn(move || {
        let mut buf = [0u8; 64];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    });
    port
}

fn tcp_echo(addr: SocketAddr) -> io::Result<TcpStream> {
    let mut conn = TcpStream::connect(addr)?;
    conn.set_read_timeout(Some(TIMEOUT))?;
    conn.write_all(b"ping")?;
    let mut buf = [0u8; 4];
    conn.read_exact(&mut buf)?;
    assert_eq!(&buf, b"ping");
    Ok(conn)
}

#[test]
fn published_port_redirects_only_inside_the_cgroup() {
    if !privileged() {
        return;
    }
    let fx = Fixture::new("tcp");
    let publisher = fx.publisher();
    let (a, b) = (free_port(), tcp_echo_server());
    let published = SocketAddrV4::new(LOCALHOST, a);
    let m = Mapping {
        proto: Proto::Tcp,
        host: published.into(),
        target: SocketAddrV4::new(LOCALHOST, b).into(),
    };
    publisher.publish(&m).unwrap();
    assert!(matches!(
        publisher.publish(&m),
        Err(pier_bpf::Error::AlreadyPublished { .. })
    ));

    // Outside the test cgroup nothing is redirected: nobody listens on A.
    let outside = TcpStream::connect(published).map(|_| ()).unwrap_err();
    assert_eq!(outside.kind(), io::ErrorKind::ConnectionRefused);

    fx.enter();
    let conn =
        tcp_echo(published.into()).expect("connect to the published port reaches the server");
    assert_eq!(
        conn.peer_addr().unwrap(),
        published.into(),
        "getpeername shows what was dialled"
    );
    let bind = TcpListener::bind(published).map(|_| ()).unwrap_err();
    assert_eq!(
        bind.raw_os_error(),
        Some(nix::libc::EPERM),
        "bind of a published port"
    );
    let unpublished_bind = TcpListener::bind((LOCALHOST, 0));
    assert!(unpublished_bind.is_ok(), "other binds are untouched");

    publisher.unpublish(&m).unwrap();
    let after = TcpStream::connect(published).map(|_| ()).unwrap_err();
    assert_eq!(after.kind(), io::ErrorKind::ConnectionRefused);
    fx.leave();
}

#[test]
fn udp_datagrams_are_redirected_and_answered_from_the_published_address() {
    if !privileged() {
        return;
    }
    let fx = Fixture::new("udp");
    let publisher = fx.publisher();
    let (a, b) = (free_port(), udp_echo_server());
    let published = SocketAddrV4::new(LOCALHOST, a);
    let m = Mapping {
        proto: Proto::Udp,
        host: published.into(),
        target: SocketAddrV4::new(LOCALHOST, b).into(),
    };
    publisher.publish(&m).unwrap();

    fx.enter();
    let sock = UdpSocket::bind((LOCALHOST, 0)).unwrap();
    sock.set_read_timeout(Some(TIMEOUT)).unwrap();
    sock.send_to(b"ping", published).unwrap();
    let mut buf = [0u8; 8];
    let (n, from) = sock.recv_from(&mut buf).expect("the echo server answers");
    assert_eq!(&buf[..n], b"ping");
    assert_eq!(
        from,
        published.into(),
        "recvmsg shows the published address as the sender"
    );

    let connected = UdpSocket::bind((LOCALHOST, 0)).unwrap();
    connected.set_read_timeout(Some(TIMEOUT)).unwrap();
    connected.connect(published).unwrap();
    assert_eq!(connected.peer_addr().unwrap(), published.into());
    connected.send(b"pong").unwrap();
    let n = connected
        .recv(&mut buf)
        .expect("a connected UDP socket gets the answer");
    assert_eq!(&buf[..n], b"pong");
    fx.leave();

    // IPv6 client, IPv4 server: works for connected sockets (the kernel refuses a sendmsg6 rewrite to a
    // v4-mapped address on unconnected ones).
    let v6: SocketAddr = SocketAddrV6::new(Ipv6Addr::LOCALHOST, a, 0, 0).into();
    publisher.publish(&Mapping { host: v6, ..m }).unwrap();
    fx.enter();
    let sock6 = UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).unwrap();
    sock6.set_read_timeout(Some(TIMEOUT)).unwrap();
    sock6.connect(v6).unwrap();
    assert_eq!(sock6.peer_addr().unwrap(), v6);
    sock6.send(b"ping6").unwrap();
    let n = sock6
        .recv(&mut buf)
        .expect("the IPv4 server answers the IPv6 client");
    assert_eq!(&buf[..n], b"ping6");
    fx.leave();
}

#[test]
fn ipv6_and_wildcard_clients_reach_an_ipv4_server() {
    if !privileged() {
        return;
    }
    let fx = Fixture::new("v6");
    let publisher = fx.publisher();
    let (a, b) = (free_port(), tcp_echo_server());
    let target = SocketAddrV4::new(LOCALHOST, b).into();
    let wildcard = Mapping {
        proto: Proto::Tcp,
        host: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, a).into(),
        target,
    };
    publisher.publish(&wildcard).unwrap();
    let v6_wildcard = Mapping {
        host: SocketAddrV6::new(Ipv6Addr::UNSPECIFIED, a, 0, 0).into(),
        ..wildcard
    };
    assert!(
        matches!(
            publisher.publish(&v6_wildcard),
            Err(pier_bpf::Error::AlreadyPublished { .. })
        ),
        "0.0.0.0 and :: are one wildcard"
    );

    fx.enter();
    let v4: SocketAddr = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 2), a).into();
    let conn = tcp_echo(v4).expect("any 127/8 address matches the wildcard");
    assert_eq!(conn.peer_addr().unwrap(), v4);
    let v6: SocketAddr = SocketAddrV6::new(Ipv6Addr::LOCALHOST, a, 0, 0).into();
    let conn = tcp_echo(v6).expect("an IPv6 client reaches the IPv4 server");
    assert_eq!(conn.peer_addr().unwrap(), v6, "getpeername shows [::1]:A");
    let bind = TcpListener::bind(v6_wildcard.host).map(|_| ()).unwrap_err();
    assert_eq!(
        bind.raw_os_error(),
        Some(nix::libc::EPERM),
        "bind of [::]:A"
    );
    let bind = TcpListener::bind(v6).map(|_| ()).unwrap_err();
    assert_eq!(
        bind.raw_os_error(),
        Some(nix::libc::EPERM),
        "bind of [::1]:A"
    );
    fx.leave();

    publisher.unpublish(&wildcard).unwrap();
    let v6_only = Mapping {
        host: v6,
        ..wildcard
    };
    publisher.publish(&v6_only).unwrap();
    fx.enter();
    assert!(tcp_echo(v6).is_ok(), "a [::1] publish serves IPv6 clients");
    let v4_client = TcpStream::connect(SocketAddrV4::new(LOCALHOST, a))
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        v4_client.kind(),
        io::ErrorKind::ConnectionRefused,
        "but not 127.0.0.1"
    );
    fx.leave();
}

#[test]
fn detach_stops_redirecting_and_pins_need_a_bpffs() {
    if !privileged() {
        return;
    }
    let fx = Fixture::new("detach");
    let publisher = fx.publisher();
    let (a, b) = (free_port(), tcp_echo_server());
    let published: SocketAddr = SocketAddrV4::new(LOCALHOST, a).into();
    let target = SocketAddrV4::new(LOCALHOST, b).into();
    publisher
        .publish(&Mapping {
            proto: Proto::Tcp,
            host: published,
            target,
        })
        .unwrap();
    fx.enter();
    assert!(tcp_echo(published).is_ok(), "redirected while attached");
    pier_bpf::detach(&fx.pin_dir()).unwrap();
    let err = TcpStream::connect(published).map(|_| ()).unwrap_err();
    assert_eq!(
        err.kind(),
        io::ErrorKind::ConnectionRefused,
        "no redirect after detach"
    );
    fx.leave();

    let not_bpffs = tempfile::Builder::new()
        .prefix("pier-test-pins-")
        .tempdir()
        .unwrap();
    let err = Programs::load_and_pin(not_bpffs.path()).unwrap_err();
    assert!(matches!(err, pier_bpf::Error::NotBpffs { .. }), "{err}");
    assert!(err
        .to_string()
        .contains(&not_bpffs.path().display().to_string()));
}

/// Runs `work` on a thread in a new network namespace with loopback up and `addrs` on it.
fn in_new_netns<T: Send>(addrs: &[&str], work: impl FnOnce() -> T + Send) -> T {
    thread::scope(|s| {
        s.spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            let mut commands = vec![vec!["link", "set", "lo", "up"]];
            commands.extend(addrs.iter().map(|a| vec!["addr", "add", a, "dev", "lo"]));
            for args in commands {
                let status = std::process::Command::new("ip").args(&args).status();
                assert!(status.unwrap().success(), "ip {args:?}");
            }
            work()
        })
        .join()
        .unwrap()
    })
}

/// The cookie and inode of the calling thread's network namespace.
fn own_netns() -> (u64, u64) {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let sock = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0)).unwrap();
    let cookie = pier_sys::publish::netns_cookie(sock.as_fd()).unwrap();
    let ino = std::fs::metadata("/proc/thread-self/ns/net").unwrap().ino();
    (cookie, ino)
}

fn refused(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, TIMEOUT)
        .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
}

#[test]
fn a_registered_client_namespace_reaches_targets_on_its_own_networks_only() {
    if !privileged() {
        return;
    }
    let fx = Fixture::new("clients");
    assert_eq!(pier_bpf::layout(&fx.pin_dir()), Layout::Current);
    let (publisher, clients) = (fx.publisher(), Clients::open(&fx.pin_dir()).unwrap());
    let addrs = [
        "198.18.5.1/32",
        "198.18.6.1/32",
        "2001:2:5::1/128",
        "2001:2:6::1/128",
    ];
    let tcp = |host: &str, target: &str| Mapping {
        proto: Proto::Tcp,
        host: host.parse().unwrap(),
        target: target.parse().unwrap(),
    };
    let host_addr = tcp("198.18.6.1:18001", "198.18.5.1:18000");
    let loopback = tcp("127.0.0.1:18002", "198.18.5.1:18000");
    let wildcard = tcp("0.0.0.0:18003", "198.18.5.1:18000");
    let v6 = tcp("[2001:2:6::1]:18004", "[2001:2:5::1]:18000");
    for m in [&host_addr, &loopback, &wildcard, &v6] {
        publisher.publish(m).unwrap();
    }
    fx.enter();
    let listed = in_new_netns(&addrs, || {
        let listener = TcpListener::bind("[::]:18000").unwrap();
        thread::spawn(move || {
            for conn in listener.incoming().map_while(Result::ok) {
                let _ = (&conn).write_all(b"ok");
            }
        });
        let (cookie, netns_inode) = own_netns();
        assert!(
            refused(host_addr.host),
            "an unregistered namespace is left alone"
        );
        let mut client = Client {
            cookie,
            netns_inode,
            subnets: vec![("198.18.7.0".parse().unwrap(), 24)],
        };
        clients.register(&client).unwrap();
        assert!(
            refused(host_addr.host),
            "a target off the client's networks is left to nat"
        );
        client.subnets = vec![
            ("198.18.5.0".parse().unwrap(), 24),
            ("2001:2:5::".parse().unwrap(), 64),
        ];
        clients.register(&client).unwrap();
        for dialled in [host_addr.host, v6.host] {
            let mut conn = TcpStream::connect_timeout(&dialled, TIMEOUT).expect("redirected");
            assert_eq!(
                conn.peer_addr().unwrap(),
                dialled,
                "getpeername shows {dialled}"
            );
            let mut buf = [0u8; 2];
            conn.set_read_timeout(Some(TIMEOUT)).unwrap();
            conn.read_exact(&mut buf).unwrap();
        }
        assert!(refused(loopback.host), "a container's 127.0.0.1 is its own");
        assert!(
            refused(wildcard.host),
            "no loopback-wildcard match for a container"
        );
        let bind = TcpListener::bind(host_addr.host);
        assert!(bind.is_ok(), "binds in a container are its business");
        drop(bind);
        let listed = clients.list().unwrap();
        clients.unregister(cookie).unwrap();
        clients.unregister(cookie).unwrap();
        assert!(refused(host_addr.host), "unregistered again");
        (listed, client)
    });
    fx.leave();
    assert_eq!(listed.0, vec![listed.1]);
    assert!(clients.list().unwrap().is_empty());
}
