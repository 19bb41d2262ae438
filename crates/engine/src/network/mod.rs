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
//! second teardown and crash recovery are the same call; [`Networks::release`] frees only the
//! leases, for a teardown after the container's namespace is gone (its links went with it). Drivers (bridge, macvlan, ipvlan) share one
//! trait (`driver::NetworkDriver`), one file each; `store.rs` keeps the records, `check.rs`
//! refuses a bad `create` before anything exists, `inside.rs` configures the container's side.
//! A bridge network's gateway mode per family (Docker's `-o com.docker.network.bridge.
//! gateway_mode_ipv4|ipv6=nat|routed`) is in its record (`options`, Docker's keys; absent means
//! `nat`), so the nftables mark a routed subnet gets is recorded before it is made and removed
//! with the network (bridge.rs).
//! A network's record is saved before its host objects (bridge, shim) are made, naming them, so
//! `pier network rm` can always find them; a failed create undoes both. If the bridge of a
//! recorded network is missing at attach (a reboot, a crash mid-create), it is made again.
//! Every host-side object lives in the network namespace of the calling process (a test runs
//! pier inside its own netns), the container's side in the netns passed to `attach`.
//! Privileges: root (netlink, nftables). Tests: unit tests beside the code;
//! crates/engine/tests/priv_network.rs (root, own namespaces).
mod bridge;
mod check;
mod driver;
mod inside;
mod ipvlan;
mod macvlan;
mod store;

use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::os::fd::BorrowedFd;
use std::path::PathBuf;

use crate::Paths;
use pier_net::ipam::{Ipam, Range};
use pier_net::nft::NftError;
use pier_net::{NetError, Netlink, Subnet};

use driver::driver;
use store::Store;

/// The default network's name and its bridge.
pub const DEFAULT_NETWORK: &str = "bridge";
pub const DEFAULT_BRIDGE: &str = "pier0";

/// The environment variable naming the subnet pools (pier-net pool syntax).
pub const POOL_ENV: &str = "PIER_SUBNET_POOL";

/// The IPAM owner of a macvlan host shim's address (never reclaimed as a dead container).
pub const HOST_SHIM_OWNER: &str = "pier-host-shim";

/// The interface name every attachment gives the container.
pub const CONTAINER_LINK: &str = "eth0";

/// `--driver`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Driver {
    Bridge,
    Macvlan,
    Ipvlan,
}

/// Docker's option key choosing an IPv4 bridge network's gateway mode (`nat` or `routed`).
pub const GATEWAY_MODE_IPV4: &str = "com.docker.network.bridge.gateway_mode_ipv4";
/// Docker's option key choosing an IPv6 bridge network's gateway mode.
pub const GATEWAY_MODE_IPV6: &str = "com.docker.network.bridge.gateway_mode_ipv6";

/// How a bridge network's containers meet the world beyond the host, per address family
/// (Docker 28's gateway modes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GatewayMode {
    /// Egress masqueraded; the subnet is closed to routing from outside (published ports only).
    #[default]
    Nat,
    /// No masquerade; the subnet is reachable by routing from outside (isolation from other
    /// pier networks stays).
    Routed,
}

impl GatewayMode {
    fn is_nat(&self) -> bool {
        *self == GatewayMode::Nat
    }
}

/// The Docker driver options a network keeps, under Docker's key names (what `pier network
/// inspect` shows as `options`); a record without them (older pier) reads as all `nat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Options {
    #[serde(
        rename = "com.docker.network.bridge.gateway_mode_ipv4",
        default,
        skip_serializing_if = "GatewayMode::is_nat"
    )]
    pub gateway_mode_ipv4: GatewayMode,
    #[serde(
        rename = "com.docker.network.bridge.gateway_mode_ipv6",
        default,
        skip_serializing_if = "GatewayMode::is_nat"
    )]
    pub gateway_mode_ipv6: GatewayMode,
}

impl Options {
    fn is_default(&self) -> bool {
        *self == Options::default()
    }
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
    /// `-o com.docker.network.bridge.gateway_mode_ipv4|ipv6=nat|routed` (bridge only).
    pub options: Options,
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
    /// ipvlan `l2` or `l3` (ipvlan networks only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ipvlan_mode: Option<String>,
    /// Docker's options (the gateway modes of a bridge network).
    #[serde(default, skip_serializing_if = "Options::is_default")]
    pub options: Options,
}

