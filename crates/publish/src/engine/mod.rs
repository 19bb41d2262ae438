//! The publish engines behind one trait: `ebpf`, `nat`, `proxy`, and `auto` choosing among them.
//!
//! Theory of operation: publishing is two steps so the caller can record before anything exists.
//! [`Publish::plan`] resolves the mappings against one container (picking free host ports for
//! `-p 80`, checking that no port is already published or bound by a host program, naming the
//! owner when one is) and returns the [`Entry`]s it will make; the caller writes them into the
//! container's state; [`Publish::apply`] makes them. [`Publish::remove`] is idempotent and takes
//! only entries, so teardown, a repeated teardown and crash recovery are the same call.
//! One file per engine: `ebpf.rs` (pier-bpf map entries), `nat.rs` (pier-net's `inet pier`
//! elements), `proxy.rs` (one `pier proxy` child per mapping); `auto.rs` composes ebpf for local
//! clients with nat for remote ones and falls back, with one printed line saying why, where a
//! facility is missing. Shared: `plan.rs` (ports picked and checked, owners named through
//! `sockets.rs`) and `apply.rs` (entries describe themselves, so one all-or-nothing apply and
//! one idempotent remove serve every engine; [`Publish::apply_recorded`] also returns the
//! proxy children's pids for the caller to record), `clients.rs` (containers registered with
//! the ebpf programs as clients: [`register_client`], [`unregister_client`], [`sweep_clients`]). An engine file implements only the internal
//! `Engine` trait (its name, its settings, its entries for the resolved pairs); [`Publish`] is
//! implemented once over it, so plan, apply and remove cannot drift apart between engines.
//! Every engine acts in the network namespace of the calling thread, and proxy children die
//! with that thread (`PR_SET_PDEATHSIG`): apply from the thread that lives as long as the
//! container (the monitor).
//! Privileges: root. Tests: unit tests beside the code; crates/publish/tests/priv_engines.rs
//! (the issue-5 matrix) and priv_engines_lifecycle.rs (conflicts, ranges, failures, crash
//! recovery), all in namespaces the tests make; examples/publish_scale.rs measures connect
//! latency with 1 vs 1,000 published ports.
mod apply;
mod auto;
mod clients;
mod ebpf;
mod nat;
mod plan;
mod proxy;
mod remote;
mod sockets;

use serde::{Deserialize, Serialize};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use crate::{PortMapping, Protocol};

pub use clients::{
    client_netns, clients_map_inode, register_client, serves_clients, sweep_clients,
    unregister_client, ClientNetns,
};
pub use ebpf::retire_old_pins;
pub use remote::detach_idle as detach_idle_remote;

/// The container a mapping forwards to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub container_id: String,
    /// The container's addresses (IPv4 first); a v6 client reaches a v4-only container.
    pub addresses: Vec<IpAddr>,
    /// Its network's bridge (hairpin masquerade, FORWARD accept), when it has one.
    pub bridge: Option<String>,
}

/// Where the engines keep their host-wide objects (overridable for tests).
#[derive(Debug, Clone)]
pub struct Settings {
    /// bpffs directory of the pinned programs and map (`/sys/fs/bpf/pier`, `PIER_BPF_PIN_DIR`).
    pub bpf_pin_dir: PathBuf,
    /// cgroup2 directory the programs attach to (`/sys/fs/cgroup/unified` on hybrid hosts,
    /// `PIER_BPF_CGROUP`).
    pub bpf_cgroup: PathBuf,
    /// The program run as `<proxy_binary> proxy -proto …` (pier itself).
    pub proxy_binary: PathBuf,
    /// Whether auto puts the tc programs (remote.rs) in front of nat for remote clients (on
    /// unless `PIER_REMOTE_TC=0`; docs/benchmarks.md has the figures of both).
    pub remote_tc: bool,
}

