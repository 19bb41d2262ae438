//! pier-bpf: socket-level port publishing with eBPF (the `ebpf` publish engine's kernel half).
//!
//! Theory of operation: one BPF object (`src/bpf/publish.bpf.c`) holds ten cgroup sock_addr programs
//! (connect, sendmsg, recvmsg, getpeername, bind; each for IPv4 and IPv6) and the hash map `pier_publish`,
//! keyed by (host address or all-zero for the wildcard, host port, protocol) with the container's
//! (address, port) as value. Addresses are 16 bytes, IPv4 in v4-mapped form, so an IPv6 client reaches an
//! IPv4 container through the same entry; the wildcard matches loopback destinations only.
//! The programs rewrite a published destination inside connect(2)/sendmsg(2), before routing, translate
//! it back for getpeername(2)/recvmsg(2), and refuse a host bind(2) of a published port. They are loaded and
//! pinned ONCE ([`Programs::load_and_pin`], production pin dir [`PIN_DIR`]); attaching to a cgroup2 directory
//! ([`Programs::attach`]) pins one bpf_link per program, so the attachment outlives this process until
//! [`detach`] removes it. Publishing a port is one map update ([`Publisher::publish`]), never a program load.
//!
//! Kernel facilities needed: cgroup2 (the hooks attach to a cgroup2 directory: `/sys/fs/cgroup/unified` on
//! hybrid hosts), BTF at `/sys/kernel/btf/vmlinux` (vmlinux.h is generated from it at build time, and
//! BPF_MAP_TYPE_SK_STORAGE needs BTF), bpffs (pins; [`mount_bpffs`] mounts it at `/sys/fs/bpf` if missing),
//! bpf_link for cgroups (5.7+), getpeername/recvmsg hooks (5.8+). Root (CAP_BPF + CAP_NET_ADMIN).
//!
//! Why C: BPF programs in Rust (aya-ebpf) need nightly and rust-src; pier builds on stable, so the programs
//! are C compiled by clang in build.rs and loaded with libbpf-rs's safe API (no `unsafe` here; the tcx
//! attach libbpf-rs lacks is pier-sys's `tcx` module).
//!
//! A second map, `pier_owner` (same key), names the container that published each key; the programs never
//! read it, the publish engine lists it to name a conflicting port's owner ([`Publisher::published`]).
//! The "host" network namespace is the one whose cookie [`Programs::load_and_pin_for`] writes into entry 0
//! of the pinned array `pier_config` (pier passes the namespace it runs in; 0 means the initial one);
//! [`host_netns_cookie`] reads it back, so a later pier can tell whether the pins serve its namespace.
//!
//! Client namespaces: the programs serve sockets of the host's namespace and of every namespace registered in
//! the pinned hash map `pier_clients` ([`Clients`], keyed by netns cookie, valued with the container's
//! networks as address + mask and its netns inode). A registered container's connect/sendmsg to a published
//! (address, port, protocol) is rewritten only when the target lies on one of its networks (same bridge:
//! routable and allowed by isolation); its loopback and the wildcard stay its own. Pins made by an older
//! pier lack that map: [`layout`] tells ([`Layout::Old`]), so the publish engine can reload or fall back.
//!
//! Limits: the wildcard covers loopback only (the publish engine adds one entry per other host address);
//! a bind of 0.0.0.0/:: is refused only for ports published on the wildcard or loopback; bind refusals apply
//! to the host's namespace only; unregistered namespaces (which may have no route to the target) and
//! targets off a client's networks are the nat engine's.
//!
//! Remote clients: a second object (`src/bpf/remote.bpf.c`, loader in `remote.rs`) does DNAT for clients
//! coming in through an uplink at tc ingress, before netfilter, with flow maps of its own instead of
//! conntrack, and translates replies back at each pier bridge's ingress. It is pinned in the subdirectory
//! `remote/` of the pin dir ([`load_remote`], [`attach_remote`] with tcx links pinned per interface) and
//! published through the map `pier_remote` ([`RemotePublisher`]), a mirror of the nat engine's DNAT
//! elements: what it does not take, nft does.
//!
//! Measured here (debug build, kernel 6.18): load+pin 12–14 ms, attach of all ten programs with pinned
//! links ~0.5 ms, publish ~1.1 µs and unpublish ~0.7 µs per port (1,000 ports).
//!
//! Tests: unit tests below; `tests/priv_redirect.rs` (root; private bpffs, a `pier-test-` child cgroup and,
//! for client namespaces, a network namespace of the test's own).

