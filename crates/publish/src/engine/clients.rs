//! The ebpf engine's client namespaces: containers whose own connections to published ports the
//! programs redirect, when the target is on the container's own network.
//!
//! Theory of operation: the programs know a container by its network namespace's cookie, an
//! entry of pier-bpf's pinned `pier_clients` map valued with the networks (address + prefix) the
//! container is on. The caller (the engine's run) learns the cookie with [`client_netns`] (a
//! socket made inside the namespace answers SO_NETNS_COOKIE), records it, then
//! [`register_client`]s it; teardown [`unregister_client`]s it (a missing entry or map is fine).
//! [`clients_map_inode`] tells a caller that the pins were made again since it last registered
//! its containers (the engine registers those that started without pins: its clients.rs).
//! Registering is skipped (`Ok(false)`) unless the programs are pinned in the current layout and
//! serve the namespace pier runs in: with no programs there is nothing to redirect, pins of an
//! older pier lack the map (see `ebpf::ensure`), and pins serving another namespace would
//! rewrite this container towards that namespace's targets. [`sweep_clients`] (`pier gc`)
//! removes entries whose namespace no task is in any more: a container's init lives in its
//! namespace as long as the container does. Namespace inodes are reused, so a stale entry can
//! survive until the reusing namespace ends too; its cookie, never reused, matches nothing.
//!
//! Privileges: root (bpffs, setns). Tests: crates/bpf/tests/priv_redirect.rs (the programs),
//! crates/publish/tests/priv_engines.rs (the matrix), crates/pier/tests/engine_crash.rs (gc).
use std::collections::HashSet;
use std::net::IpAddr;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use nix::sys::socket::{socket, AddressFamily, SockFlag, SockType};
use pier_bpf::{Client, Clients, Layout};

use super::{ebpf, PublishError, Settings};

/// A container's network namespace as the programs and gc know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientNetns {
    /// SO_NETNS_COOKIE: unique while the kernel runs.
    pub cookie: u64,
    /// The nsfs inode (`/proc/PID/ns/net`).
    pub inode: u64,
}

fn bpf_err(step: &'static str) -> impl Fn(pier_bpf::Error) -> PublishError {
    move |source| PublishError::Bpf { step, source }
}

/// The namespace `netns` (an fd of `/proc/PID/ns/net`) as a client.
pub fn client_netns(netns: BorrowedFd<'_>) -> Result<ClientNetns, PublishError> {
    let unavailable = |why: String| PublishError::Unavailable {
        engine: "ebpf",
        why: format!("reading a container's netns cookie: {why}"),
    };
    let cookie = pier_net::netns::run_in(netns, "container", || {
        let sock = socket(
            AddressFamily::Inet,
            SockType::Datagram,
            SockFlag::SOCK_CLOEXEC,
            None,
        )?;
        pier_sys::publish::netns_cookie(sock.as_fd())
    })
    .map_err(|e| unavailable(e.to_string()))?
    .map_err(|e| unavailable(e.to_string()))?;
    let stat = nix::sys::stat::fstat(netns).map_err(|e| unavailable(e.to_string()))?;
    Ok(ClientNetns {
        cookie,
        inode: stat.st_ino,
    })
}

/// Whether the pins under the settings serve containers of the namespace pier runs in.
pub fn serves_clients(settings: &Settings) -> bool {
    let pin_dir = &settings.bpf_pin_dir;
    pier_bpf::layout(pin_dir) == Layout::Current
        && ebpf::own_netns_cookie().is_ok_and(|own| ebpf::serves(pin_dir, own).is_ok())
}

/// Registers the container namespace `netns` on `subnets` (address, prefix); `Ok(false)` when
/// the programs cannot serve containers here (see the file header), nothing made.
pub fn register_client(
    settings: &Settings,
    netns: ClientNetns,
    subnets: &[(IpAddr, u8)],
) -> Result<bool, PublishError> {
    if !serves_clients(settings) {
        return Ok(false);
    }
    let clients = Clients::open(&settings.bpf_pin_dir).map_err(bpf_err("open the client map"))?;
    let client = Client {
        cookie: netns.cookie,
        netns_inode: netns.inode,
        subnets: subnets.to_vec(),
    };
    clients
        .register(&client)
        .map_err(bpf_err("register a container as a client"))?;
    Ok(true)
}

/// The inode of the pinned client map, which changes whenever the pins are made again; `None`
/// without one. One stat: callers check it on every publish.
pub fn clients_map_inode(settings: &Settings) -> Option<u64> {
    let map = settings.bpf_pin_dir.join(pier_bpf::CLIENTS_MAP);
    std::fs::metadata(map).ok().map(|m| m.ino())
}

/// Removes the client `cookie` (idempotent; no programs or an old layout: nothing to do).
pub fn unregister_client(settings: &Settings, cookie: u64) -> Result<(), PublishError> {
    let pin_dir = &settings.bpf_pin_dir;
    if pier_bpf::layout(pin_dir) != Layout::Current {
        return Ok(());
    }
    let clients = Clients::open(pin_dir).map_err(bpf_err("open the client map"))?;
    clients
        .unregister(cookie)
        .map_err(bpf_err("unregister a container"))
}

/// Removes the entries of namespaces no task is in any more; returns their cookies.
pub fn sweep_clients(settings: &Settings) -> Result<Vec<u64>, PublishError> {
    let pin_dir = &settings.bpf_pin_dir;
    if pier_bpf::layout(pin_dir) != Layout::Current {
        return Ok(Vec::new());
    }
    let clients = Clients::open(pin_dir).map_err(bpf_err("open the client map"))?;
    let listed = clients.list().map_err(bpf_err("list clients"))?;
    let live = live_netns_inodes(Path::new("/proc"))?;
    let mut removed = Vec::new();
    for client in listed.iter().filter(|c| !live.contains(&c.netns_inode)) {
        clients
            .unregister(client.cookie)
            .map_err(bpf_err("unregister a gone namespace"))?;
        removed.push(client.cookie);
    }
    Ok(removed)
}

/// The inodes of the network namespaces of every task under `proc` (`/proc/*/task/*/ns/net`).
fn live_netns_inodes(proc: &Path) -> Result<HashSet<u64>, PublishError> {
    let read = |path: &Path| {
        std::fs::read_dir(path).map_err(|source| PublishError::Read {
            path: path.to_owned(),
            source,
        })
    };
    let mut live = HashSet::new();
    for process in read(proc)?.flatten() {
        if !process
            .file_name()
            .to_string_lossy()
            .starts_with(|c: char| c.is_ascii_digit())
        {
            continue;
        }
        // A process that exits meanwhile has no tasks left to list.
        let Ok(tasks) = read(&process.path().join("task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let link = std::fs::read_link(task.path().join("ns/net"));
            live.extend(link.ok().and_then(|l| netns_inode(&l.to_string_lossy())));
        }
    }
    Ok(live)
}

/// The inode in an nsfs link text, `net:[4026531840]`.
fn netns_inode(link: &str) -> Option<u64> {
    link.strip_prefix("net:[")?.strip_suffix(']')?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_namespace_is_live_and_links_parse() {
        assert_eq!(netns_inode("net:[4026531840]"), Some(4026531840));
        assert_eq!(netns_inode("mnt:[4026531840]"), None);
        let own = std::fs::metadata("/proc/self/ns/net").unwrap().ino();
        assert!(live_netns_inodes(Path::new("/proc"))
            .unwrap()
            .contains(&own));
    }
}