impl Network {
    /// The network's subnets, IPv4 first, each with whether it is routed.
    pub fn routed_subnets(&self) -> Vec<(Subnet, bool)> {
        let routed = |mode: GatewayMode| mode == GatewayMode::Routed;
        let v4 = (self.subnet, routed(self.options.gateway_mode_ipv4));
        let v6 = self
            .subnet6
            .map(|s| (s, routed(self.options.gateway_mode_ipv6)));
        std::iter::once(v4).chain(v6).collect()
    }
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
    /// A link pier made or looked up a moment ago is gone at the next step.
    #[error("{step}: {what} {name} vanished")]
    Vanished {
        step: &'static str,
        what: &'static str,
        name: String,
    },
    #[error("subnet {subnet} overlaps {other} ({owner}); choose another {flag}")]
    Overlap {
        subnet: Subnet,
        other: Subnet,
        owner: String,
        flag: &'static str,
    },
    #[error("parent interface {0} does not exist; give an existing interface to --parent")]
    NoParent(String),
    #[error(
        "this kernel has no ipvlan support (module ipvlan not available); use --driver macvlan"
    )]
    IpvlanUnsupported,
    #[error("{step} {path}: {source}")]
    Store {
        step: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("network record {path} is not valid: {source}")]
    Record {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("enable forwarding: write 1 to {path}: {source}")]
    Sysctl {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{step}: {source}")]
    Nft {
        step: &'static str,
        source: NftError,
    },
    #[error("{}", join_errors(.0))]
    Several(Vec<NetworkError>),
}