use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, Object, ObjectBuilder};

mod remote;
use nix::mount::{mount, MsFlags};
use nix::sys::statfs::{statfs, FsType};
pub use remote::{
    attach as attach_remote, attached as attached_remote, load_remote, probe as probe_remote,
    remote_dir, remote_loaded, remote_stats, unpin_link as unpin_remote_link, unpin_remote, Hook,
    RemoteEntry, RemotePublisher, RemoteStats, REMOTE_DIR, REMOTE_MAP,
};

/// Where production pins programs, links and the map.
pub const PIN_DIR: &str = "/sys/fs/bpf/pier";
/// The name of the publish map, and of its pin under the pin dir.
pub const PUBLISH_MAP: &str = "pier_publish";
/// The name of the map (and pin) naming, per published key, the container that published it.
pub const OWNER_MAP: &str = "pier_owner";
/// The name of the map (and pin) whose entry 0 is the host network namespace's cookie.
pub const CONFIG_MAP: &str = "pier_config";
/// The name of the map (and pin) of registered client namespaces (containers), keyed by netns cookie.
pub const CLIENTS_MAP: &str = "pier_clients";
/// How many networks (subnets) one client namespace can be registered with.
pub const CLIENT_SUBNETS: usize = 4;
/// Bytes of a `struct pier_client` value: four (address, mask) pairs and the netns inode.
const CLIENT_LEN: usize = CLIENT_SUBNETS * 32 + 8;
/// Bytes of an owner id in [`OWNER_MAP`] (longer ids are cut).
const OWNER_LEN: usize = 64;

const OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/publish.bpf.o"));
pub(crate) const IPPROTO_TCP: u8 = 6;
pub(crate) const IPPROTO_UDP: u8 = 17;
const BPF_FS_MAGIC: FsType = FsType(0xcafe4a11);

/// A failure of one step, naming the program, map or path involved.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("opening the embedded BPF object: {0}")]
    Open(#[source] libbpf_rs::Error),
    #[error("loading the BPF object into the kernel (verifier or missing kernel facility): {0}")]
    Load(#[source] libbpf_rs::Error),
    #[error("creating pin directory {path}: {source}")]
    PinDir { path: PathBuf, source: io::Error },
    #[error("{path} is not on a bpffs: mount one there (mount -t bpf bpf {path})")]
    NotBpffs { path: PathBuf },
    #[error("pinning program {program} at {path}: {source}")]
    PinProgram {
        program: String,
        path: PathBuf,
        source: libbpf_rs::Error,
    },
    #[error("pinning map {map} at {path}: {source}")]
    PinMap {
        map: String,
        path: PathBuf,
        source: libbpf_rs::Error,
    },
    #[error("opening cgroup2 directory {path}: {source}")]
    OpenCgroup { path: PathBuf, source: io::Error },
    #[error("attaching program {program} to cgroup {path}: {source}")]
    Attach {
        program: String,
        path: PathBuf,
        source: libbpf_rs::Error,
    },
    #[error("attaching program {program} to the tc ingress of interface {ifindex} (tcx, Linux 6.6+): {source}")]
    AttachTc {
        program: String,
        ifindex: u32,
        source: io::Error,
    },
    #[error("pinning the link of program {program} at {path}: {source}")]
    PinLink {
        program: String,
        path: PathBuf,
        source: libbpf_rs::Error,
    },
    #[error("detaching the link pinned at {path}: {source}")]
    Detach {
        path: PathBuf,
        source: libbpf_rs::Error,
    },
    #[error("removing pin {path}: {source}")]
    Unpin { path: PathBuf, source: io::Error },
    #[error("opening map {map} pinned at {path}: {source}")]
    OpenMap {
        map: String,
        path: PathBuf,
        source: libbpf_rs::Error,
    },
    #[error("port {host} ({proto}) is already published in map {map}")]
    AlreadyPublished {
        host: SocketAddr,
        proto: Proto,
        map: String,
    },
    #[error("updating map {map} for {host} ({proto}): {source}")]
    Update {
        host: SocketAddr,
        proto: Proto,
        map: String,
        source: libbpf_rs::Error,
    },
    #[error("deleting {host} ({proto}) from map {map}: {source}")]
    Delete {
        host: SocketAddr,
        proto: Proto,
        map: String,
        source: libbpf_rs::Error,
    },
    #[error("reading map {map}: {source}")]
    Lookup {
        map: String,
        source: libbpf_rs::Error,
    },
    #[error("mounting bpffs at {path}: {source}")]
    Mount { path: PathBuf, source: io::Error },
    #[error("client namespace {cookie}: subnet {subnet}: {why}")]
    BadSubnet {
        cookie: u64,
        subnet: String,
        why: &'static str,
    },
    #[error("registering client namespace {cookie} in map {map}: {source}")]
    Register {
        cookie: u64,
        map: String,
        source: libbpf_rs::Error,
    },
    #[error("unregistering client namespace {cookie} from map {map}: {source}")]
    Unregister {
        cookie: u64,
        map: String,
        source: libbpf_rs::Error,
    },
}

/// The transport protocol of a published port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Tcp,
    Udp,
}

