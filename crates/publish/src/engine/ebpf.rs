//! ebpf engine: socket-level redirection through pier-bpf's cgroup programs, for clients in the
//! host's network namespace and in registered containers on the target's own network (no
//! forwarding process, no NAT, no route_localnet); every other namespace, and a container
//! dialling a target on another network, is left alone (auto serves those with nat).
//!
//! Theory of operation: [`ensure`] makes sure the programs are loaded and pinned once under
//! `Settings::bpf_pin_dir` and attached to `Settings::bpf_cgroup` (a flock on the pin dir's
//! parent serialises concurrent pier processes); "host" sockets are those of the network
//! namespace pier runs in (its cookie is written into pier-bpf's config map at load, and pins
//! made for another namespace are refused rather than silently serving the wrong one). Pins of
//! an older pier lack the client map: with nothing published in them they are replaced (one
//! printed line), else kept and containers go without redirection until [`retire_old_pins`]
//! (`pier gc`, once no port is published) removes them. Containers are registered as clients
//! in clients.rs. A publish is map entries: for `-p P` the wildcard entry (it matches
//! 127.0.0.0/8 and ::1) plus one entry per other host address read over netlink at plan time,
//! each to the container's address of the same family or, for an IPv6 front, its IPv4 address
//! (a dual-stack socket dials it v4-mapped). Each entry names its container in pier-bpf's owner
//! map. Apply adds entries in a
//! loop and deletes the ones it made if one fails; remove deletes entries (missing is fine).
//!
//! Section order (the same in every engine file): engine, plan, apply, remove.
//! Privileges: root (CAP_BPF, CAP_NET_ADMIN, CAP_SYS_ADMIN to mount bpffs).
//! Tests: crates/publish/tests/priv_engines*.rs (the matrix; an older pier's pins).
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::statfs::{statfs, CGROUP2_SUPER_MAGIC};
use pier_bpf::{Layout, Mapping, Proto, Publisher};

use super::plan::Pair;
use super::{Engine, Entry, PublishError, Settings, Target};
use crate::Protocol;

const ENGINE: &str = "ebpf";

/// The ebpf engine (programs known to be loaded and attached).
#[derive(Debug)]
pub(crate) struct Ebpf {
    settings: Settings,
}

impl Ebpf {
    pub(crate) fn new(settings: &Settings) -> Result<Self, PublishError> {
        ensure(settings)?;
        Ok(Self {
            settings: settings.clone(),
        })
    }
}

impl Engine for Ebpf {
    fn name(&self) -> &'static str {
        ENGINE
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    fn entries(&self, target: &Target, pairs: &[Pair]) -> Result<Vec<Entry>, PublishError> {
        let hosts = host_addresses()?;
        let mut entries = Vec::new();
        for pair in pairs {
            entries.extend(entries_for_pair(pair, target, &hosts)?);
        }
        Ok(entries)
    }
}

/// Loads, pins and attaches the programs unless that was done; fails saying which facility is
/// missing. Pins of an older pier (no client map) are replaced when nothing is published in
/// them, else kept with one printed line: containers are not redirected until `pier gc`
/// retires them once no port is published.
pub(crate) fn ensure(settings: &Settings) -> Result<(), PublishError> {
    let unavailable = |why: String| PublishError::Unavailable {
        engine: ENGINE,
        why,
    };
    let cgroup = &settings.bpf_cgroup;
    let is_cgroup2 = statfs(cgroup).is_ok_and(|s| s.filesystem_type() == CGROUP2_SUPER_MAGIC);
    if !is_cgroup2 {
        return Err(unavailable(format!("no cgroup2 at {}", cgroup.display())));
    }
    let pin_dir = &settings.bpf_pin_dir;
    let _lock = lock_pins(settings)?;
    let cookie = own_netns_cookie()?;
    if pier_bpf::layout(pin_dir) != Layout::Missing {
        attached(pin_dir).map_err(&unavailable)?;
        serves(pin_dir, cookie).map_err(&unavailable)?;
        if !replace_old(pin_dir)? {
            return Ok(());
        }
    }
    let programs = pier_bpf::Programs::load_and_pin_for(pin_dir, cookie)
        .map_err(|e| unavailable(e.to_string()))?;
    if let Err(e) = programs.attach(cgroup) {
        // Leave nothing half-made: a later ensure would find the map and think all is well.
        let _ = pier_bpf::unpin_all(pin_dir);
        return Err(unavailable(e.to_string()));
    }
    Ok(())
}

