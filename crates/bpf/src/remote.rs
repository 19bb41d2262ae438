//! Remote clients at tc: the loader and map writer of `src/bpf/remote.bpf.c`.
//!
//! Theory of operation: the object (two sched_cls programs, the publish map `pier_remote`, the
//! flow maps, the stats) is loaded once and pinned in the subdirectory [`REMOTE_DIR`] of the pin
//! dir ([`load_remote`]); its programs are attached with tcx links, `pier_tc_in` to the ingress of
//! each uplink and `pier_tc_reply` to the ingress of each pier bridge ([`attach`]); every link is
//! pinned as `link-in-<ifindex>` / `link-reply-<ifindex>` there, so the attachment outlives pier
//! and one stat tells whether an interface has it. An interface that goes away takes its
//! attachment with it; [`attached`] lists the pins so the caller can unpin those of interfaces
//! that are gone. [`probe`] tells whether the kernel has tcx; the caller runs it once, after
//! the load that pinned the object.
//! [`crate::unpin_all`] removes the subdirectory with the rest.
//! A publish is one entry of `pier_remote` ([`RemotePublisher`]), a mirror of one nft DNAT element:
//! a specific host address with the index of the interface holding it, or the wildcard of one
//! family. Nothing here decides reachability alone: what the programs do not take, nft does.
//!
//! Kernel facilities: tcx (6.6+), bpf_redirect_neigh (5.10+), BTF. Root.
//! Tests: unit tests below; crates/publish/tests/priv_engines_remote.rs (namespaces of its own).

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use libbpf_rs::{MapCore, MapFlags, MapHandle, ObjectBuilder};

use crate::{is_bpffs, map_addr, Error, Proto, IPPROTO_TCP, IPPROTO_UDP};

/// The subdirectory of the pin dir holding the remote object's pins.
pub const REMOTE_DIR: &str = "remote";
/// The remote publish map (and its pin).
pub const REMOTE_MAP: &str = "pier_remote";
const STATS_MAP: &str = "pier_remote_stats";
/// Counters in [`STATS_MAP`] (remote.bpf.c's STAT_MAX).
const STATS: usize = 5;
const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/remote.bpf.o"));

/// Where a program goes: which hook of which kind of interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hook {
    /// `pier_tc_in` on an interface remote clients come in through.
    Uplink,
    /// `pier_tc_reply` on a pier bridge.
    Bridge,
}

impl Hook {
    fn program(self) -> &'static str {
        match self {
            Hook::Uplink => "pier_tc_in",
            Hook::Bridge => "pier_tc_reply",
        }
    }

    fn prefix(self) -> &'static str {
        match self {
            Hook::Uplink => "link-in-",
            Hook::Bridge => "link-reply-",
        }
    }
}

/// The remote object's pin directory under `pin_dir`.
pub fn remote_dir(pin_dir: &Path) -> PathBuf {
    pin_dir.join(REMOTE_DIR)
}

/// Whether the remote object is loaded and pinned under `pin_dir`.
pub fn remote_loaded(pin_dir: &Path) -> bool {
    remote_dir(pin_dir).join(REMOTE_MAP).exists()
}

/// Loads the remote object and pins its programs and maps under `<pin_dir>/remote`, unless they
/// are; returns whether it loaded them now. On failure removes what it pinned. Pins of an older
/// pier (fewer stats: programs that do not translate ICMP errors) are replaced when nothing is
/// published through them, and kept, still serving, until then.
pub fn load_remote(pin_dir: &Path) -> Result<bool, Error> {
    let dir = remote_dir(pin_dir);
    if remote_loaded(pin_dir) {
        if !outdated(&dir) || !RemotePublisher::open(pin_dir)?.is_empty() {
            return Ok(false);
        }
        remove_dir(&dir)?;
    }
    let res = load_into(&dir);
    if res.is_err() {
        let _ = remove_dir(&dir);
    }
    res.map(|()| true)
}