impl std::fmt::Display for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Proto::Tcp => "tcp",
            Proto::Udp => "udp",
        })
    }
}

/// One published port: clients dialling `host` reach `target`. A host address of 0.0.0.0 or :: is the
/// wildcard: any loopback address (127.0.0.0/8, ::1) of either family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mapping {
    pub proto: Proto,
    pub host: SocketAddr,
    pub target: SocketAddr,
}

/// A map address: 16 bytes, IPv4 v4-mapped, the wildcard all zeros.
pub(crate) fn map_addr(ip: IpAddr) -> [u8; 16] {
    if ip.is_unspecified() {
        return [0; 16];
    }
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped().octets(),
        IpAddr::V6(v6) => v6.octets(),
    }
}

impl Mapping {
    /// The map key: struct pier_key { u8 addr[16]; u16 port; u8 proto; u8 pad }, network byte order.
    fn key(&self) -> [u8; 20] {
        let mut k = [0u8; 20];
        k[..16].copy_from_slice(&map_addr(self.host.ip()));
        k[16..18].copy_from_slice(&self.host.port().to_be_bytes());
        k[18] = match self.proto {
            Proto::Tcp => IPPROTO_TCP,
            Proto::Udp => IPPROTO_UDP,
        };
        k
    }

    /// The map value: struct pier_target { u8 addr[16]; u16 port; u16 pad }, network byte order.
    fn value(&self) -> [u8; 20] {
        let mut v = [0u8; 20];
        v[..16].copy_from_slice(&map_addr(self.target.ip()));
        v[16..18].copy_from_slice(&self.target.port().to_be_bytes());
        v
    }
}

fn owner_text(raw: &[u8]) -> String {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    String::from_utf8_lossy(&raw[..end]).into_owned()
}

/// The address in map form back to an `IpAddr` (v4-mapped to IPv4, all zeros to 0.0.0.0).
fn from_map_addr(raw: &[u8]) -> Option<IpAddr> {
    let octets: [u8; 16] = raw.get(..16)?.try_into().ok()?;
    let v6 = std::net::Ipv6Addr::from(octets);
    Some(match v6.to_ipv4_mapped() {
        Some(v4) => IpAddr::V4(v4),
        None if v6.is_unspecified() => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        None => IpAddr::V6(v6),
    })
}

impl Mapping {
    /// The mapping a raw key and value describe (`None` for an unknown protocol or short value).
    fn from_raw(key: &[u8], value: &[u8]) -> Option<Self> {
        let port = |raw: &[u8]| Some(u16::from_be_bytes(raw.get(16..18)?.try_into().ok()?));
        let proto = match *key.get(18)? {
            IPPROTO_TCP => Proto::Tcp,
            IPPROTO_UDP => Proto::Udp,
            _ => return None,
        };
        Some(Self {
            proto,
            host: SocketAddr::new(from_map_addr(key)?, port(key)?),
            target: SocketAddr::new(from_map_addr(value)?, port(value)?),
        })
    }
}

