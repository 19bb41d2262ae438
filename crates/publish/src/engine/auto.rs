//! auto engine: the ebpf engine for clients in the host's network namespace and in containers
//! on the target's own network, the nat engine for remote clients and containers on other
//! networks (the programs leave those alone), with the tc programs of remote.rs in front of nat
//! for remote clients of a bridged container (no conntrack on their path; `PIER_REMOTE_TC=0`
//! leaves them to nat alone); where cgroup2/BPF is missing, nat for remote clients and a proxy
//! for loopback.
//!
//! Theory of operation: made once per process; if the ebpf programs cannot be loaded or
//! attached, ONE line on stderr says why and that auto falls back. A plan is the union of the
//! engines' entries for the same resolved pairs: with ebpf, its map entries (every local front)
//! plus nat's elements (remote clients; fronts nat cannot serve are skipped, the map entries
//! cover them locally) and, with `Settings::remote_tc` and the tc programs loadable (one line
//! says why not), the remote map twin of each of those elements; without ebpf, nat's elements
//! plus proxy children on 127.0.0.1 and ::1 for a wildcard, on the address itself for a
//! loopback front or one of the other family.
//!
//! Section order (the same in every engine file): engine, plan, apply, remove.
//! Privileges: root. Tests: crates/publish/tests/priv_engines*.rs.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::atomic::{AtomicBool, Ordering};

use super::nat::Strict;
use super::plan::Pair;
use super::{ebpf, nat, proxy, remote, Engine, Entry, PublishError, Settings, Target};
use crate::Protocol;

/// Whether the fallback line was printed by this process.
static WARNED: AtomicBool = AtomicBool::new(false);
/// Whether the line about remote clients staying on nft was printed by this process.
static WARNED_REMOTE: AtomicBool = AtomicBool::new(false);

/// The auto engine.
#[derive(Debug)]
pub(crate) struct Auto {
    settings: Settings,
    /// Whether the ebpf programs are loaded and attached.
    ebpf: bool,
    /// Whether the tc programs for remote clients are loaded and on the uplinks.
    remote: bool,
}

impl Auto {
    pub(crate) fn new(settings: &Settings) -> Result<Self, PublishError> {
        nat::available()?;
        let ebpf = match ebpf::ensure(settings) {
            Ok(()) => true,
            Err(e) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    eprintln!("pier: publish: {e}; auto falls back to nat for remote clients and a proxy for loopback");
                }
                false
            }
        };
        let remote = ebpf && settings.remote_tc && remote_ready(settings);
        Ok(Self {
            settings: settings.clone(),
            ebpf,
            remote,
        })
    }
}

impl Engine for Auto {
    fn name(&self) -> &'static str {
        "auto"
    }

    fn settings(&self) -> &Settings {
        &self.settings
    }

    /// With ebpf, the pinned map holds every port auto and ebpf publish: the nft maps are
    /// listed only to pick ports; a key taken in them by a nat-mode container fails the apply.
    fn covered_by_map(&self) -> bool {
        self.ebpf
    }

    fn entries(&self, target: &Target, pairs: &[Pair]) -> Result<Vec<Entry>, PublishError> {
        let hosts = match self.ebpf {
            true => ebpf::host_addresses()?,
            false => Vec::new(),
        };
        let mut entries = Vec::new();
        for pair in pairs {
            if self.ebpf && pair.protocol != Protocol::Sctp {
                entries.extend(ebpf::entries_for_pair(pair, target, &hosts)?);
            } else {
                entries.extend(proxy::entries_for(
                    pair,
                    target,
                    &local_fronts(pair, target),
                )?);
            }
            let nft = nat::entries_for(pair, target, Strict::Skip)?;
            if self.remote {
                entries.extend(remote::entries_for(&nft, target)?);
            }
            entries.extend(nft);
        }
        Ok(entries)
    }
}

/// Loads and attaches the tc programs for remote clients; when that fails, one line says why
/// and remote clients stay on nft alone.
fn remote_ready(settings: &Settings) -> bool {
    match remote::ensure(settings) {
        Ok(()) => true,
        Err(e) => {
            if !WARNED_REMOTE.swap(true, Ordering::Relaxed) {
                eprintln!("pier: publish: remote clients go through nft DNAT only ({e})");
            }
            false
        }
    }
}

/// The fronts a proxy must serve when nat is alone: loopback, and a front nat cannot DNAT.
fn local_fronts(pair: &Pair, target: &Target) -> Vec<IpAddr> {
    match pair.host_ip.filter(|ip| !ip.is_unspecified()) {
        None => proxy::both_families(Ipv4Addr::LOCALHOST, Ipv6Addr::LOCALHOST),
        Some(ip) if ip.is_loopback() => vec![ip],
        Some(ip) if !target.addresses.iter().any(|a| a.is_ipv4() == ip.is_ipv4()) => vec![ip],
        Some(_) => Vec::new(),
    }
}