fn join_errors(errors: &[NetworkError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

impl NetworkError {
    /// Wraps a pier-net error with the engine step it failed in.
    fn net(step: impl Into<String>) -> impl FnOnce(NetError) -> NetworkError {
        let step = step.into();
        move |source| match source {
            NetError::IpvlanUnavailable => NetworkError::IpvlanUnsupported,
            source => NetworkError::Net { step, source },
        }
    }

    /// Collapses teardown failures: none is Ok, one is itself, more are [`Self::Several`].
    fn all(mut errors: Vec<NetworkError>) -> Result<(), NetworkError> {
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(NetworkError::Several(errors)),
        }
    }
}

/// Opens an rtnetlink handle in the calling thread's namespace.
fn open_netlink() -> Result<Netlink, NetworkError> {
    Netlink::open().map_err(NetworkError::net("open netlink"))
}

/// The network store and drivers over a state directory.
#[derive(Debug, Clone)]
pub struct Networks {
    store: Store,
    ipam: Ipam,
}

impl Networks {
    pub fn new(paths: &Paths) -> Self {
        Self {
            store: Store::new(paths.networks()),
            ipam: Ipam::new(paths.ipam()),
        }
    }

    /// `pier network create`: checks everything, then creates the record and host objects.
    pub fn create(&self, spec: &NetworkSpec) -> Result<Network, NetworkError> {
        if spec.name == DEFAULT_NETWORK {
            return Err(NetworkError::Invalid(format!(
                "network {DEFAULT_NETWORK} is pier's default network and is created on first use"
            )));
        }
        let _lock = self.store.lock()?;
        self.create_locked(spec)
    }

    /// Checks `spec`, saves the record (naming every host object), then creates the host
    /// objects; on error the driver has undone its part and the record goes too.
    fn create_locked(&self, spec: &NetworkSpec) -> Result<Network, NetworkError> {
        let mut nl = open_netlink()?;
        let network = check::network(spec, &self.store.list()?, &mut nl)?;
        self.store.save(&network)?;
        match driver(network.driver).create(&network, &mut nl, &self.ipam) {
            Ok(()) => Ok(network),
            Err(e) => Err(match self.store.delete(&network.name) {
                Ok(()) => e,
                Err(undo) => NetworkError::Several(vec![e, undo]),
            }),
        }
    }

    /// The network named `name`; `bridge` is created on first use.
    pub fn get(&self, name: &str) -> Result<Network, NetworkError> {
        if let Some(network) = self.store.load(name)? {
            return Ok(network);
        }
        if name != DEFAULT_NETWORK {
            return Err(NetworkError::NotFound(name.to_string()));
        }
        let _lock = self.store.lock()?;
        if let Some(network) = self.store.load(name)? {
            return Ok(network);
        }
        let network = self.create_locked(&check::default_spec())?;
        eprintln!(
            "pier: created the default network {DEFAULT_NETWORK} (bridge {DEFAULT_BRIDGE}) with \
             subnet {} from the pool {}; set {POOL_ENV} (for example 10.200.0.0/16:24) to choose another",
            network.subnet,
            check::pool_text()
        );
        Ok(network)
    }

    pub fn list(&self) -> Result<Vec<Network>, NetworkError> {
        self.store.list()
    }

    /// `pier network rm`: refuses while a container holds a lease on it.
    pub fn remove(&self, name: &str) -> Result<(), NetworkError> {
        let _lock = self.store.lock()?;
        let network = self
            .store
            .load(name)?
            .ok_or_else(|| NetworkError::NotFound(name.to_string()))?;
        let holders = self.holders(name)?;
        if !holders.is_empty() {
            let containers = holders.join(", ");
            return Err(NetworkError::InUse {
                name: name.to_string(),
                containers,
            });
        }
        let mut nl = open_netlink()?;
        let others: Vec<Network> = self
            .store
            .list()?
            .into_iter()
            .filter(|n| n.name != name)
            .collect();
        let mut errors = driver(network.driver).remove(&network, &others, &mut nl);
        if errors.is_empty() {
            errors.extend(
                self.ipam
                    .remove_network(name)
                    .err()
                    .map(NetworkError::net("remove ipam files")),
            );
            errors.extend(self.store.delete(name).err());
        }
        NetworkError::all(errors)
    }

    /// The containers holding addresses in `network` (sorted, once each).
    fn holders(&self, network: &str) -> Result<Vec<String>, NetworkError> {
        let leases = self
            .ipam
            .allocations(network)
            .map_err(NetworkError::net("read ipam leases"))?;
        let mut owners: Vec<String> = leases
            .into_values()
            .filter(|owner| owner != HOST_SHIM_OWNER)
            .collect();
        owners.sort();
        owners.dedup();
        Ok(owners)
    }

    /// Allocates the container's addresses (`ip`/`ip6` static, checked) and names its links.
    pub fn plan(
        &self,
        network: &Network,
        container_id: &str,
        ip: Option<IpAddr>,
        ip6: Option<IpAddr>,
    ) -> Result<Attachment, NetworkError> {
        if ip6.is_some() && network.subnet6.is_none() {
            return Err(NetworkError::Invalid(format!(
                "--ip6 given but network {} has no IPv6 subnet (create it with --ipv6 --subnet6)",
                network.name
            )));
        }
        let v4 = self.lease(
            network,
            network.subnet,
            Some(network.gateway),
            container_id,
            ip,
        )?;
        let mut addresses = vec![(v4, network.subnet.prefix())];
        if let Some(subnet6) = network.subnet6 {
            let v6 = self.lease(network, subnet6, network.gateway6, container_id, ip6);
            let v6 = v6.inspect_err(|_| drop(self.ipam.release(&network.name, container_id)))?;
            addresses.push((v6, subnet6.prefix()));
        }
        let driver = driver(network.driver);
        Ok(Attachment {
            network: network.name.clone(),
            container_id: container_id.to_string(),
            host_link: driver.host_link(network, container_id),
            container_link: CONTAINER_LINK.to_string(),
            addresses,
            gateways: driver.gateways(network),
        })
    }

    fn lease(
        &self,
        network: &Network,
        subnet: Subnet,
        gateway: Option<IpAddr>,
        container_id: &str,
        requested: Option<IpAddr>,
    ) -> Result<IpAddr, NetworkError> {
        let range = Range { subnet, gateway };
        self.ipam
            .allocate(&network.name, &range, container_id, requested)
            .map_err(NetworkError::net("allocate an address"))
    }

    /// Creates the planned links, addresses and routes, and brings `lo` up; `netns` is the
    /// container's.
    pub fn attach(
        &self,
        attachment: &Attachment,
        netns: BorrowedFd<'_>,
    ) -> Result<(), NetworkError> {
        let network = self.get(&attachment.network)?;
        let mut nl = open_netlink()?;
        driver(network.driver).link(&network, attachment, &mut nl, netns)?;
        inside::configure(attachment, netns)
    }

    /// Deletes whatever of the attachment exists and releases its leases (idempotent).
    ///
    /// Deleting a veth waits for RCU grace periods (about 30 ms here under load); after the
    /// container's network namespace is gone, [`Networks::release`] is the cheap equivalent.
    pub fn detach(&self, attachment: &Attachment) -> Result<(), NetworkError> {
        let mut errors = Vec::new();
        if let Some(link) = &attachment.host_link {
            let deleted = open_netlink().and_then(|mut nl| {
                nl.delete_link_named(link)
                    .map_err(NetworkError::net("delete the container's host link"))
            });
            errors.extend(deleted.err());
        }
        errors.extend(self.release(attachment).err());
        NetworkError::all(errors)
    }

    /// Releases the attachment's leases only (idempotent). Enough for teardown once nothing holds
    /// the container's network namespace any more: every link an attachment makes has one end in
    /// that namespace, and the kernel deletes the pair with it (asynchronously, off pier's path).
    /// `detach` from `pier gc` catches a link whose namespace someone else kept alive.
    pub fn release(&self, attachment: &Attachment) -> Result<(), NetworkError> {
        if self.store.load(&attachment.network)?.is_none() {
            return Ok(());
        }
        self.ipam
            .release(&attachment.network, &attachment.container_id)
            .map(drop)
            .map_err(NetworkError::net("release addresses"))
    }

    /// Releases leases held by container ids not in `live` (crash recovery); returns them.
    pub fn reclaim(&self, live: &[String]) -> Result<Vec<(String, IpAddr)>, NetworkError> {
        let is_live = |id: &str| id == HOST_SHIM_OWNER || live.iter().any(|l| l == id);
        let mut freed = Vec::new();
        for network in self.store.list()? {
            let dead = self
                .ipam
                .reclaim(&network.name, is_live)
                .map_err(NetworkError::net(format!(
                    "reclaim leases of {}",
                    network.name
                )))?;
            freed.extend(dead.into_iter().map(|(ip, id)| (id, ip)));
        }
        Ok(freed)
    }
}

/// Brings `lo` up inside a new network namespace (`--network none`; [`Networks::attach`] does it
/// too, in the same visit to the namespace).
pub fn loopback_up(netns: BorrowedFd<'_>) -> Result<(), NetworkError> {
    inside::loopback_up(netns)
}