/// The loaded and pinned programs (hold it to attach; pins keep them alive after it is dropped).
#[derive(Debug)]
pub struct Programs {
    object: Object,
    pin_dir: PathBuf,
}

impl Programs {
    /// Load the object once and pin every program and map under `pin_dir` (which must be on a bpffs);
    /// "host" sockets are those of the initial network namespace.
    pub fn load_and_pin(pin_dir: &Path) -> Result<Self, Error> {
        Self::load_and_pin_for(pin_dir, 0)
    }

    /// Like [`Programs::load_and_pin`], with "host" sockets being those of the network namespace whose
    /// cookie is `host_netns_cookie` (0: the initial one). pier passes the namespace it runs in.
    pub fn load_and_pin_for(pin_dir: &Path, host_netns_cookie: u64) -> Result<Self, Error> {
        let mut object = ObjectBuilder::default()
            .open_memory(OBJECT)
            .map_err(Error::Open)?
            .load()
            .map_err(Error::Load)?;
        set_host_netns(&object, host_netns_cookie)?;
        std::fs::create_dir_all(pin_dir).map_err(|source| Error::PinDir {
            path: pin_dir.to_owned(),
            source,
        })?;
        if !is_bpffs(pin_dir).map_err(|e| Error::PinDir {
            path: pin_dir.to_owned(),
            source: e.into(),
        })? {
            return Err(Error::NotBpffs {
                path: pin_dir.to_owned(),
            });
        }
        pin_object(&mut object, pin_dir)?;
        Ok(Self {
            object,
            pin_dir: pin_dir.to_owned(),
        })
    }

    /// Attach every program to the cgroup2 directory `cgroup_dir` (and so to its descendants), pinning each
    /// bpf_link as `link-<program>` under the pin dir so the attachment outlives this process.
    pub fn attach(&self, cgroup_dir: &Path) -> Result<(), Error> {
        let cgroup = File::open(cgroup_dir).map_err(|source| Error::OpenCgroup {
            path: cgroup_dir.to_owned(),
            source,
        })?;
        for prog in self.object.progs_mut() {
            let name = prog.name().to_string_lossy();
            let program = name.clone().into_owned();
            let mut link =
                prog.attach_cgroup(cgroup.as_raw_fd())
                    .map_err(|source| Error::Attach {
                        program: program.clone(),
                        path: cgroup_dir.to_owned(),
                        source,
                    })?;
            let path = link_pin(&self.pin_dir, &name);
            link.pin(&path).map_err(|source| Error::PinLink {
                program,
                path,
                source,
            })?;
        }
        Ok(())
    }

    /// A publisher on this object's pinned map.
    pub fn publisher(&self) -> Result<Publisher, Error> {
        Publisher::open(&self.pin_dir)
    }
}

/// Pins every program and map of `object` under `dir`, each by its own name. Internal maps
/// (`<obj>.rodata`) are not pinned: bpffs refuses names with a dot, and the programs hold them.
pub(crate) fn pin_object(object: &mut Object, dir: &Path) -> Result<(), Error> {
    for mut prog in object.progs_mut() {
        let program = prog.name().to_string_lossy().into_owned();
        let path = dir.join(&program);
        prog.pin(&path).map_err(|source| Error::PinProgram {
            program,
            path,
            source,
        })?;
    }
    for mut map in object
        .maps_mut()
        .filter(|m| !m.name().to_string_lossy().contains('.'))
    {
        let name = map.name().to_string_lossy().into_owned();
        let path = dir.join(&name);
        map.pin(&path).map_err(|source| Error::PinMap {
            map: name,
            path,
            source,
        })?;
    }
    Ok(())
}

/// Writes the host namespace's cookie into entry 0 of [`CONFIG_MAP`].
fn set_host_netns(object: &Object, cookie: u64) -> Result<(), Error> {
    let map = object
        .maps()
        .find(|m| m.name() == CONFIG_MAP)
        .ok_or_else(|| Error::Lookup {
            map: CONFIG_MAP.into(),
            source: libbpf_rs::Error::from(io::Error::from(io::ErrorKind::NotFound)),
        })?;
    map.update(&0u32.to_ne_bytes(), &cookie.to_ne_bytes(), MapFlags::ANY)
        .map_err(|source| Error::Lookup {
            map: CONFIG_MAP.into(),
            source,
        })
}