/// Removes the remote object's pins (links first, detaching the programs from every interface).
pub fn unpin_remote(pin_dir: &Path) -> Result<(), Error> {
    remove_dir(&remote_dir(pin_dir))
}

/// Whether the pinned object under `dir` predates this pier's programs: its stats map has
/// fewer counters than [`STATS`].
fn outdated(dir: &Path) -> bool {
    MapHandle::from_pinned_path(dir.join(STATS_MAP)).is_ok_and(|m| m.max_entries() < STATS as u32)
}

fn load_into(dir: &Path) -> Result<(), Error> {
    let pin_dir_err = |source| Error::PinDir {
        path: dir.to_owned(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(pin_dir_err)?;
    if !is_bpffs(dir).map_err(|e| pin_dir_err(e.into()))? {
        return Err(Error::NotBpffs {
            path: dir.to_owned(),
        });
    }
    let mut object = ObjectBuilder::default()
        .open_memory(OBJECT)
        .map_err(Error::Open)?
        .load()
        .map_err(Error::Load)?;
    crate::pin_object(&mut object, dir)
}

fn link_path(pin_dir: &Path, hook: Hook, ifindex: u32) -> PathBuf {
    remote_dir(pin_dir).join(format!("{}{ifindex}", hook.prefix()))
}

/// Attaches `hook`'s program to the ingress of interface `ifindex` unless a link is pinned for
/// it; returns whether it attached.
pub fn attach(pin_dir: &Path, hook: Hook, ifindex: u32) -> Result<bool, Error> {
    let path = link_path(pin_dir, hook, ifindex);
    if path.exists() {
        return Ok(false);
    }
    let prog_path = remote_dir(pin_dir).join(hook.program());
    let attach_err = |source: io::Error| Error::AttachTc {
        program: hook.program().into(),
        ifindex,
        source,
    };
    let prog = pier_sys::tcx::open_pinned(&prog_path).map_err(attach_err)?;
    let link = pier_sys::tcx::attach_ingress(prog.as_fd(), ifindex).map_err(attach_err)?;
    pier_sys::tcx::pin(link.as_fd(), &path).map_err(|source| Error::PinLink {
        program: hook.program().into(),
        path,
        source: libbpf_rs::Error::from(source),
    })?;
    Ok(true)
}

/// Whether this kernel takes tcx links: attaches `pier_tc_in` to loopback's ingress (index 1 in
/// every namespace) without pinning, and drops the link at once, detaching it. The program
/// leaves loopback's packets alone, so the moment it is there changes nothing.
pub fn probe(pin_dir: &Path) -> Result<(), Error> {
    const LOOPBACK: u32 = 1;
    let hook = Hook::Uplink;
    let attach_err = |source: io::Error| Error::AttachTc {
        program: hook.program().into(),
        ifindex: LOOPBACK,
        source,
    };
    let prog = pier_sys::tcx::open_pinned(&remote_dir(pin_dir).join(hook.program()))
        .map_err(attach_err)?;
    pier_sys::tcx::attach_ingress(prog.as_fd(), LOOPBACK)
        .map(drop)
        .map_err(attach_err)
}

/// The (hook, ifindex) of every link pinned under `pin_dir`.
pub fn attached(pin_dir: &Path) -> Vec<(Hook, u32)> {
    let Ok(entries) = std::fs::read_dir(remote_dir(pin_dir)) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            [Hook::Uplink, Hook::Bridge].into_iter().find_map(|hook| {
                let index = name.strip_prefix(hook.prefix())?.parse().ok()?;
                Some((hook, index))
            })
        })
        .collect()
}

/// Removes the pinned link of `hook` on `ifindex` (the program is detached once nothing else
/// holds the link; an interface that is gone has detached it already). Missing is fine.
pub fn unpin_link(pin_dir: &Path, hook: Hook, ifindex: u32) -> Result<(), Error> {
    let path = link_path(pin_dir, hook, ifindex);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(Error::Unpin { path, source: e }),
        _ => Ok(()),
    }
}

