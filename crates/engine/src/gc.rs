//! Teardown of one container and the collection of what crashed commands left behind.
//!
//! Theory of operation: [`teardown`] removes, from a record, every object it names, each step
//! idempotent and attempted even when an earlier one failed: the pier-runtime container
//! (`delete --force` SIGKILLs the init and anything left in the cgroup, then removes the
//! cgroup and the runtime state), the published ports, the ebpf client entry of its network
//! namespace
//! (kept by a joiner leaving the namespace of the container it joined: clients.rs), the network
//! attachments (the leases; the links go with the network namespace once its processes are
//! gone, or are deleted here when a joiner still holds it: its network goes with its owner, as
//! in Docker, see `unplug`), the root filesystem (overlay unmounted, layers
//! removed), a `-t` console socket. What it removed leaves
//! the record; the failures are returned. The monitor calls it after the exit; `rm` and `stop`
//! call it for a container whose monitor is dead; [`collect`] calls it for every container
//! whose responsible process (the foreground `pier run` or the monitor) is dead while the
//! record is not torn down, then marks the container exited (its exit code unknown), or
//! removes it entirely when it never started or was `--rm`. `collect` also removes container
//! directories without a record and names without a container (`Store::sweep`), pier-runtime
//! state directories without a record, and (when something was found, or always for
//! `pier gc`) IPAM leases of ids that have no record; `pier gc` also removes ebpf client
//! entries of namespaces that are gone, an older pier's unused pins, and detaches the
//! remote-client tc programs when nothing is published through them. It runs at every
//! `Engine::open`: one readdir and one small JSON read per container.
//! Privileges: root. Tests: crates/engine/tests/priv_engine.rs, crates/pier/tests/engine_crash.rs.
use std::collections::HashSet;

use crate::engine::{Engine, EngineError, GcReport};
use crate::store::{Record, Status};

/// Removes every object the record names; returns the failures (all steps are attempted).
pub(crate) fn teardown(engine: &Engine, record: &mut Record) -> Vec<String> {
    let mut errors = Vec::new();
    let mut processes_gone = true;
    if let Some(id) = &record.runtime_id {
        match engine.runtime.delete(id, true) {
            Ok(()) | Err(pier_runtime::Error::NotExist(_)) => {}
            Err(e) => {
                processes_gone = false;
                errors.push(format!("runtime delete: {e}"));
            }
        }
    }
    if !record.publish_entries.is_empty() {
        // The entries describe themselves: no engine is made (no program loaded, no table).
        let removed = pier_publish::engine::remove(&engine.publish, &record.publish_entries);
        match removed {
            Ok(()) => record.publish_entries.clear(),
            Err(e) => errors.push(format!("remove published ports: {e}")),
        }
    }
    // Another live container (a `container:` joiner, or the one this joiner joined) still uses
    // the namespace.
    let shared = record.client_cookie.is_some() && engine.client_shared(record);
    if shared && record.attachments.is_empty() {
        // A joiner leaves: the entry is its namespace owner's.
        record.client_cookie = None;
    }
    if let Some(cookie) = record.client_cookie {
        match pier_publish::engine::unregister_client(&engine.publish, cookie) {
            Ok(()) => record.client_cookie = None,
            Err(e) => errors.push(format!("unregister the ebpf client: {e}")),
        }
    }
    // The owner leaving takes the namespace off its networks even while joiners use it, as
    // Docker and Podman do: its links go (the joiners keep `lo`) with its leases, so no address
    // is ever held by two containers; its ebpf entry went above.
    let links_gone = processes_gone && !shared;
    record
        .attachments
        .retain(|attachment| match unplug(engine, attachment, links_gone) {
            Ok(()) => false,
            Err(e) => {
                errors.push(format!("detach from network {}: {e}", attachment.network));
                true
            }
        });
    if let Err(e) = crate::rootfs::release(&engine.store.dir(&record.id)) {
        errors.push(format!("release root filesystem: {e}"));
    }
    if record.config.tty {
        // The console socket of a `run -t` killed before it was received and removed.
        let _ = std::fs::remove_file(crate::tty::socket_path(&record.id[..12]));
    }
    errors
}

/// Takes a container off a network. Once its processes are gone and no joiner holds its network
/// namespace, the kernel deletes its links with the namespace, so only the leases need
/// releasing (`links_gone`); deleting a veth ourselves waits for RCU grace periods (about 20 ms,
/// most of a bridged `run --rm`).
fn unplug(
    engine: &Engine,
    attachment: &crate::network::Attachment,
    links_gone: bool,
) -> Result<(), crate::network::NetworkError> {
    match links_gone {
        true => engine.networks.release(attachment),
        false => engine.networks.detach(attachment),
    }
}