/// The host namespace cookie the programs pinned under `pin_dir` were configured with (0: the initial
/// namespace).
pub fn host_netns_cookie(pin_dir: &Path) -> Result<u64, Error> {
    let map = open_pinned(pin_dir, CONFIG_MAP)?;
    let value = map
        .lookup(&0u32.to_ne_bytes(), MapFlags::ANY)
        .map_err(|source| Error::Lookup {
            map: CONFIG_MAP.into(),
            source,
        })?;
    let bytes: [u8; 8] = value
        .as_deref()
        .and_then(|v| v.try_into().ok())
        .unwrap_or_default();
    Ok(u64::from_ne_bytes(bytes))
}

const LINK_PREFIX: &str = "link-";

fn link_pin(pin_dir: &Path, program: &str) -> PathBuf {
    pin_dir.join(format!("{LINK_PREFIX}{program}"))
}

/// The pins under `pin_dir` (empty if it does not exist).
fn pins(pin_dir: &Path) -> Result<Vec<PathBuf>, Error> {
    match std::fs::read_dir(pin_dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(Error::PinDir {
            path: pin_dir.to_owned(),
            source,
        }),
        Ok(entries) => Ok(entries.filter_map(|e| e.ok().map(|e| e.path())).collect()),
    }
}

fn is_link_pin(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with(LINK_PREFIX))
}

/// Detach the programs attached with [`Programs::attach`] under `pin_dir` and remove their link pins.
/// Keeps going past failures and returns the first one.
pub fn detach(pin_dir: &Path) -> Result<(), Error> {
    let mut first = Ok(());
    for path in pins(pin_dir)?.into_iter().filter(|p| is_link_pin(p)) {
        let res = Link::open(&path)
            .and_then(|mut link| {
                link.detach()?;
                link.unpin()
            })
            .map_err(|source| Error::Detach {
                path: path.clone(),
                source,
            });
        first = first.and(res);
    }
    first
}

/// Detach, then remove every pin (programs, maps) and `pin_dir` itself. The kernel frees the objects once
/// no pin, link or fd refers to them. Keeps going past failures and returns the first one.
pub fn unpin_all(pin_dir: &Path) -> Result<(), Error> {
    let mut first = detach(pin_dir).and(remote::remove_dir(&remote_dir(pin_dir)));
    for path in pins(pin_dir)? {
        if let Err(source) = std::fs::remove_file(&path) {
            first = first.and(Err(Error::Unpin { path, source }));
        }
    }
    match std::fs::remove_dir(pin_dir) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => first.and(Err(Error::Unpin {
            path: pin_dir.to_owned(),
            source: e,
        })),
        _ => first,
    }
}

/// Publishes and unpublishes ports as updates of the pinned map (usable from any process).
#[derive(Debug)]
pub struct Publisher {
    map: MapHandle,
    owners: MapHandle,
}

fn open_pinned(pin_dir: &Path, name: &str) -> Result<MapHandle, Error> {
    let path = pin_dir.join(name);
    MapHandle::from_pinned_path(&path).map_err(|source| Error::OpenMap {
        map: name.into(),
        path,
        source,
    })
}

impl Publisher {
    /// Open the maps pinned under `pin_dir` by [`Programs::load_and_pin`].
    pub fn open(pin_dir: &Path) -> Result<Self, Error> {
        Ok(Self {
            map: open_pinned(pin_dir, PUBLISH_MAP)?,
            owners: open_pinned(pin_dir, OWNER_MAP)?,
        })
    }

    /// Publish `m` for container `owner` (recorded in [`OWNER_MAP`] for [`Publisher::published`]).
    pub fn publish_owned(&self, m: &Mapping, owner: &str) -> Result<(), Error> {
        self.publish(m)?;
        let mut id = [0u8; OWNER_LEN];
        let n = owner.len().min(OWNER_LEN);
        id[..n].copy_from_slice(&owner.as_bytes()[..n]);
        self.owners
            .update(&m.key(), &id, MapFlags::ANY)
            .map_err(|source| Error::Update {
                host: m.host,
                proto: m.proto,
                map: OWNER_MAP.into(),
                source,
            })
    }