/// Removes every pin under `dir` and `dir` itself (links first: detaching them).
pub(crate) fn remove_dir(dir: &Path) -> Result<(), Error> {
    let entries = match std::fs::read_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(Error::PinDir {
                path: dir.to_owned(),
                source,
            })
        }
        Ok(entries) => entries,
    };
    let mut first = Ok(());
    for path in entries.flatten().map(|e| e.path()) {
        if let Err(source) = std::fs::remove_file(&path) {
            first = first.and(Err(Error::Unpin { path, source }));
        }
    }
    match std::fs::remove_dir(dir) {
        Err(source) if source.kind() != io::ErrorKind::NotFound => first.and(Err(Error::Unpin {
            path: dir.to_owned(),
            source,
        })),
        _ => first,
    }
}

/// A published front for remote clients: packets for `host` (`None`: any local address of the
/// target's family) and `port` go to `target`; `ifindex` is the interface a specific `host` is
/// on (packets for it are taken only there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteEntry {
    pub proto: Proto,
    pub host: Option<IpAddr>,
    pub port: u16,
    pub target: SocketAddr,
    pub ifindex: u32,
}

impl RemoteEntry {
    /// The host address as a socket address (the wildcard of the target's family for `None`).
    pub fn front(&self) -> SocketAddr {
        let any = match self.target {
            SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        };
        SocketAddr::new(self.host.unwrap_or(any), self.port)
    }

    /// struct pier_key; the IPv4 wildcard is ::ffff:0.0.0.0, the IPv6 one ::.
    fn key(&self) -> [u8; 20] {
        let mut k = [0u8; 20];
        match (self.host, self.target) {
            (Some(ip), _) => k[..16].copy_from_slice(&map_addr(ip)),
            (None, SocketAddr::V4(_)) => k[10..12].copy_from_slice(&[0xff, 0xff]),
            (None, SocketAddr::V6(_)) => {}
        }
        k[16..18].copy_from_slice(&self.port.to_be_bytes());
        k[18] = match self.proto {
            Proto::Tcp => IPPROTO_TCP,
            Proto::Udp => IPPROTO_UDP,
        };
        k
    }

    /// struct pier_remote_target { u8 addr[16]; u16 port; u16 pad; u32 ifindex }.
    fn value(&self) -> [u8; 24] {
        let mut v = [0u8; 24];
        v[..16].copy_from_slice(&map_addr(self.target.ip()));
        v[16..18].copy_from_slice(&self.target.port().to_be_bytes());
        v[20..24].copy_from_slice(&self.ifindex.to_ne_bytes());
        v
    }
}

/// Writes [`REMOTE_MAP`] (usable from any process).
#[derive(Debug)]
pub struct RemotePublisher {
    map: MapHandle,
}

impl RemotePublisher {
    /// Opens the map pinned by [`load_remote`] under `pin_dir`.
    pub fn open(pin_dir: &Path) -> Result<Self, Error> {
        let path = remote_dir(pin_dir).join(REMOTE_MAP);
        let map = MapHandle::from_pinned_path(&path).map_err(|source| Error::OpenMap {
            map: REMOTE_MAP.into(),
            path,
            source,
        })?;
        Ok(Self { map })
    }

    /// Publishes `e`; an entry for the same front is replaced (nft's element is the authority
    /// on conflicts, and it was added first).
    pub fn publish(&self, e: &RemoteEntry) -> Result<(), Error> {
        self.map
            .update(&e.key(), &e.value(), MapFlags::ANY)
            .map_err(|source| Error::Update {
                host: e.front(),
                proto: e.proto,
                map: REMOTE_MAP.into(),
                source,
            })
    }

