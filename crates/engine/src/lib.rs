//! pier-engine: the daemonless container engine behind `pier run`, `pier ps`, `pier network` …
//!
//! Theory of operation: everything the engine knows lives under one state directory
//! ([`Paths`], default `/var/lib/pier`, `--state-dir`/`PIER_STATE_DIR`): one directory per
//! container with its record (`store.rs`), generated bundle, overlay layers, /etc files and log;
//! one record per network (`network/`); the IPAM leases; and the pier-runtime root for the
//! containers' OCI state. There is no daemon: a detached container is watched by a small monitor
//! process (`monitor.rs`), the parent of the container's init, which records the exit, captures
//! the log and tears the container down. Every object the engine creates (overlay mount, links,
//! addresses, leases, published ports) is written into the container's record *before* it is
//! created, so `gc.rs` (run at the start of every engine command and by `pier gc`) can remove
//! whatever a killed pier or monitor left behind.
//!
//! Modules: `config` (what `pier run` was asked, parsed and checked), `spec` (config → OCI spec
//! with Docker's defaults), `rootfs` (the `host` root and the overlay on a directory root),
//! `network` (drivers and the network store), `dns` (resolv.conf and hosts), `store`,
//! `engine` (the verbs), `monitor`, `logs`, `gc`, `clients` (containers as clients of the ebpf
//! programs), `crash` (test-only crash points).
//!
//! Privileges: root. Tests: unit tests beside the code; black-box tests of the binary in
//! crates/pier/tests/engine_*.rs; library tests in crates/engine/tests/priv_*.rs.
mod clients;
pub mod config;
pub mod crash;
pub mod dns;
pub mod engine;
mod gc;
pub mod init;
pub mod logs;
pub mod monitor;
pub mod network;
pub mod rootfs;
mod run;
pub mod spec;
pub mod store;
pub mod tty;

use std::path::PathBuf;

/// Where the engine keeps its state.
#[derive(Debug, Clone)]
pub struct Paths {
    /// The state directory (default `/var/lib/pier`).
    pub state_dir: PathBuf,
}

impl Paths {
    /// Default state directory.
    pub const DEFAULT: &'static str = "/var/lib/pier";

    /// `<state>/containers`: one directory per container id.
    pub fn containers(&self) -> PathBuf {
        self.state_dir.join("containers")
    }

    /// `<state>/networks`: one JSON record per network.
    pub fn networks(&self) -> PathBuf {
        self.state_dir.join("networks")
    }

    /// `<state>/ipam`: pier-net's lease files.
    pub fn ipam(&self) -> PathBuf {
        self.state_dir.join("ipam")
    }

    /// `<state>/runtime`: the pier-runtime `--root` of engine containers.
    pub fn runtime_root(&self) -> PathBuf {
        self.state_dir.join("runtime")
    }

    /// `<state>/hostroot`: the shared, read-only skeleton of the `host` root filesystem.
    pub fn host_root(&self) -> PathBuf {
        self.state_dir.join("hostroot")
    }
}