    /// Every published entry with its owner ("" when it has none): (host, protocol, target, owner).
    pub fn published(&self) -> Result<Vec<(Mapping, String)>, Error> {
        let err = |source| Error::Lookup {
            map: PUBLISH_MAP.into(),
            source,
        };
        let mut out = Vec::new();
        for key in self.map.keys() {
            let Some(value) = self.map.lookup(&key, MapFlags::ANY).map_err(err)? else {
                continue;
            };
            let owner = self.owners.lookup(&key, MapFlags::ANY).map_err(err)?;
            if let Some(m) = Mapping::from_raw(&key, &value) {
                out.push((m, owner.map(|o| owner_text(&o)).unwrap_or_default()));
            }
        }
        Ok(out)
    }

    /// Publish `m`; fails with [`Error::AlreadyPublished`] if its (address, port, protocol) already is.
    pub fn publish(&self, m: &Mapping) -> Result<(), Error> {
        self.map
            .update(&m.key(), &m.value(), MapFlags::NO_EXIST)
            .map_err(|source| {
                if source.kind() == libbpf_rs::ErrorKind::AlreadyExists {
                    Error::AlreadyPublished {
                        host: m.host,
                        proto: m.proto,
                        map: PUBLISH_MAP.into(),
                    }
                } else {
                    Error::Update {
                        host: m.host,
                        proto: m.proto,
                        map: PUBLISH_MAP.into(),
                        source,
                    }
                }
            })
    }

    /// Remove `m`; removing a port that is not published is not an error (teardown is idempotent).
    pub fn unpublish(&self, m: &Mapping) -> Result<(), Error> {
        if let Err(e) = self.owners.delete(&m.key()) {
            if e.kind() != libbpf_rs::ErrorKind::NotFound {
                return Err(Error::Delete {
                    host: m.host,
                    proto: m.proto,
                    map: OWNER_MAP.into(),
                    source: e,
                });
            }
        }
        match self.map.delete(&m.key()) {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => Err(Error::Delete {
                host: m.host,
                proto: m.proto,
                map: PUBLISH_MAP.into(),
                source: e,
            }),
            _ => Ok(()),
        }
    }
}

/// What is pinned under a pin dir.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// No publish map: nothing loaded (or a half-made directory).
    Missing,
    /// Pinned by an older pier: no [`CLIENTS_MAP`], so containers cannot be served.
    Old,
    /// Every map this version pins.
    Current,
}

/// The layout of the pins under `pin_dir`.
pub fn layout(pin_dir: &Path) -> Layout {
    match (
        pin_dir.join(PUBLISH_MAP).exists(),
        pin_dir.join(CLIENTS_MAP).exists(),
    ) {
        (false, _) => Layout::Missing,
        (true, false) => Layout::Old,
        (true, true) => Layout::Current,
    }
}

/// A client namespace (a container's): redirected to published targets on its `subnets` only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Client {
    /// Its netns cookie (SO_NETNS_COOKIE).
    pub cookie: u64,
    /// The inode of its netns (`/proc/PID/ns/net`), so gc can tell when it is gone.
    pub netns_inode: u64,
    /// The networks it is on as (address, prefix length); at most [`CLIENT_SUBNETS`].
    pub subnets: Vec<(IpAddr, u8)>,
}

/// An address as a 128-bit number in map form (IPv4 v4-mapped) and the bits a prefix covers.
fn subnet_bits(ip: IpAddr, prefix: u8) -> Option<(u128, u128)> {
    let (bits, width) = match ip {
        IpAddr::V4(v4) => (u128::from(v4.to_ipv6_mapped()), 32u8),
        IpAddr::V6(v6) => (u128::from(v6), 128u8),
    };
    let ones = u32::from(128 - width + prefix.min(width));
    let mask = u128::MAX.checked_shl(128 - ones).unwrap_or(0);
    (prefix <= width).then_some((bits & mask, mask))
}