    /// Removes `e` if it is there with `e`'s target (a front published again since, to another
    /// target, is left alone); missing is fine.
    pub fn unpublish(&self, e: &RemoteEntry) -> Result<(), Error> {
        let err = |source| Error::Delete {
            host: e.front(),
            proto: e.proto,
            map: REMOTE_MAP.into(),
            source,
        };
        let current = self.map.lookup(&e.key(), MapFlags::ANY).map_err(err)?;
        if current.as_deref().map(|v| &v[..18]) != Some(&e.value()[..18]) {
            return Ok(());
        }
        match self.map.delete(&e.key()) {
            Err(source) if source.kind() != libbpf_rs::ErrorKind::NotFound => Err(err(source)),
            _ => Ok(()),
        }
    }

    /// How many fronts are published.
    pub fn len(&self) -> usize {
        self.map.keys().count()
    }

    /// Whether nothing is published.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the programs did, summed over CPUs since they were loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteStats {
    /// Packets from remote clients translated and redirected to a container.
    pub translated_in: u64,
    /// Replies translated back and redirected to the client.
    pub translated_out: u64,
    /// Flows started.
    pub flows: u64,
    /// Packets of a published front left to the kernel because the FIB had no route or the
    /// egress MTU was too small.
    pub no_route: u64,
    /// ICMP errors about a flow translated and redirected (to the container or the client).
    pub icmp: u64,
}

/// Reads the stats map pinned under `pin_dir`.
pub fn remote_stats(pin_dir: &Path) -> Result<RemoteStats, Error> {
    let path = remote_dir(pin_dir).join(STATS_MAP);
    let map = MapHandle::from_pinned_path(&path).map_err(|source| Error::OpenMap {
        map: STATS_MAP.into(),
        path,
        source,
    })?;
    // An older object's map has fewer counters: the missing ones read as 0.
    let mut sums = [0u64; STATS];
    for (i, sum) in sums.iter_mut().enumerate() {
        let per_cpu = map
            .lookup_percpu(&(i as u32).to_ne_bytes(), MapFlags::ANY)
            .map_err(|source| Error::Lookup {
                map: STATS_MAP.into(),
                source,
            })?
            .unwrap_or_default();
        *sum = per_cpu
            .iter()
            .filter_map(|v| Some(u64::from_ne_bytes(v.get(..8)?.try_into().ok()?)))
            .sum();
    }
    Ok(RemoteStats {
        translated_in: sums[0],
        translated_out: sums[1],
        flows: sums[2],
        no_route: sums[3],
        icmp: sums[4],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(host: Option<&str>, target: &str) -> RemoteEntry {
        RemoteEntry {
            proto: Proto::Tcp,
            host: host.map(|h| h.parse().unwrap()),
            port: 8080,
            target: target.parse().unwrap(),
            ifindex: 7,
        }
    }

    #[test]
    fn wildcards_are_one_key_per_family() {
        let v4 = entry(None, "198.18.0.2:80").key();
        let v6 = entry(None, "[fd00::2]:80").key();
        assert_eq!(
            &v4[..16],
            &[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(&v6[..16], &[0; 16]);
        assert_eq!(&v4[16..], &[0x1f, 0x90, IPPROTO_TCP, 0]);
        assert_eq!(
            entry(None, "198.18.0.2:80").front().to_string(),
            "0.0.0.0:8080"
        );
    }

    #[test]
    fn specific_keys_are_v4_mapped_and_values_carry_the_interface() {
        let e = entry(Some("198.18.1.1"), "198.18.0.2:80");
        assert_eq!(&e.key()[10..16], &[0xff, 0xff, 198, 18, 1, 1]);
        let v = e.value();
        assert_eq!(&v[10..18], &[0xff, 0xff, 198, 18, 0, 2, 0, 80]);
        assert_eq!(u32::from_ne_bytes(v[20..24].try_into().unwrap()), 7);
    }
}
