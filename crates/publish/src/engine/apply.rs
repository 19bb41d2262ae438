//! Making and removing entries, whichever engine planned them: the entries describe themselves
//! (map entry, nft element, remote map entry, proxy child), so one apply and one remove serve
//! every engine, and crash recovery needs no engine at all.
//!
//! Theory of operation: apply makes the kinds in a fixed order (map entries, then nft
//! elements in one transaction, then their tc twins in the remote map, then proxy children)
//! and, when a step fails, removes what the earlier steps made before returning the error: all
//! or nothing. Remove goes through every
//! kind even when one fails and reports every failure.
//!
//! Privileges: those of each kind (see ebpf.rs, nat.rs, proxy.rs). Tests: priv_engines*.rs.
use std::net::SocketAddr;

use super::{ebpf, nat, proxy, remote, Entry, PublishError, Settings, Target};
use crate::Protocol;

type Bpf = (Protocol, SocketAddr, SocketAddr);

fn bpf_entries(entries: &[Entry]) -> Vec<Bpf> {
    entries
        .iter()
        .filter_map(|e| match *e {
            Entry::Bpf {
                protocol,
                host,
                target,
            } => Some((protocol, host, target)),
            _ => None,
        })
        .collect()
}

/// Makes `entries` for `target`, all or none; returns them with proxy pids filled in.
pub(crate) fn apply(
    settings: &Settings,
    target: &Target,
    entries: &[Entry],
) -> Result<Vec<Entry>, PublishError> {
    let bpf = bpf_entries(entries);
    ebpf::apply_entries(settings, &target.container_id, &bpf)?;
    let nft: Vec<_> = entries.iter().filter_map(nat::mapping).collect();
    if let Err(e) = nat::apply_entries(target, &nft) {
        let _ = ebpf::remove_entries(settings, &bpf);
        return Err(e);
    }
    let tc: Vec<_> = entries.iter().filter_map(remote::remote).collect();
    if let Err(e) = remote::apply_entries(settings, target, &tc) {
        let _ = nat::remove_entries(&nft);
        let _ = ebpf::remove_entries(settings, &bpf);
        return Err(e);
    }
    let mut made = Vec::with_capacity(entries.len());
    for entry in entries {
        let Entry::Proxy {
            protocol,
            host,
            target: to,
            ..
        } = *entry
        else {
            made.push(entry.clone());
            continue;
        };
        match proxy::spawn(settings, &target.container_id, protocol, host, to) {
            Ok((pid, started)) => made.push(Entry::Proxy {
                protocol,
                host,
                target: to,
                pid: Some(pid),
                start_time: Some(started),
            }),
            Err(e) => {
                let _ = remove(settings, &made);
                let _ = remote::remove_entries(settings, &tc);
                let _ = nat::remove_entries(&nft);
                let _ = ebpf::remove_entries(settings, &bpf);
                return Err(e);
            }
        }
    }
    Ok(made)
}

/// Removes whatever of `entries` exists; keeps going past failures and reports them all.
pub(crate) fn remove(settings: &Settings, entries: &[Entry]) -> Result<(), PublishError> {
    let mut errors = Vec::new();
    for entry in entries {
        if let Entry::Proxy {
            protocol,
            host,
            target,
            pid,
            start_time,
        } = *entry
        {
            let recorded = pid.zip(start_time);
            if let Err(e) = proxy::stop(settings, protocol, host, target, recorded) {
                errors.push(e);
            }
        }
    }
    let tc: Vec<_> = entries.iter().filter_map(remote::remote).collect();
    errors.extend(remote::remove_entries(settings, &tc).err());
    let nft: Vec<_> = entries.iter().filter_map(nat::mapping).collect();
    errors.extend(nat::remove_entries(&nft).err());
    errors.extend(ebpf::remove_entries(settings, &bpf_entries(entries)).err());
    match errors.len() {
        0 => Ok(()),
        1 => Err(errors.remove(0)),
        _ => Err(PublishError::Teardown(errors)),
    }
}