/// One thing a publish made, as recorded in the container's state. Entries describe
/// themselves, so [`Publish::remove`] of any engine removes any entry (crash recovery need not
/// know which engine made it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Entry {
    /// An entry of pier-bpf's pinned map: clients dialling `host` reach `target`.
    Bpf {
        protocol: Protocol,
        host: SocketAddr,
        target: SocketAddr,
    },
    /// An element of pier-net's `inet pier` DNAT maps (`host` None: every host address).
    Nft {
        protocol: Protocol,
        host: Option<IpAddr>,
        host_port: u16,
        container: IpAddr,
        container_port: u16,
    },
    /// An entry of pier-bpf's remote map, the tc fast path of the `Nft` element with the same
    /// fields (`ifindex`: the interface a specific `host` is on, 0 for the wildcard).
    Remote {
        protocol: Protocol,
        host: Option<IpAddr>,
        host_port: u16,
        container: IpAddr,
        container_port: u16,
        ifindex: u32,
    },
    /// A `pier proxy` child listening on `host` and forwarding to `target`; `pid` and
    /// `start_time` (field 22 of /proc/PID/stat) once it runs ([`Publish::apply_recorded`]).
    Proxy {
        protocol: Protocol,
        host: SocketAddr,
        target: SocketAddr,
        pid: Option<i32>,
        start_time: Option<u64>,
    },
}

/// A published port as `pier port` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub mapping: PortMapping,
    /// The host ports actually used (picked ones resolved).
    pub host_ports: Vec<u16>,
}

/// Why publishing failed; names the port and, when taken, its owner.
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("port {port}/{protocol} on {host} is already published by container {owner}")]
    Published {
        port: u16,
        protocol: Protocol,
        host: String,
        owner: String,
    },
    #[error("port {port}/{protocol} on {host} is already bound by {program} (pid {pid}): stop it or publish another port")]
    Bound {
        port: u16,
        protocol: Protocol,
        host: String,
        program: String,
        pid: i32,
    },
    #[error("port {port}/{protocol} on {host} is already bound by a socket of no visible process (inode {inode})")]
    BoundUnknown {
        port: u16,
        protocol: Protocol,
        host: String,
        inode: u64,
    },
    #[error("no free {protocol} port left on {host} in {first}-{last} to pick for container port {container_port}")]
    NoFreePort {
        protocol: Protocol,
        host: String,
        container_port: u16,
        first: u16,
        last: u16,
    },
    #[error("publish ({engine}): container {container} has no address to forward to")]
    NoAddress {
        engine: &'static str,
        container: String,
    },
    #[error("publish ({engine}): {what} is not supported by this engine: {why}")]
    Unsupported {
        engine: &'static str,
        what: String,
        why: &'static str,
    },
    #[error("publish ({engine}): {why}")]
    Unavailable { engine: &'static str, why: String },
    #[error("publish: reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("publish (ebpf): {step}: {source}")]
    Bpf {
        step: &'static str,
        #[source]
        source: pier_bpf::Error,
    },
    #[error("publish (nat): {step}: {source}")]
    Nft {
        step: &'static str,
        #[source]
        source: pier_net::nft::NftError,
    },
    #[error("publish (nat): {step}: {source}")]
    Net {
        step: &'static str,
        #[source]
        source: pier_net::NetError,
    },
    #[error("publish (proxy): {step} for {host}/{protocol}: {source}")]
    Proxy {
        step: &'static str,
        host: SocketAddr,
        protocol: Protocol,
        #[source]
        source: std::io::Error,
    },
    #[error("publish (proxy): pier proxy for {host}/{protocol} failed: {message}")]
    ProxyStatus {
        host: SocketAddr,
        protocol: Protocol,
        message: String,
    },
    #[error("publish: removing failed at {} step(s): {}", .0.len(), join(.0))]
    Teardown(Vec<PublishError>),
}

fn join(errors: &[PublishError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}

/// One engine (also `auto`).
pub trait Publish: std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// Resolves and checks the mappings; nothing is created.
    fn plan(
        &self,
        target: &Target,
        mappings: &[PortMapping],
    ) -> Result<(Vec<Published>, Vec<Entry>), PublishError>;
    /// Makes the planned entries (all or, on error, none).
    fn apply(&self, target: &Target, entries: &[Entry]) -> Result<(), PublishError> {
        self.apply_recorded(target, entries).map(drop)
    }
    /// Like [`Publish::apply`], returning the entries as made: proxy entries gain their pid and
    /// start time. Callers that can should record these over the planned ones (removal finds a
    /// proxy by its command line when they did not).
    fn apply_recorded(
        &self,
        target: &Target,
        entries: &[Entry],
    ) -> Result<Vec<Entry>, PublishError>;
    /// Removes whatever of `entries` exists (idempotent).
    fn remove(&self, entries: &[Entry]) -> Result<(), PublishError>;
}

