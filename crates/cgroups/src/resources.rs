//! `linux.resources` → the right hierarchy for each controller.
//!
//! Theory: every resource group goes to the v1 hierarchy carrying its controller when there is
//! one (v1 hosts, and hybrid hosts for everything mounted as v1); otherwise to the cgroup2
//! directory if the controller is available there (pure v2, or e.g. hugetlb in the unified tree
//! of this hybrid host, enabled on demand along the path); otherwise the spec asks for something
//! this host cannot do and that is an error naming the controller. A group that sets nothing
//! needs no controller. Device rules go to v1 devices, else to a cgroup2 BPF program
//! (devices.rs). `unified` is written to the cgroup2 directory verbatim.
//!
//! Privileges: root (or a delegated tree). Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::fsio::{has, read, write};
use crate::setup::{enable_v2, has_word};
use crate::{devices, v1, v2, Cgroup, Dir, Error};
use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxMemory, LinuxNetwork, LinuxResources};
use std::path::Path;

/// Where one controller's files are.
enum Target<'a> {
    V1(&'a Path),
    V2(&'a Path),
}

/// pids.max, which has the same name and syntax in v1 and v2 (`max` for a limit ≤ 0).
fn pids_max(dir: &Path, limit: i64) -> Result<(), Error> {
    let value = if limit > 0 {
        limit.to_string()
    } else {
        "max".to_string()
    };
    write(dir, "pids.max", &value)
}

/// Applies every group `res` sets.
pub fn apply(cg: &Cgroup, res: &LinuxResources) -> Result<(), Error> {
    if let Some(cpu) = res.cpu() {
        if wants_cpu(cpu) {
            match pick(cg, "cpu", "linux.resources.cpu")? {
                Target::V1(d) => v1::cpu(d, cpu)?,
                Target::V2(d) => v2::cpu(d, cpu)?,
            }
        }
        if cpu.cpus().as_ref().is_some_and(|s| !s.is_empty())
            || cpu.mems().as_ref().is_some_and(|s| !s.is_empty())
        {
            match pick(cg, "cpuset", "linux.resources.cpu.cpus/mems")? {
                Target::V1(d) => v1::cpuset(d, cpu)?,
                Target::V2(d) => v2::cpuset(d, cpu)?,
            }
        }
    }
    if let Some(mem) = res.memory().as_ref().filter(|m| wants_memory(m)) {
        match pick(cg, "memory", "linux.resources.memory")? {
            Target::V1(d) => v1::memory(d, mem)?,
            Target::V2(d) => v2::memory(d, mem)?,
        }
    }
    if let Some(pids) = res.pids() {
        let (Target::V1(d) | Target::V2(d)) = pick(cg, "pids", "linux.resources.pids")?;
        pids_max(d, pids.limit())?;
    }
    if let Some(io) = res.block_io().as_ref().filter(|b| wants_io(b)) {
        match pick(cg, "blkio", "linux.resources.blockIO")? {
            Target::V1(d) => v1::blkio(d, io)?,
            Target::V2(d) => v2::io(d, io)?,
        }
    }
    if let Some(limits) = res.hugepage_limits().as_ref().filter(|l| !l.is_empty()) {
        match pick(cg, "hugetlb", "linux.resources.hugepageLimits")? {
            Target::V1(d) => v1::hugetlb(d, limits)?,
            Target::V2(d) => v2::hugetlb(d, limits)?,
        }
    }
    if let Some(rules) = res.devices().as_ref().filter(|r| !r.is_empty()) {
        match (cg.v1_dir("devices"), cg.v2_dir()) {
            (Some(d), _) => v1::devices(&d.path, rules)?,
            (None, Some(d)) => devices::apply(&d.path, rules)?,
            (None, None) => devices::check_unenforced(rules)?,
        }
    }
    if let Some(net) = res.network() {
        network(cg, net)?;
    }
    if res.rdma().as_ref().is_some_and(|r| !r.is_empty()) {
        log::warn!("linux.resources.rdma is not supported by pier and is ignored");
    }
    if let Some(map) = res.unified().as_ref().filter(|m| !m.is_empty()) {
        let dir = cg.v2_dir().ok_or(Error::ControllerMissing {
            controller: "cgroup2",
            what: "linux.resources.unified",
        })?;
        v2::unified(&dir.path, map)?;
    }
    Ok(())
}

/// The v1 directory with `controller`, else the cgroup2 directory where it is (or can be
/// made) available.
fn pick<'a>(
    cg: &'a Cgroup,
    controller: &'static str,
    what: &'static str,
) -> Result<Target<'a>, Error> {
    if let Some(d) = cg.v1_dir(controller) {
        return Ok(Target::V1(&d.path));
    }
    let missing = Error::ControllerMissing { controller, what };
    let Some(d) = cg.v2_dir() else {
        return Err(missing);
    };
    if !has_word(&read(&d.mountpoint, "cgroup.controllers")?, controller) {
        return Err(missing);
    }
    enable_v2(&d.mountpoint, &d.path, &[controller])?;
    Ok(Target::V2(&d.path))
}

fn wants_cpu(cpu: &LinuxCpu) -> bool {
    cpu.shares().is_some_and(|v| v != 0)
        || cpu.quota().is_some_and(|v| v != 0)
        || cpu.period().is_some_and(|v| v != 0)
        || cpu.burst().is_some()
        || cpu.idle().is_some()
        || cpu.realtime_runtime().is_some_and(|v| v != 0)
        || cpu.realtime_period().is_some_and(|v| v != 0)
}

fn wants_memory(m: &LinuxMemory) -> bool {
    m.limit().is_some()
        || m.reservation().is_some()
        || m.swap().is_some()
        || m.swappiness().is_some()
        || m.disable_oom_killer() == Some(true)
        || m.kernel_tcp().is_some()
}

fn wants_io(b: &LinuxBlockIo) -> bool {
    let some = |l: &Option<Vec<_>>| l.as_ref().is_some_and(|v: &Vec<_>| !v.is_empty());
    b.weight().is_some_and(|w| w != 0)
        || b.leaf_weight().is_some_and(|w| w != 0)
        || b.weight_device().as_ref().is_some_and(|v| !v.is_empty())
        || some(b.throttle_read_bps_device())
        || some(b.throttle_write_bps_device())
        || some(b.throttle_read_iops_device())
        || some(b.throttle_write_iops_device())
}

/// net_cls.classid and net_prio.ifpriomap (v1 only; cgroup2 has no equivalent).
fn network(cg: &Cgroup, net: &LinuxNetwork) -> Result<(), Error> {
    if let Some(id) = net.class_id() {
        let d: &Dir = cg.v1_dir("net_cls").ok_or(Error::ControllerMissing {
            controller: "net_cls",
            what: "linux.resources.network.classID",
        })?;
        write(&d.path, "net_cls.classid", &id.to_string())?;
    }
    for prio in net.priorities().iter().flatten() {
        let d = cg
            .v1_dir("net_prio")
            .filter(|d| has(&d.path, "net_prio.ifpriomap"))
            .ok_or(Error::ControllerMissing {
                controller: "net_prio",
                what: "linux.resources.network.priorities",
            })?;
        write(
            &d.path,
            "net_prio.ifpriomap",
            &format!("{} {}", prio.name(), prio.priority()),
        )?;
    }
    Ok(())
}
