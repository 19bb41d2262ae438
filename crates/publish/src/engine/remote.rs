//! Remote clients at tc: the auto engine's fast path for what the nat engine's DNAT elements
//! publish, through pier-bpf's tc programs (crates/bpf/src/bpf/remote.bpf.c says how they
//! translate without conntrack).
//!
//! Theory of operation: [`ensure`] loads the programs once (pinned under the pin dir's
//! `remote/`), checks on that first load that the kernel takes tcx links (a failed check unpins
//! the object again, so the next pier checks anew; pinned means checked) and unpins the links of
//! interfaces that are gone; it runs when an auto engine is made and attaches nothing. Every nft element auto
//! plans for a container on a pier bridge gets a twin entry here ([`entries_for`]): same front,
//! same target, plus the index of the interface a specific host address is on. Applying
//! attaches `pier_tc_in` to every uplink that lacks it (so an interface added since is covered
//! from the next publish on; until then nft serves it) and `pier_tc_reply` to the target's
//! bridge, then writes the map; the nft element stays underneath as the authority and the
//! fallback for everything the programs leave alone. Removing deletes a map entry only when it
//! still points at the same target. The programs stay attached when the map empties: a tcx
//! attach waits for an RCU grace period (7–23 ms each here, measured), which made every
//! `pier run --rm -p` pay 40 ms when the last removal detached them; with nothing published they
//! cost a parse and a hash miss per packet. `pier gc` detaches them from every interface when
//! nothing is published through them ([`detach_idle`]). All of these hold the pin dir's lock,
//! so a publish never sees its uplinks detached under it.
//! An uplink is an Ethernet interface of this namespace that is not loopback, not a bridge port
//! and not a pier bridge (remote clients come in through it).
//!
//! Privileges: root (CAP_BPF, CAP_NET_ADMIN). Tests: crates/publish/tests/priv_engines_remote.rs,
//! crates/pier/tests/engine_network.rs (through `pier run` and PIER_REMOTE_TC).
use std::net::SocketAddr;

use pier_bpf::{Hook, Proto, RemoteEntry, RemotePublisher};

use super::ebpf::{addresses_by_link, bpf_err, lock_pins};
use super::{Entry, PublishError, Settings, Target};
use crate::Protocol;