/// Whether this process printed the line about old pins it keeps.
static OLD_PINS_KEPT: AtomicBool = AtomicBool::new(false);

/// For pins in the current layout, false; for an older pier's: unpinned (true, to be loaded
/// again) when nothing is published in them, else kept (false) with one printed line.
fn replace_old(pin_dir: &Path) -> Result<bool, PublishError> {
    if pier_bpf::layout(pin_dir) == Layout::Current {
        return Ok(false);
    }
    if !nothing_published(pin_dir)? {
        if !OLD_PINS_KEPT.swap(true, Ordering::Relaxed) {
            eprintln!(
                "pier: publish (ebpf): the programs pinned in {} by an older pier serve only the \
                 host's clients and ports are published there, so containers reach published ports \
                 through nat (auto) or not at all (ebpf); run `pier gc` once no container publishes \
                 ports to reload them",
                pin_dir.display()
            );
        }
        return Ok(false);
    }
    pier_bpf::unpin_all(pin_dir).map_err(bpf_err("remove an older pier's pins"))?;
    eprintln!(
        "pier: publish (ebpf): reloading the programs pinned in {} by an older pier (nothing was \
         published there)",
        pin_dir.display()
    );
    Ok(true)
}

fn nothing_published(pin_dir: &Path) -> Result<bool, PublishError> {
    let publisher = Publisher::open(pin_dir).map_err(bpf_err("open the map"))?;
    let published = publisher.published().map_err(bpf_err("list the map"))?;
    Ok(published.is_empty())
}

/// `pier gc`: removes an older pier's pins when nothing is published in them (the next ebpf
/// publish loads the current programs); returns whether it did. Loads nothing.
pub fn retire_old_pins(settings: &Settings) -> Result<bool, PublishError> {
    if pier_bpf::layout(&settings.bpf_pin_dir) != Layout::Old {
        return Ok(false);
    }
    let _lock = lock_pins(settings)?;
    let pin_dir = &settings.bpf_pin_dir;
    if pier_bpf::layout(pin_dir) != Layout::Old || !nothing_published(pin_dir)? {
        return Ok(false);
    }
    pier_bpf::unpin_all(pin_dir).map_err(bpf_err("remove an older pier's pins"))?;
    Ok(true)
}

/// Mounts bpffs on the pin dir's parent if needed and holds a flock on it, which serialises
/// pier processes loading, replacing or retiring the pins.
pub(crate) fn lock_pins(settings: &Settings) -> Result<Flock<std::fs::File>, PublishError> {
    let pin_dir = &settings.bpf_pin_dir;
    let parent = pin_dir.parent().unwrap_or(Path::new("/"));
    pier_bpf::mount_bpffs(parent).map_err(|e| PublishError::Unavailable {
        engine: ENGINE,
        why: e.to_string(),
    })?;
    let dir = std::fs::File::open(parent).map_err(|source| PublishError::Read {
        path: parent.to_owned(),
        source,
    })?;
    Flock::lock(dir, FlockArg::LockExclusive).map_err(|(_, e)| PublishError::Read {
        path: parent.to_owned(),
        source: e.into(),
    })
}

/// The pinned maps besides the publish map (not programs: no link to look for).
const MAPS: [&str; 4] = [
    pier_bpf::OWNER_MAP,
    pier_bpf::CONFIG_MAP,
    pier_bpf::CLIENTS_MAP,
    "pier_orig",
];

