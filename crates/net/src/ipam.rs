//! IPAM: addresses for containers from a network's subnets, persisted per network.
//!
//! Theory of operation: each network has one JSON file `<dir>/<network>.json` mapping every
//! allocated address to the container holding it. Every operation takes an exclusive `flock(2)`
//! on `<dir>/<network>.lock` (a separate file, so the JSON can be replaced atomically by a
//! rename while the lock stays on a stable inode), reads the file, changes it, writes
//! `<network>.json.tmp` and renames it over the JSON. Concurrent pier processes (and threads:
//! each operation opens its own lock file description) are serialised per network.
//! Allocation takes the next free address after the one handed out last (wrapping; a released
//! address comes back only after the rest of the subnet), never the network address, the
//! gateway or (IPv4) the broadcast address; a static address is checked against the subnet,
//! those reserved addresses and the allocations. Asking again for the same container returns
//! its existing address, so a retried `run` after a crash does not leak. `reclaim` drops
//! allocations whose container no longer exists (`pier gc`).
//! Privileges: write access to the state directory. Tests: below.
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::subnet::Subnet;
use crate::NetError;

/// One address range of a network: its subnet and the gateway address (reserved).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub subnet: Subnet,
    pub gateway: Option<IpAddr>,
}

impl Range {
    /// Whether `ip` can never be given to a container: network, gateway, IPv4 broadcast.
    fn reserved(&self, ip: IpAddr) -> bool {
        Some(ip) == self.subnet.nth(0)
            || Some(ip) == self.gateway
            || Some(ip) == self.subnet.broadcast()
    }
}

/// The persisted allocations of one network: address -> container id, and the search cursor.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Leases {
    allocations: BTreeMap<IpAddr, String>,
    /// The address handed out last: the search for a free one starts after it, so a released
    /// address is reused only after the rest of the subnet (as Docker's allocator does). A
    /// container's links vanish with its namespace a few milliseconds after its teardown; an
    /// immediate reuse could meet neighbours' ARP entries for the old link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last: Option<IpAddr>,
}

/// The allocator over a state directory.
#[derive(Debug, Clone)]
pub struct Ipam {
    dir: PathBuf,
}