/// Tears down and settles a container whose responsible process died: marked exited, or
/// removed when it never started or was `--rm`. The caller holds the container's lock.
pub(crate) fn settle_orphan(engine: &Engine, record: &mut Record) -> Result<(), EngineError> {
    let errors = teardown(engine, record);
    if !errors.is_empty() {
        engine.store.save(record)?;
        return Err(EngineError::Teardown {
            id: record.id.clone(),
            errors: errors.join("; "),
        });
    }
    if record.status == Status::Creating || record.config.rm {
        return Ok(engine.store.remove(&record.id, &record.name)?);
    }
    if record.status != Status::Exited {
        record.status = Status::Exited;
        record.finished = Some(pier_runtime::state::rfc3339_now());
    }
    record.torn_down = true;
    Ok(engine.store.save(record)?)
}

/// Finds and removes what crashed commands left; `full` (`pier gc`) also reclaims leases.
pub(crate) fn collect(engine: &Engine, full: bool) -> Result<GcReport, EngineError> {
    let mut report = GcReport {
        removed: engine.store.sweep()?,
    };
    for id in engine.store.ids()? {
        let Ok(record) = engine.store.load(&id) else {
            continue;
        };
        if settled(&record) {
            continue;
        }
        // Another command may be settling it right now: leave it to that one.
        let Some(_lock) = engine.store.lock_container(&id, false) else {
            continue;
        };
        let Ok(mut record) = engine.store.load(&id) else {
            continue;
        };
        if settled(&record) {
            continue;
        }
        report
            .removed
            .push(format!("container {} ({})", record.name, id));
        if let Err(e) = settle_orphan(engine, &mut record) {
            report
                .removed
                .push(format!("container {id}: incomplete: {e}"));
        }
    }
    if full || !report.removed.is_empty() {
        sweep_runtime(engine, &mut report)?;
        reclaim_leases(engine, &mut report)?;
    }
    if full {
        sweep_bpf(engine, &mut report);
    }
    Ok(report)
}

/// Nothing to do: its lifecycle runs, or it was torn down.
fn settled(record: &Record) -> bool {
    record.responsible_alive() || (record.status == Status::Exited && record.torn_down)
}

/// pier-runtime containers (state directories) whose engine record is gone.
fn sweep_runtime(engine: &Engine, report: &mut GcReport) -> Result<(), EngineError> {
    let known: HashSet<String> = engine.store.ids()?.into_iter().collect();
    let states = engine
        .runtime
        .list()
        .map_err(|source| EngineError::Runtime {
            step: "list runtime containers",
            source,
        })?;
    for state in states.into_iter().filter(|s| !known.contains(&s.id)) {
        match engine.runtime.delete(&state.id, true) {
            Ok(()) => report.removed.push(format!("runtime state {}", state.id)),
            Err(e) => report
                .removed
                .push(format!("runtime state {}: {e}", state.id)),
        }
    }
    Ok(())
}

/// ebpf client entries of namespaces that are gone (a container's init lives in its namespace,
/// so whatever record it had, a gone namespace is a gone container), an older pier's pins
/// once nothing is published in them (the next publish loads the current programs), and the
/// remote-client tc programs' links when nothing is published through them. What
/// fails is reported, not fatal: the rest of gc stands.
fn sweep_bpf(engine: &Engine, report: &mut GcReport) {
    match pier_publish::engine::sweep_clients(&engine.publish) {
        Ok(cookies) => report.removed.extend(
            cookies
                .iter()
                .map(|c| format!("ebpf client entry of netns cookie {c}")),
        ),
        Err(e) => report.removed.push(format!("ebpf client entries: {e}")),
    }
    match pier_publish::engine::retire_old_pins(&engine.publish) {
        Ok(false) => {}
        Ok(true) => report.removed.push(format!(
            "an older pier's ebpf pins in {} (reloaded at the next publish)",
            engine.publish.bpf_pin_dir.display()
        )),
        Err(e) => report
            .removed
            .push(format!("an older pier's ebpf pins: {e}")),
    }
    match pier_publish::engine::detach_idle_remote(&engine.publish) {
        Ok(0) => {}
        Ok(n) => report.removed.push(format!(
            "{n} tc link(s) of the remote-client programs, nothing being published through them"
        )),
        Err(e) => report
            .removed
            .push(format!("the remote-client tc links: {e}")),
    }
}

/// Leases of ids without a container. Under the store's lock: a `run` registers (under it)
/// before it plans its lease, so every lease being made belongs to an id listed here.
fn reclaim_leases(engine: &Engine, report: &mut GcReport) -> Result<(), EngineError> {
    let _lock = engine.store.lock()?;
    let live = engine.store.ids()?;
    let released = engine
        .networks
        .reclaim(&live)
        .map_err(|source| EngineError::Network {
            step: "reclaim leases",
            source,
        })?;
    for (id, ip) in released {
        report.removed.push(format!("lease {ip} of {id}"));
    }
    Ok(())
}