/// The programs are pinned: every one must have its link pinned too.
fn attached(pin_dir: &Path) -> Result<(), String> {
    let names: Vec<String> = std::fs::read_dir(pin_dir)
        .map_err(|e| format!("reading {}: {e}", pin_dir.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let missing = names
        .iter()
        .filter(|n| n.starts_with("pier_") && n.as_str() != pier_bpf::PUBLISH_MAP)
        .filter(|n| !MAPS.contains(&n.as_str()))
        .find(|n| !names.contains(&format!("link-{n}")));
    match missing {
        None => Ok(()),
        Some(n) => Err(format!(
            "program {n} is pinned in {} but not attached: remove the pin dir (pier gc) to reload",
            pin_dir.display()
        )),
    }
}

/// The pinned programs treat this namespace as the host (pins made from another namespace,
/// say a test's, would leave loopback unpublished here).
pub(crate) fn serves(pin_dir: &Path, cookie: u64) -> Result<(), String> {
    let pinned = pier_bpf::host_netns_cookie(pin_dir).map_err(|e| e.to_string())?;
    if pinned == cookie {
        return Ok(());
    }
    Err(format!(
        "the programs pinned in {} serve another network namespace (cookie {pinned}, pier runs \
         in {cookie}): remove that directory to reload them here",
        pin_dir.display()
    ))
}

/// The cookie of the network namespace the calling thread is in.
pub(crate) fn own_netns_cookie() -> Result<u64, PublishError> {
    let io_err = |source| PublishError::Unavailable {
        engine: ENGINE,
        why: format!("reading this network namespace's cookie (needs Linux 5.14+): {source}"),
    };
    let sock = std::net::UdpSocket::bind("127.0.0.1:0")
        .or_else(|_| std::net::UdpSocket::bind("[::1]:0"))
        .map_err(io_err)?;
    pier_sys::publish::netns_cookie(sock.as_fd()).map_err(io_err)
}

/// This namespace's addresses that the wildcard entry does not cover (not loopback, not
/// link-local).
pub(crate) fn host_addresses() -> Result<Vec<IpAddr>, PublishError> {
    let mut out: Vec<IpAddr> = addresses_by_link()?
        .into_iter()
        .map(|(_, ip)| ip)
        .filter(|ip| !ip.is_loopback() && !is_link_local(ip))
        .collect();
    out.sort();
    out.dedup();
    Ok(out)
}

/// Every address of this namespace with the index of the interface holding it.
pub(crate) fn addresses_by_link() -> Result<Vec<(u32, IpAddr)>, PublishError> {
    let net_err = |source| PublishError::Net {
        step: "list host addresses",
        source,
    };
    let mut nl = pier_net::Netlink::open().map_err(net_err)?;
    let list = nl.addresses(None).map_err(net_err)?;
    Ok(list.into_iter().map(|(index, ip, _)| (index, ip)).collect())
}

fn is_link_local(ip: &IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.is_unicast_link_local(),
    }
}

/// The container address a client of `front`'s family reaches: same family, or IPv4 for an
/// IPv6 front (v4-mapped).
pub(crate) fn target_for(front: IpAddr, target: &Target) -> Option<IpAddr> {
    let same = target
        .addresses
        .iter()
        .find(|a| a.is_ipv4() == front.is_ipv4());
    let v4 = target.addresses.iter().find(|a| a.is_ipv4());
    same.or(if front.is_ipv6() { v4 } else { None }).copied()
}

/// The map entries of one pair.
pub(crate) fn entries_for_pair(
    pair: &Pair,
    target: &Target,
    hosts: &[IpAddr],
) -> Result<Vec<Entry>, PublishError> {
    if pair.protocol == Protocol::Sctp {
        return Err(PublishError::Unsupported {
            engine: ENGINE,
            what: format!("{}/sctp", pair.host_port),
            why: "the cgroup socket hooks cover TCP and UDP only (use --publish-mode nat or proxy)",
        });
    }
    let no_address = || PublishError::NoAddress {
        engine: ENGINE,
        container: target.container_id.clone(),
    };
    let entry = |front: IpAddr, to: IpAddr| Entry::Bpf {
        protocol: pair.protocol,
        host: SocketAddr::new(front, pair.host_port),
        target: SocketAddr::new(to, pair.container_port),
    };
    match pair.host_ip.filter(|ip| !ip.is_unspecified()) {
        Some(ip) => {
            let to = target_for(ip, target).ok_or_else(|| PublishError::Unsupported {
                engine: ENGINE,
                what: format!("{ip}:{}", pair.host_port),
                why: "an IPv4 host address cannot reach an IPv6-only container",
            })?;
            Ok(vec![entry(ip, to)])
        }
        None => {
            let first = *target.addresses.first().ok_or_else(no_address)?;
            let wildcard = IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);
            let mut out = vec![entry(wildcard, first)];
            for &host in hosts {
                if let Some(to) = target_for(host, target) {
                    out.push(entry(host, to));
                }
            }
            Ok(out)
        }
    }
}