impl Client {
    /// The map value: struct pier_client { struct { u8 addr[16]; u8 mask[16] } nets[4]; u64 ino }.
    fn value(&self) -> Result<[u8; CLIENT_LEN], Error> {
        let bad = |subnet: String, why| Error::BadSubnet {
            cookie: self.cookie,
            subnet,
            why,
        };
        if self.subnets.len() > CLIENT_SUBNETS {
            let all = format!("{:?}", self.subnets);
            return Err(bad(all, "more networks than a client entry holds (4)"));
        }
        let mut v = [0u8; CLIENT_LEN];
        for (i, &(ip, prefix)) in self.subnets.iter().enumerate() {
            let (addr, mask) = subnet_bits(ip, prefix)
                .filter(|&(_, mask)| mask != 0)
                .ok_or_else(|| bad(format!("{ip}/{prefix}"), "not a network prefix"))?;
            v[i * 32..i * 32 + 16].copy_from_slice(&addr.to_be_bytes());
            v[i * 32 + 16..i * 32 + 32].copy_from_slice(&mask.to_be_bytes());
        }
        v[CLIENT_SUBNETS * 32..].copy_from_slice(&self.netns_inode.to_ne_bytes());
        Ok(v)
    }

    /// The client a raw key and value describe (`None` for a short one).
    fn from_raw(key: &[u8], value: &[u8]) -> Option<Self> {
        let cookie = u64::from_ne_bytes(key.try_into().ok()?);
        let ino = value.get(CLIENT_SUBNETS * 32..CLIENT_LEN)?;
        let mut subnets = Vec::new();
        for slot in value.get(..CLIENT_SUBNETS * 32)?.chunks(32) {
            let mask = u128::from_be_bytes(slot[16..].try_into().ok()?);
            if mask != 0 {
                let prefix = mask.count_ones() as u8;
                let v6 = std::net::Ipv6Addr::from(u128::from_be_bytes(slot[..16].try_into().ok()?));
                subnets.push(match v6.to_ipv4_mapped() {
                    Some(v4) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
                    _ => (IpAddr::V6(v6), prefix),
                });
            }
        }
        Some(Self {
            cookie,
            netns_inode: u64::from_ne_bytes(ino.try_into().ok()?),
            subnets,
        })
    }
}

/// Registers and lists client namespaces in the pinned [`CLIENTS_MAP`] (usable from any process).
#[derive(Debug)]
pub struct Clients {
    map: MapHandle,
}

impl Clients {
    /// Open the map pinned under `pin_dir` (fails on an [`Layout::Old`] pin dir).
    pub fn open(pin_dir: &Path) -> Result<Self, Error> {
        Ok(Self {
            map: open_pinned(pin_dir, CLIENTS_MAP)?,
        })
    }

    /// Register (or re-register) `client`: from now on its sockets are redirected.
    pub fn register(&self, client: &Client) -> Result<(), Error> {
        self.map
            .update(
                &client.cookie.to_ne_bytes(),
                &client.value()?,
                MapFlags::ANY,
            )
            .map_err(|source| Error::Register {
                cookie: client.cookie,
                map: CLIENTS_MAP.into(),
                source,
            })
    }

