//! The engine's side of the ebpf programs' client namespaces (pier-publish's clients.rs): which
//! containers are registered, when, and when their entries go.
//!
//! Theory of operation: a bridged container's netns cookie is recorded at start whether or not
//! the programs are pinned (reading it fails the start only when they are), and registered at
//! once when they serve this namespace. Pins can appear after a container started: the first
//! `-p` on the host loads them, `pier gc` retires an older pier's and the next publish reloads
//! them. So every publish compares the pinned client map's inode with the one this state
//! directory last registered for (`<state>/ebpf-clients`, a symlink whose target is that inode:
//! one stat and one readlink, nothing else, while the pins stay the same); when they differ it
//! registers every live container whose record has a cookie, then moves the mark. A start that
//! found no pins had saved its cookie before looking, and a registration pass runs only once the
//! pins exist, so one of the two registers it (both doing it is harmless). A container of another
//! state directory sharing the pins is registered at that directory's next publish.
//! A `--network container:` joiner records the cookie of the namespace it joins, after creating
//! `<state>/netns-joiners` (kept: it only says joiners may exist). A joiner's teardown keeps the
//! cookie's entry while another live container of the state directory records it, so a joiner
//! leaving does not take the ebpf path from the container it joined; it reads the other records
//! only when that file exists (otherwise one stat). The container that owns the namespace's
//! attachments always unregisters it: its links and leases go with it, joiners or not (gc.rs),
//! as Docker and Podman take a joined namespace off its networks when its owner stops.
//! `pier gc`'s sweep removes an entry only once no task is in the namespace.
//! Privileges: root (setns, bpffs). Tests: crates/pier/tests/engine_clients.rs.
use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use crate::engine::{io_error, Engine, EngineError};
use crate::network::{Driver, Network};
use crate::store::Record;
use pier_publish::engine::{self as publish, ClientNetns, PublishError};

/// The mark of the client map this state directory registered its containers with.
const MARK: &str = "ebpf-clients";
/// Exists once a `container:` joiner recorded a cookie in this state directory.
const JOINERS: &str = "netns-joiners";

fn publish_err(step: &'static str) -> impl Fn(PublishError) -> EngineError {
    move |source| EngineError::Publish { step, source }
}

/// The namespace of the process `pid` as a client.
fn netns_of(pid: i32) -> Result<ClientNetns, EngineError> {
    let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
    let netns = File::open(&path).map_err(|e| io_error("open", &path, e))?;
    publish::client_netns(netns.as_fd()).map_err(publish_err("read the container's netns cookie"))
}

/// The addresses (with prefix) a record's attachments hold.
fn subnets(record: &Record) -> Vec<(IpAddr, u8)> {
    let addresses = record.attachments.iter();
    addresses
        .flat_map(|a| a.addresses.iter().copied())
        .collect()
}

impl Engine {
    /// Records a bridged container's netns cookie, then registers it as a client of the ebpf
    /// programs if they serve this namespace, so its connections to ports published by
    /// containers on the same network go straight to them (see the file header when they do
    /// not yet).
    pub(crate) fn register_client(
        &self,
        record: &mut Record,
        network: Option<&Network>,
        pid: i32,
    ) -> Result<(), EngineError> {
        if !network.is_some_and(|n| n.driver == Driver::Bridge) {
            return Ok(());
        }
        let client = match netns_of(pid) {
            Ok(client) => client,
            Err(_) if !publish::serves_clients(&self.publish) => return Ok(()),
            Err(e) => return Err(e),
        };
        record.client_cookie = Some(client.cookie);
        self.store.save(record)?;
        publish::register_client(&self.publish, client, &subnets(record))
            .map_err(publish_err("register the container with the ebpf programs"))?;
        Ok(())
    }

    /// After a publish: when the pinned client map is not the one this state directory last
    /// registered with, registers every live container that recorded a cookie. A failure is
    /// logged, not fatal to the publishing container; the mark stays, so the next one retries.
    pub(crate) fn register_recorded_clients(&self) {
        let Some(map) = publish::clients_map_inode(&self.publish) else {
            return;
        };
        let mark = self.paths.state_dir.join(MARK);
        if marked(&mark, map) {
            return;
        }
        match self.register_live_clients() {
            Ok(()) => {
                if let Err(e) = write_mark(&mark, map) {
                    log::warn!("mark {}: {e}", mark.display());
                }
            }
            Err(e) => log::warn!("register running containers with the ebpf programs: {e}"),
        }
    }

    /// Registers the namespace of every live container with a recorded cookie and addresses
    /// (a joiner has none: its namespace goes in through the container it joined), checked to
    /// be still that namespace.
    fn register_live_clients(&self) -> Result<(), EngineError> {
        let mut by_cookie: BTreeMap<u64, (i32, Vec<(IpAddr, u8)>)> = BTreeMap::new();
        for record in self.store.list()? {
            let (Some(cookie), Some(init)) = (record.client_cookie, record.init) else {
                continue;
            };
            if init.alive() && !record.torn_down && !record.attachments.is_empty() {
                let entry = by_cookie.entry(cookie).or_insert((init.pid, Vec::new()));
                entry.1.extend(subnets(&record));
            }
        }
        for (cookie, (pid, subnets)) in by_cookie {
            match netns_of(pid) {
                Ok(client) if client.cookie == cookie => {
                    publish::register_client(&self.publish, client, &subnets)
                        .map_err(publish_err("register a running container"))?;
                }
                // It exited meanwhile: nothing to register.
                _ => {}
            }
        }
        Ok(())
    }

    /// Notes that a `container:` joiner records a cookie, before its init joins: from then on
    /// teardown looks for other users of a namespace (without one, a stat is all it costs).
    pub(crate) fn note_joiner(&self) -> Result<(), EngineError> {
        let path = self.paths.state_dir.join(JOINERS);
        let made = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        made.map(drop).map_err(|e| io_error("create", &path, e))
    }

    /// Whether another live container records `record`'s netns cookie (a `container:` joiner,
    /// or the container it joined). A joiner leaving keeps the entry then; the owner leaving
    /// deletes the namespace's links instead of leaving them to the kernel (gc.rs).
    pub(crate) fn client_shared(&self, record: &Record) -> bool {
        if !self.paths.state_dir.join(JOINERS).exists() {
            return false;
        }
        let Ok(records) = self.store.list() else {
            // Unknown: keep the entry (gc's sweep removes it once the namespace is gone).
            return true;
        };
        records.iter().any(|other| {
            other.id != record.id
                && other.client_cookie == record.client_cookie
                && other.init.is_some_and(|p| p.alive())
        })
    }
}

/// Whether the mark points at `inode`.
fn marked(mark: &Path, inode: u64) -> bool {
    std::fs::read_link(mark).is_ok_and(|m| m == Path::new(&inode.to_string()))
}

/// Points the mark at `inode`, atomically (a symlink renamed over the old one).
fn write_mark(mark: &Path, inode: u64) -> std::io::Result<()> {
    let tmp = mark.with_extension(format!("tmp{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(inode.to_string(), &tmp)?;
    std::fs::rename(&tmp, mark)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_follows_the_latest_client_map() {
        let dir = tempfile::tempdir().unwrap();
        let mark = dir.path().join(MARK);
        assert!(!marked(&mark, 7), "no mark yet");
        write_mark(&mark, 7).unwrap();
        assert!(marked(&mark, 7));
        write_mark(&mark, 8).unwrap();
        assert!(marked(&mark, 8) && !marked(&mark, 7), "replaced, not added");
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temporary link left");
    }
}