/// What one engine adds to the steps every engine shares: its name, its settings and the entries
/// for the resolved pairs. Resolving the mappings ([`plan::resolve`]) and making and removing
/// entries ([`apply`]) are the same for all, so [`Publish`] is implemented once, here.
pub(crate) trait Engine: std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn settings(&self) -> &Settings;
    /// Whether every port this engine could clash with is in pier-bpf's pinned map (read
    /// in-process), so planning needs no `nft` listing unless it picks ports.
    fn covered_by_map(&self) -> bool {
        false
    }
    /// The entries serving `pairs` (already resolved and checked) for `target`.
    fn entries(&self, target: &Target, pairs: &[plan::Pair]) -> Result<Vec<Entry>, PublishError>;
}

impl<E: Engine> Publish for E {
    fn name(&self) -> &'static str {
        Engine::name(self)
    }

    fn plan(
        &self,
        target: &Target,
        mappings: &[PortMapping],
    ) -> Result<(Vec<Published>, Vec<Entry>), PublishError> {
        let list_nft = !self.covered_by_map();
        let (published, pairs) = plan::resolve(self.settings(), target, mappings, list_nft)?;
        Ok((published, self.entries(target, &pairs)?))
    }

    fn apply_recorded(
        &self,
        target: &Target,
        entries: &[Entry],
    ) -> Result<Vec<Entry>, PublishError> {
        apply::apply(self.settings(), target, entries)
    }

    fn remove(&self, entries: &[Entry]) -> Result<(), PublishError> {
        apply::remove(self.settings(), entries)
    }
}

/// `--publish-mode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Auto,
    Ebpf,
    Nat,
    Proxy,
}

/// The engine for `mode` on this host (`auto` may fall back, printing one line why).
pub fn select(mode: Mode, settings: &Settings) -> Result<Box<dyn Publish>, PublishError> {
    Ok(match mode {
        Mode::Ebpf => Box::new(ebpf::Ebpf::new(settings)?),
        Mode::Nat => Box::new(nat::Nat::new(settings)?),
        Mode::Proxy => Box::new(proxy::ProxyEngine::new(settings)),
        Mode::Auto => Box::new(auto::Auto::new(settings)?),
    })
}

/// Removes whatever of `entries` exists, whichever engine made them (idempotent), without
/// making any engine: unlike `select(..)?.remove(..)`, it loads no program and creates no
/// table, so `pier gc` and crash recovery leave nothing new behind.
pub fn remove(settings: &Settings, entries: &[Entry]) -> Result<(), PublishError> {
    apply::remove(settings, entries)
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Ebpf => "ebpf",
            Mode::Nat => "nat",
            Mode::Proxy => "proxy",
        }
    }
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Mode::Auto),
            "ebpf" => Ok(Mode::Ebpf),
            "nat" => Ok(Mode::Nat),
            "proxy" => Ok(Mode::Proxy),
            _ => Err(format!(
                "publish mode {s:?} is not auto, ebpf, nat or proxy"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_serialise_with_their_kind() {
        let entry = Entry::Bpf {
            protocol: Protocol::Tcp,
            host: "0.0.0.0:8080".parse().unwrap(),
            target: "198.18.0.2:80".parse().unwrap(),
        };
        let text = serde_json::to_string(&entry).unwrap();
        assert!(text.starts_with("{\"kind\":\"bpf\""), "{text}");
        assert_eq!(serde_json::from_str::<Entry>(&text).unwrap(), entry);
        assert_eq!("nat".parse::<Mode>(), Ok(Mode::Nat));
        assert!("fast".parse::<Mode>().is_err());
    }
}