    /// Remove the client namespace `cookie`; a missing one is not an error (idempotent).
    pub fn unregister(&self, cookie: u64) -> Result<(), Error> {
        match self.map.delete(&cookie.to_ne_bytes()) {
            Err(e) if e.kind() != libbpf_rs::ErrorKind::NotFound => Err(Error::Unregister {
                cookie,
                map: CLIENTS_MAP.into(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Every registered client namespace.
    pub fn list(&self) -> Result<Vec<Client>, Error> {
        let mut out = Vec::new();
        for key in self.map.keys() {
            let value = self.map.lookup(&key, MapFlags::ANY);
            let value = value.map_err(|source| Error::Lookup {
                map: CLIENTS_MAP.into(),
                source,
            })?;
            out.extend(value.and_then(|v| Client::from_raw(&key, &v)));
        }
        Ok(out)
    }
}

/// Make sure `path` is a bpffs mount, mounting one there if it is not (production: `/sys/fs/bpf`).
/// Returns whether this call mounted it.
pub fn mount_bpffs(path: &Path) -> Result<bool, Error> {
    let err = |e: nix::Error| Error::Mount {
        path: path.to_owned(),
        source: e.into(),
    };
    if is_bpffs(path).map_err(err)? {
        return Ok(false);
    }
    mount(
        Some("bpf"),
        path,
        Some("bpf"),
        MsFlags::empty(),
        None::<&str>,
    )
    .map_err(err)?;
    Ok(true)
}

pub(crate) fn is_bpffs(path: &Path) -> nix::Result<bool> {
    Ok(statfs(path)?.filesystem_type() == BPF_FS_MAGIC)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_and_value_are_network_order_v4_mapped() {
        let m = Mapping {
            proto: Proto::Udp,
            host: "127.0.0.1:8080".parse().unwrap(),
            target: "198.18.0.2:80".parse().unwrap(),
        };
        let mut key = [0u8; 20];
        key[10..16].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
        key[16..19].copy_from_slice(&[0x1f, 0x90, 17]);
        assert_eq!(m.key(), key);
        let mut value = [0u8; 20];
        value[10..18].copy_from_slice(&[0xff, 0xff, 198, 18, 0, 2, 0, 80]);
        assert_eq!(m.value(), value);
    }

    #[test]
    fn raw_key_and_value_read_back() {
        let m = Mapping {
            proto: Proto::Tcp,
            host: "0.0.0.0:8080".parse().unwrap(),
            target: "198.18.0.2:80".parse().unwrap(),
        };
        assert_eq!(Mapping::from_raw(&m.key(), &m.value()), Some(m));
        let v6 = Mapping {
            proto: Proto::Udp,
            host: "[::1]:53".parse().unwrap(),
            target: "[2001:2::2]:53".parse().unwrap(),
        };
        assert_eq!(Mapping::from_raw(&v6.key(), &v6.value()), Some(v6));
        assert_eq!(owner_text(b"abc\0\0"), "abc");
    }

    #[test]
    fn client_subnets_are_masked_v4_mapped_and_read_back() {
        let client = Client {
            cookie: 4097,
            netns_inode: 4026532000,
            subnets: vec![
                ("198.18.2.7".parse().unwrap(), 24),
                ("2001:2:0:2::9".parse().unwrap(), 64),
            ],
        };
        let v = client.value().unwrap();
        let mut v4 = [0u8; 32];
        v4[10..15].copy_from_slice(&[0xff, 0xff, 198, 18, 2]);
        v4[16..31].fill(0xff);
        assert_eq!(&v[..32], &v4);
        assert_eq!(&v[48..56], &[0xff; 8], "an IPv6 /64 covers eight bytes");
        assert_eq!(&v[56..64], &[0; 8]);
        assert_eq!(&v[64..128], &[0; 64], "unused slots have an all-zero mask");
        let back = Client::from_raw(&4097u64.to_ne_bytes(), &v).unwrap();
        let masked = vec![
            ("198.18.2.0".parse().unwrap(), 24),
            ("2001:2:0:2::".parse().unwrap(), 64),
        ];
        assert_eq!(back.subnets, masked);
        assert_eq!(back.netns_inode, client.netns_inode);
    }

    #[test]
    fn bad_client_subnets_are_refused() {
        let with = |subnets: Vec<(IpAddr, u8)>| Client {
            cookie: 1,
            netns_inode: 1,
            subnets,
        };
        let v4: IpAddr = "198.18.2.7".parse().unwrap();
        let v6: IpAddr = "2001:2::1".parse().unwrap();
        assert!(with(vec![(v4, 33)]).value().is_err());
        assert!(
            with(vec![(v6, 0)]).value().is_err(),
            "a /0 would be an empty slot"
        );
        assert!(with(vec![(v4, 32); 5]).value().is_err());
        assert!(with(vec![(v4, 0), (v6, 128)]).value().is_ok());
    }

    #[test]
    fn wildcards_of_both_families_are_the_same_key() {
        let target = "198.18.0.2:80".parse().unwrap();
        let v4 = Mapping {
            proto: Proto::Tcp,
            host: "0.0.0.0:80".parse().unwrap(),
            target,
        };
        let v6 = Mapping {
            proto: Proto::Tcp,
            host: "[::]:80".parse().unwrap(),
            target,
        };
        assert_eq!(v4.key(), v6.key());
        assert_eq!(&v4.key()[..16], &[0u8; 16]);
    }
}