/// Loads what remote clients need and checks the kernel can attach it; the error says which
/// facility is missing.
pub(crate) fn ensure(settings: &Settings) -> Result<(), String> {
    let _lock = lock_pins(settings).map_err(|e| e.to_string())?;
    let pin_dir = &settings.bpf_pin_dir;
    if pier_bpf::load_remote(pin_dir).map_err(|e| e.to_string())? {
        if let Err(e) = pier_bpf::probe_remote(pin_dir) {
            let _ = pier_bpf::unpin_remote(pin_dir);
            return Err(e.to_string());
        }
    }
    let links = pier_net::Netlink::open()
        .and_then(|mut nl| nl.links())
        .map_err(|e| e.to_string())?;
    for (hook, index) in pier_bpf::attached_remote(pin_dir) {
        if !links.iter().any(|l| l.index == index) {
            pier_bpf::unpin_remote_link(pin_dir, hook, index).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// An interface remote clients come in through.
fn is_uplink(link: &pier_net::LinkSummary) -> bool {
    let pier_bridge = link.kind.as_deref() == Some("bridge")
        && (link.name == "pier0" || link.name.starts_with("pier-"));
    link.ether && !link.loopback && link.master.is_none() && !pier_bridge
}

/// The twin of each of auto's nft elements the programs can serve: TCP and UDP, a container
/// on a bridge, a specific host address found on an interface of this namespace.
pub(crate) fn entries_for(nft: &[Entry], target: &Target) -> Result<Vec<Entry>, PublishError> {
    if target.bridge.is_none() {
        return Ok(Vec::new());
    }
    let mut addresses = None;
    let mut out = Vec::new();
    for entry in nft {
        let Entry::Nft {
            protocol,
            host,
            host_port,
            container,
            container_port,
        } = *entry
        else {
            continue;
        };
        if protocol == Protocol::Sctp {
            continue;
        }
        let ifindex = match host {
            None => 0,
            Some(ip) => {
                let list = match &mut addresses {
                    Some(list) => list,
                    None => addresses.insert(addresses_by_link()?),
                };
                match list.iter().find(|(_, a)| *a == ip) {
                    Some(&(index, _)) => index,
                    None => continue,
                }
            }
        };
        out.push(Entry::Remote {
            protocol,
            host,
            host_port,
            container,
            container_port,
            ifindex,
        });
    }
    Ok(out)
}

/// The map entry an [`Entry::Remote`] stands for.
pub(crate) fn remote(entry: &Entry) -> Option<RemoteEntry> {
    match *entry {
        Entry::Remote {
            protocol,
            host,
            host_port,
            container,
            container_port,
            ifindex,
        } => Some(RemoteEntry {
            proto: match protocol {
                Protocol::Tcp => Proto::Tcp,
                Protocol::Udp => Proto::Udp,
                Protocol::Sctp => return None,
            },
            host,
            port: host_port,
            target: SocketAddr::new(container, container_port),
            ifindex,
        }),
        _ => None,
    }
}

/// Attaches the uplinks' program where it is missing and the reply program to the target's
/// bridge, then writes the entries; on failure removes the entries it wrote.
pub(crate) fn apply_entries(
    settings: &Settings,
    target: &Target,
    entries: &[RemoteEntry],
) -> Result<(), PublishError> {
    let Some(bridge) = target.bridge.as_deref().filter(|_| !entries.is_empty()) else {
        return Ok(());
    };
    let _lock = lock_pins(settings)?;
    let pin_dir = &settings.bpf_pin_dir;
    let links = pier_net::Netlink::open()
        .and_then(|mut nl| nl.links())
        .map_err(|source| PublishError::Net {
            step: "list the interfaces",
            source,
        })?;
    for link in links.iter().filter(|l| is_uplink(l)) {
        pier_bpf::attach_remote(pin_dir, Hook::Uplink, link.index)
            .map_err(bpf_err("attach the remote program to an uplink"))?;
    }
    if let Some(link) = links.iter().find(|l| l.name == bridge) {
        pier_bpf::attach_remote(pin_dir, Hook::Bridge, link.index)
            .map_err(bpf_err("attach the reply program to the bridge"))?;
    }
    let publisher = RemotePublisher::open(pin_dir).map_err(bpf_err("open the remote map"))?;
    for (done, entry) in entries.iter().enumerate() {
        if let Err(e) = publisher.publish(entry) {
            for made in &entries[..done] {
                let _ = publisher.unpublish(made);
            }
            return Err(bpf_err("publish for remote clients")(e));
        }
    }
    Ok(())
}

/// Removes the entries that still point at their target (the programs stay attached); missing
/// map or entries are fine.
pub(crate) fn remove_entries(
    settings: &Settings,
    entries: &[RemoteEntry],
) -> Result<(), PublishError> {
    if entries.is_empty() || !pier_bpf::remote_loaded(&settings.bpf_pin_dir) {
        return Ok(());
    }
    let _lock = lock_pins(settings)?;
    let publisher =
        RemotePublisher::open(&settings.bpf_pin_dir).map_err(bpf_err("open the remote map"))?;
    let mut first = Ok(());
    for entry in entries {
        let res = publisher.unpublish(entry);
        first = first.and(res.map_err(bpf_err("unpublish for remote clients")));
    }
    first
}

/// Detaches the remote programs from every interface when nothing is published through them
/// (`pier gc`); returns how many links it removed.
pub fn detach_idle(settings: &Settings) -> Result<usize, PublishError> {
    let pin_dir = &settings.bpf_pin_dir;
    if !pier_bpf::remote_loaded(pin_dir) || pier_bpf::attached_remote(pin_dir).is_empty() {
        return Ok(0);
    }
    let _lock = lock_pins(settings)?;
    let publisher = RemotePublisher::open(pin_dir).map_err(bpf_err("open the remote map"))?;
    if !publisher.is_empty() {
        return Ok(0);
    }
    let links = pier_bpf::attached_remote(pin_dir);
    for &(hook, index) in &links {
        pier_bpf::unpin_remote_link(pin_dir, hook, index)
            .map_err(bpf_err("detach the remote programs"))?;
    }
    Ok(links.len())
}