fn file_error(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NetError {
    let path = path.to_path_buf();
    move |source| NetError::IpamFile { step, path, source }
}

/// Network names become file names: Docker's rule, which excludes `/` and `..`.
pub fn check_name(network: &str) -> Result<(), NetError> {
    let mut chars = network.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    match first_ok && rest_ok {
        true => Ok(()),
        false => Err(NetError::NetworkName(network.to_string())),
    }
}

impl Ipam {
    /// An allocator keeping its files in `dir` (created on first use).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    fn json(&self, network: &str) -> PathBuf {
        self.dir.join(format!("{network}.json"))
    }

    fn lock(&self, network: &str) -> Result<Flock<File>, NetError> {
        check_name(network)?;
        fs::create_dir_all(&self.dir).map_err(file_error("create directory", &self.dir))?;
        let path = self.dir.join(format!("{network}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path);
        let file = file.map_err(file_error("open lock", &path))?;
        Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| file_error("flock", &path)(errno.into()))
    }

    fn read(&self, network: &str) -> Result<Leases, NetError> {
        let path = self.json(network);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|source| NetError::IpamState { path, source }),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(Leases::default()),
            Err(e) => Err(file_error("read", &path)(e)),
        }
    }

    fn write(&self, network: &str, leases: &Leases) -> Result<(), NetError> {
        let path = self.json(network);
        let tmp = self.dir.join(format!("{network}.json.tmp"));
        let bytes = serde_json::to_vec_pretty(leases).expect("allocations serialise");
        fs::write(&tmp, bytes).map_err(file_error("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(file_error("rename into place", &path))
    }

    /// Runs `change` on the network's allocations under its lock and saves them.
    fn update<T>(
        &self,
        network: &str,
        change: impl FnOnce(&mut Leases) -> Result<T, NetError>,
    ) -> Result<T, NetError> {
        let _lock = self.lock(network)?;
        let mut leases = self.read(network)?;
        let result = change(&mut leases)?;
        self.write(network, &leases)?;
        Ok(result)
    }

    /// Allocates an address of `range` in `network` to `container`: `requested` if given
    /// (checked), else the lowest free one. A container already holding one gets it again.
    pub fn allocate(
        &self,
        network: &str,
        range: &Range,
        container: &str,
        requested: Option<IpAddr>,
    ) -> Result<IpAddr, NetError> {
        self.update(network, |leases| {
            let held = leases.allocations.iter().find(|(ip, owner)| {
                owner.as_str() == container
                    && range.subnet.contains(**ip)
                    && requested.is_none_or(|r| r == **ip)
            });
            if let Some((ip, _)) = held {
                return Ok(*ip);
            }
            let ip = match requested {
                Some(ip) => check_static(network, range, leases, ip)?,
                None => next_free(network, range, leases)?,
            };
            leases.allocations.insert(ip, container.to_string());
            if requested.is_none() {
                leases.last = Some(ip);
            }
            Ok(ip)
        })
    }

    /// Releases every address `container` holds in `network`; returns them.
    pub fn release(&self, network: &str, container: &str) -> Result<Vec<IpAddr>, NetError> {
        self.update(network, |leases| {
            let mine: Vec<IpAddr> = leases
                .allocations
                .iter()
                .filter(|(_, owner)| *owner == container)
                .map(|(ip, _)| *ip)
                .collect();
            mine.iter()
                .for_each(|ip| drop(leases.allocations.remove(ip)));
            Ok(mine)
        })
    }

    /// Drops the allocations of containers for which `is_live` says no; returns them.
    pub fn reclaim(
        &self,
        network: &str,
        is_live: impl Fn(&str) -> bool,
    ) -> Result<Vec<(IpAddr, String)>, NetError> {
        self.update(network, |leases| {
            let (live, dead) = std::mem::take(&mut leases.allocations)
                .into_iter()
                .partition(|(_, owner)| is_live(owner));
            leases.allocations = live;
            Ok(dead.into_iter().collect())
        })
    }

    /// The current allocations of `network`: address -> container id.
    pub fn allocations(&self, network: &str) -> Result<BTreeMap<IpAddr, String>, NetError> {
        let _lock = self.lock(network)?;
        Ok(self.read(network)?.allocations)
    }

    /// Removes the files of `network` (on `pier network rm`).
    pub fn remove_network(&self, network: &str) -> Result<(), NetError> {
        let lock = self.lock(network)?;
        let json = self.json(network);
        match fs::remove_file(&json) {
            Err(e) if e.kind() != ErrorKind::NotFound => {
                return Err(file_error("remove", &json)(e))
            }
            _ => {}
        }
        let lock_path = self.dir.join(format!("{network}.lock"));
        fs::remove_file(&lock_path).map_err(file_error("remove", &lock_path))?;
        drop(lock);
        Ok(())
    }
}

fn check_static(
    network: &str,
    range: &Range,
    leases: &Leases,
    ip: IpAddr,
) -> Result<IpAddr, NetError> {
    let network = network.to_string();
    if !range.subnet.contains(ip) {
        return Err(NetError::OutsideSubnet {
            network,
            ip,
            subnet: range.subnet,
        });
    }
    if range.reserved(ip) {
        return Err(NetError::Reserved { network, ip });
    }
    match leases.allocations.get(&ip) {
        Some(owner) => Err(NetError::Taken {
            network,
            ip,
            owner: owner.clone(),
        }),
        None => Ok(ip),
    }
}

fn next_free(network: &str, range: &Range, leases: &Leases) -> Result<IpAddr, NetError> {
    let size = range.subnet.size();
    let start = leases
        .last
        .filter(|ip| range.subnet.contains(*ip))
        .map_or(0, |ip| offset(range.subnet, ip));
    (1..size)
        .map(|i| (start + i) % size)
        .filter_map(|n| range.subnet.nth(n))
        .find(|ip| !range.reserved(*ip) && !leases.allocations.contains_key(ip))
        .ok_or_else(|| NetError::Exhausted {
            network: network.to_string(),
            subnet: range.subnet,
        })
}

/// The index of `ip` in `subnet` (`subnet.nth(offset) == ip`).
fn offset(subnet: Subnet, ip: IpAddr) -> u128 {
    let bits = |ip: IpAddr| match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    };
    bits(ip) - bits(subnet.addr())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(subnet: &str, gateway: &str) -> Range {
        Range {
            subnet: subnet.parse().unwrap(),
            gateway: Some(gateway.parse().unwrap()),
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn allocates_in_order_skipping_network_gateway_and_broadcast_until_exhausted() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(dir.path());
        let r = range("198.18.0.0/29", "198.18.0.1");
        let got: Vec<IpAddr> = (0..5)
            .map(|i| {
                ipam.allocate("pier-test", &r, &format!("c{i}"), None)
                    .unwrap()
            })
            .collect();
        let expected: Vec<IpAddr> = (2..=6).map(|h| ip(&format!("198.18.0.{h}"))).collect();
        assert_eq!(got, expected);
        let full = ipam.allocate("pier-test", &r, "c5", None).unwrap_err();
        assert!(matches!(full, NetError::Exhausted { .. }), "{full}");
        ipam.release("pier-test", "c2").unwrap();
        assert_eq!(
            ipam.allocate("pier-test", &r, "c6", None).unwrap(),
            ip("198.18.0.4")
        );
    }

    #[test]
    fn a_released_address_comes_back_only_after_the_rest_of_the_subnet() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(dir.path());
        let r = range("198.18.0.0/29", "198.18.0.1");
        assert_eq!(ipam.allocate("n", &r, "a", None).unwrap(), ip("198.18.0.2"));
        ipam.release("n", "a").unwrap();
        assert_eq!(ipam.allocate("n", &r, "b", None).unwrap(), ip("198.18.0.3"));
        for (c, host) in [("c", 4), ("d", 5), ("e", 6), ("f", 2)] {
            let got = ipam.allocate("n", &r, c, None).unwrap();
            assert_eq!(got, ip(&format!("198.18.0.{host}")), "{c} wraps around");
        }
    }

    #[test]
    fn same_container_gets_its_address_again() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(dir.path());
        let r = range("198.18.0.0/24", "198.18.0.1");
        let first = ipam.allocate("n1", &r, "c1", None).unwrap();
        assert_eq!(ipam.allocate("n1", &r, "c1", None).unwrap(), first);
        assert_eq!(ipam.allocations("n1").unwrap().len(), 1);
    }

    #[test]
    fn static_addresses_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(dir.path());
        let r = range("198.18.5.0/24", "198.18.5.1");
        assert_eq!(
            ipam.allocate("n1", &r, "c1", Some(ip("198.18.5.50")))
                .unwrap(),
            ip("198.18.5.50")
        );
        let taken = ipam
            .allocate("n1", &r, "c2", Some(ip("198.18.5.50")))
            .unwrap_err();
        assert_eq!(
            taken.to_string(),
            "ipam: address 198.18.5.50 in network \"n1\" is already allocated to container c1"
        );
        let outside = ipam
            .allocate("n1", &r, "c2", Some(ip("198.18.6.9")))
            .unwrap_err();
        assert!(
            matches!(outside, NetError::OutsideSubnet { .. }),
            "{outside}"
        );
        for reserved in ["198.18.5.0", "198.18.5.1", "198.18.5.255"] {
            let e = ipam
                .allocate("n1", &r, "c2", Some(ip(reserved)))
                .unwrap_err();
            assert!(matches!(e, NetError::Reserved { .. }), "{reserved}: {e}");
        }
        assert_eq!(
            ipam.allocate("n1", &r, "c2", None).unwrap(),
            ip("198.18.5.2")
        );
    }

    #[test]
    fn ipv6_skips_the_subnet_router_address_and_gateway() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(dir.path());
        let r = range("2001:2::/64", "2001:2::1");
        assert_eq!(
            ipam.allocate("n6", &r, "c1", None).unwrap(),
            ip("2001:2::2")
        );
        let last = ip("2001:2::ffff:ffff:ffff:ffff");
        assert_eq!(ipam.allocate("n6", &r, "c2", Some(last)).unwrap(), last);
        let outside = ipam
            .allocate("n6", &r, "c3", Some(ip("2001:2:0:1::5")))
            .unwrap_err();
        assert!(matches!(outside, NetError::OutsideSubnet { .. }));
    }

    #[test]
    fn allocations_survive_a_new_allocator_and_are_released_and_reclaimed() {
        let dir = tempfile::tempdir().unwrap();
        let r = range("198.18.7.0/24", "198.18.7.1");
        for c in ["live", "gone1", "gone2"] {
            Ipam::new(dir.path()).allocate("n1", &r, c, None).unwrap();
        }
        let ipam = Ipam::new(dir.path());
        let saved = ipam.allocations("n1").unwrap();
        let owners: Vec<&str> = saved.values().map(String::as_str).collect();
        assert_eq!(owners, ["live", "gone1", "gone2"]);
        let dead = ipam.reclaim("n1", |id| id == "live").unwrap();
        assert_eq!(
            dead,
            [
                (ip("198.18.7.3"), "gone1".into()),
                (ip("198.18.7.4"), "gone2".into())
            ]
        );
        assert_eq!(ipam.release("n1", "live").unwrap(), [ip("198.18.7.2")]);
        assert!(Ipam::new(dir.path()).allocations("n1").unwrap().is_empty());
        ipam.remove_network("n1").unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn corrupt_state_and_bad_names_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let ipam = Ipam::new(dir.path());
        fs::write(dir.path().join("n1.json"), "{not json").unwrap();
        let e = ipam.allocations("n1").unwrap_err();
        assert!(matches!(e, NetError::IpamState { .. }), "{e}");
        let e = ipam.allocations("../etc").unwrap_err();
        assert!(matches!(e, NetError::NetworkName(_)), "{e}");
    }

    #[test]
    fn two_threads_allocating_concurrently_never_share_an_address() {
        let dir = tempfile::tempdir().unwrap();
        let r = range("198.18.8.0/24", "198.18.8.1");
        let take = |prefix: &'static str| {
            let ipam = Ipam::new(dir.path());
            move || {
                (0..60)
                    .map(|i| {
                        ipam.allocate("n1", &r, &format!("{prefix}{i}"), None)
                            .unwrap()
                    })
                    .collect::<Vec<_>>()
            }
        };
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(take("a"));
            let b = s.spawn(take("b"));
            (a.join().unwrap(), b.join().unwrap())
        });
        let mut all: Vec<IpAddr> = a.into_iter().chain(b).collect();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 120);
        assert_eq!(Ipam::new(dir.path()).allocations("n1").unwrap().len(), 120);
    }
}
