//! Container networks: the store of network records and the drivers that plug a container in.
//!
//! Theory of operation: a network is a JSON record under `<state>/networks/<name>.json`, created
//! by `pier network create` or, for the default `bridge` network (bridge `pier0`), on first use
//! with a subnet chosen from the pool (`PIER_SUBNET_POOL`, pier-net's pool syntax) that overlaps no
//! host route and no other network; the choice is printed once. Attaching a container is two
//! steps so the engine can record before it creates: [`Networks::plan`] allocates the
//! addresses (IPAM lease owned by the container id) and names every link it will make;
//! [`Networks::attach`] creates them inside the container's network namespace. [`Networks::detach`]
//! is idempotent: it deletes whatever of the plan exists and releases the leases, so teardown, a
//! second teardown and crash recovery are the same call. Drivers (bridge, macvlan, ipvlan) share one
//! trait, one file each.
//! Privileges: root (netlink, nftables). Tests: crates/engine/tests/priv_network.rs.
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;

use crate::Paths;
use pier_net::Subnet;

/// `--driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    Bridge,
    Macvlan,
    Ipvlan,
}

/// `pier network create` flags, checked.
#[derive(Debug, Clone, Default)]
pub struct NetworkSpec {
    pub name: String,
    pub driver: Option<Driver>,
    pub subnet: Option<Subnet>,
    pub gateway: Option<IpAddr>,
    /// `--parent IFACE` (macvlan, ipvlan).
    pub parent: Option<String>,
    /// `--ipvlan-mode l2|l3`.
    pub ipvlan_mode: Option<String>,
    pub ipv6: bool,
    pub subnet6: Option<Subnet>,
    pub gateway6: Option<IpAddr>,
    /// macvlan `--host-shim`: a host-side macvlan so the host can reach its containers.
    pub host_shim: bool,
}

/// A network record (what `pier network inspect` prints).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Network {
    pub name: String,
    pub id: String,
    pub driver: Driver,
    /// The bridge (bridge driver) or the parent interface (macvlan, ipvlan).
    pub interface: String,
    pub subnet: Subnet,
    pub gateway: IpAddr,
    pub subnet6: Option<Subnet>,
    pub gateway6: Option<IpAddr>,
    /// macvlan host shim link name, when created.
    pub host_shim: Option<String>,
    pub created: String,
}

/// What attaching one container to one network makes (recorded before it is made).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attachment {
    pub network: String,
    pub container_id: String,
    /// The host-side link (veth peer) to delete on teardown, if the driver makes one.
    pub host_link: Option<String>,
    /// The interface name inside the container (`eth0`).
    pub container_link: String,
    /// Addresses with prefix length, IPv4 first.
    pub addresses: Vec<(IpAddr, u8)>,
    pub gateways: Vec<IpAddr>,
}

/// Why a network operation failed; variants name the step and the culprit.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("network {0} not found")]
    NotFound(String),
    #[error("network {0} already exists")]
    Exists(String),
    #[error("network {name} is in use by container(s) {containers}")]
    InUse { name: String, containers: String },
    #[error("{step}: {source}")]
    Net {
        step: String,
        source: pier_net::NetError,
    },
    #[error("{0}")]
    Invalid(String),
}

/// The network store and drivers over a state directory.
#[derive(Debug, Clone)]
pub struct Networks {
    paths: Paths,
}

impl Networks {
    pub fn new(paths: &Paths) -> Self {
        Self {
            paths: paths.clone(),
        }
    }

    /// `pier network create`: checks everything, then creates the record and host objects.
    pub fn create(&self, spec: &NetworkSpec) -> Result<Network, NetworkError> {
        let _ = (spec, &self.paths);
        todo!("engine-net helper")
    }

    /// The network named `name`; `bridge` is created on first use.
    pub fn get(&self, name: &str) -> Result<Network, NetworkError> {
        let _ = name;
        todo!("engine-net helper")
    }

    pub fn list(&self) -> Result<Vec<Network>, NetworkError> {
        todo!("engine-net helper")
    }

    /// `pier network rm`: refuses while a container holds a lease on it.
    pub fn remove(&self, name: &str) -> Result<(), NetworkError> {
        let _ = name;
        todo!("engine-net helper")
    }

    /// Allocates the container's addresses (`ip`/`ip6` static, checked) and names its links.
    pub fn plan(
        &self,
        network: &Network,
        container_id: &str,
        ip: Option<IpAddr>,
        ip6: Option<IpAddr>,
    ) -> Result<Attachment, NetworkError> {
        let _ = (network, container_id, ip, ip6);
        todo!("engine-net helper")
    }

    /// Creates the planned links, addresses and routes; `netns` is the container's.
    pub fn attach(&self, attachment: &Attachment, netns: BorrowedFd<'_>) -> Result<(), NetworkError> {
        let _ = (attachment, netns);
        todo!("engine-net helper")
    }

    /// Deletes whatever of the attachment exists and releases its leases (idempotent).
    pub fn detach(&self, attachment: &Attachment) -> Result<(), NetworkError> {
        let _ = attachment;
        todo!("engine-net helper")
    }

    /// Releases leases held by container ids not in `live` (crash recovery); returns them.
    pub fn reclaim(&self, live: &[String]) -> Result<Vec<(String, IpAddr)>, NetworkError> {
        let _ = live;
        todo!("engine-net helper")
    }
}

/// Brings `lo` up inside a new network namespace (`--network none` and every attached one).
pub fn loopback_up(netns: BorrowedFd<'_>) -> Result<(), NetworkError> {
    let _ = netns;
    todo!("engine-net helper")
}