fn mapping(protocol: Protocol, host: SocketAddr, target: SocketAddr) -> Mapping {
    let proto = match protocol {
        Protocol::Udp => Proto::Udp,
        _ => Proto::Tcp,
    };
    Mapping {
        proto,
        host,
        target,
    }
}

pub(crate) fn bpf_err(step: &'static str) -> impl Fn(pier_bpf::Error) -> PublishError {
    move |source| PublishError::Bpf { step, source }
}

/// Adds the map entries for `owner`, all or none.
pub(crate) fn apply_entries(
    settings: &Settings,
    owner: &str,
    entries: &[(Protocol, SocketAddr, SocketAddr)],
) -> Result<(), PublishError> {
    if entries.is_empty() {
        return Ok(());
    }
    let publisher = Publisher::open(&settings.bpf_pin_dir).map_err(bpf_err("open the map"))?;
    for (i, &(protocol, host, target)) in entries.iter().enumerate() {
        let made = publisher.publish_owned(&mapping(protocol, host, target), owner);
        if let Err(source) = made {
            for &(p, h, t) in &entries[..i] {
                let _ = publisher.unpublish(&mapping(p, h, t));
            }
            return Err(bpf_published(source));
        }
    }
    Ok(())
}

/// A key taken between plan and apply is reported like a plan-time conflict.
fn bpf_published(source: pier_bpf::Error) -> PublishError {
    match source {
        pier_bpf::Error::AlreadyPublished { host, proto, .. } => PublishError::Published {
            port: host.port(),
            protocol: if proto == Proto::Udp {
                Protocol::Udp
            } else {
                Protocol::Tcp
            },
            host: host.ip().to_string(),
            owner: "another container (published meanwhile)".to_string(),
        },
        source => PublishError::Bpf {
            step: "publish",
            source,
        },
    }
}

/// Deletes the map entries (missing ones and a missing map are fine).
pub(crate) fn remove_entries(
    settings: &Settings,
    entries: &[(Protocol, SocketAddr, SocketAddr)],
) -> Result<(), PublishError> {
    if entries.is_empty() || !settings.bpf_pin_dir.join(pier_bpf::PUBLISH_MAP).exists() {
        return Ok(());
    }
    let publisher = Publisher::open(&settings.bpf_pin_dir).map_err(bpf_err("open the map"))?;
    let mut first = Ok(());
    for &(protocol, host, target) in entries {
        let gone = publisher
            .unpublish(&mapping(protocol, host, target))
            .map_err(bpf_err("unpublish"));
        first = first.and(gone);
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::plan::fixtures::{self, target};

    fn pair(host_ip: Option<&str>) -> Pair {
        fixtures::pair(Protocol::Tcp, host_ip, (8080, 80))
    }

    #[test]
    fn wildcard_is_one_entry_plus_one_per_host_address() {
        let hosts: Vec<IpAddr> = vec!["198.18.1.1".parse().unwrap(), "2001:2::1".parse().unwrap()];
        let entries = entries_for_pair(&pair(None), &target(&["198.18.2.2"]), &hosts).unwrap();
        let fronts: Vec<String> = entries
            .iter()
            .map(|e| match e {
                Entry::Bpf { host, target, .. } => format!("{host}>{target}"),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            fronts,
            [
                "0.0.0.0:8080>198.18.2.2:80",
                "198.18.1.1:8080>198.18.2.2:80",
                "[2001:2::1]:8080>198.18.2.2:80"
            ]
        );
    }

    #[test]
    fn v4_front_for_v6_only_container_and_sctp_are_refused() {
        let v6 = target(&["2001:2::2"]);
        assert!(entries_for_pair(&pair(Some("198.18.1.1")), &v6, &[]).is_err());
        assert!(entries_for_pair(&pair(Some("::1")), &v6, &[]).is_ok());
        let sctp = Pair {
            protocol: Protocol::Sctp,
            ..pair(None)
        };
        assert!(matches!(
            entries_for_pair(&sctp, &v6, &[]),
            Err(PublishError::Unsupported { .. })
        ));
    }
}
