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
//! facility is missing.
//! Privileges: root. Tests: crates/publish/tests/priv_engines.rs (the matrix, in test netns).
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::path::PathBuf;

use crate::PortMapping;

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
}

/// One thing a publish made, as recorded in the container's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Entry {
    /// Written by engine files; fields are theirs to define.
    Placeholder,
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
    #[error("{0}")]
    Other(String),
}

/// One engine (also `auto`).
pub trait Publish: std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// Resolves and checks the mappings; nothing is created.
    fn plan(&self, target: &Target, mappings: &[PortMapping])
        -> Result<(Vec<Published>, Vec<Entry>), PublishError>;
    /// Makes the planned entries (all or, on error, none).
    fn apply(&self, target: &Target, entries: &[Entry]) -> Result<(), PublishError>;
    /// Removes whatever of `entries` exists (idempotent).
    fn remove(&self, entries: &[Entry]) -> Result<(), PublishError>;
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
    let _ = (mode, settings);
    todo!("publish-engines helper")
}
