//! Resource limits on cgroup v1 hierarchies, one function per controller.
//!
//! Each function gets the container's directory in the hierarchy carrying that controller and
//! writes only what the spec sets. Order matters in two places: the cpu period before the quota
//! (and the realtime period before the runtime), and memory vs memory+swap, where the kernel
//! insists on `memsw >= limit` after every single write, so the limit that grows is written
//! first. Device rules are written in spec order to devices.allow / devices.deny.
//!
//! Privileges: root (or a delegated tree). Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::convert::{device_rule, v1_limit};
use crate::fsio::{has, read, write};
use crate::Error;
use oci_spec::runtime::{
    LinuxBlockIo, LinuxCpu, LinuxDeviceCgroup, LinuxDeviceType, LinuxHugepageLimit, LinuxMemory,
};
use std::path::Path;

/// cpu.shares, CFS period/quota/burst, realtime period/runtime, idle.
pub fn cpu(dir: &Path, cpu: &LinuxCpu) -> Result<(), Error> {
    if let Some(shares) = cpu.shares().filter(|s| *s != 0) {
        write(dir, "cpu.shares", &shares.to_string())?;
    }
    if let Some(period) = cpu.period().filter(|p| *p != 0) {
        write(dir, "cpu.cfs_period_us", &period.to_string())?;
    }
    if let Some(quota) = cpu.quota().filter(|q| *q != 0) {
        write(dir, "cpu.cfs_quota_us", &v1_limit(quota))?;
    }
    if let Some(burst) = cpu.burst() {
        write(dir, "cpu.cfs_burst_us", &burst.to_string())?;
    }
    if let Some(period) = cpu.realtime_period().filter(|p| *p != 0) {
        write(dir, "cpu.rt_period_us", &period.to_string())?;
    }
    if let Some(runtime) = cpu.realtime_runtime().filter(|r| *r != 0) {
        write(dir, "cpu.rt_runtime_us", &runtime.to_string())?;
    }
    if let Some(idle) = cpu.idle() {
        write(dir, "cpu.idle", &idle.to_string())?;
    }
    Ok(())
}

/// cpuset.cpus and cpuset.mems.
pub fn cpuset(dir: &Path, cpu: &LinuxCpu) -> Result<(), Error> {
    if let Some(cpus) = cpu.cpus().as_deref().filter(|s| !s.is_empty()) {
        write(dir, "cpuset.cpus", cpus)?;
    }
    if let Some(mems) = cpu.mems().as_deref().filter(|s| !s.is_empty()) {
        write(dir, "cpuset.mems", mems)?;
    }
    Ok(())
}

/// Limit, memory+swap, reservation, swappiness, OOM killer, kernel TCP memory.
pub fn memory(dir: &Path, mem: &LinuxMemory) -> Result<(), Error> {
    limits(
        dir,
        mem.limit().filter(|l| *l != 0),
        mem.swap().filter(|s| *s != 0),
    )?;
    if let Some(reservation) = mem.reservation().filter(|r| *r != 0) {
        write(dir, "memory.soft_limit_in_bytes", &v1_limit(reservation))?;
    }
    if let Some(swappiness) = mem.swappiness() {
        if swappiness > 100 {
            return Err(Error::InvalidValue {
                field: "memory.swappiness",
                value: swappiness.to_string(),
                reason: "must be between 0 and 100",
            });
        }
        write(dir, "memory.swappiness", &swappiness.to_string())?;
    }
    if mem.disable_oom_killer() == Some(true) {
        write(dir, "memory.oom_control", "1")?;
    }
    if let Some(tcp) = mem.kernel_tcp().filter(|t| *t != 0) {
        write(dir, "memory.kmem.tcp.limit_in_bytes", &v1_limit(tcp))?;
    }
    #[allow(deprecated)]
    if mem.kernel().is_some() {
        log::warn!("linux.resources.memory.kernel is deprecated and ignored");
    }
    Ok(())
}

/// memory.limit_in_bytes and memory.memsw.limit_in_bytes in the order the kernel accepts.
fn limits(dir: &Path, limit: Option<i64>, swap: Option<i64>) -> Result<(), Error> {
    const MEMSW: &str = "memory.memsw.limit_in_bytes";
    let write_limit = || {
        limit.map_or(Ok(()), |l| {
            write(dir, "memory.limit_in_bytes", &v1_limit(l))
        })
    };
    let accounted = has(dir, MEMSW);
    // Unlimited memory without a swap value means unlimited memory+swap too (as runc does).
    let swap = swap.or(limit.filter(|l| *l < 0 && accounted));
    let Some(swap) = swap else {
        return write_limit();
    };
    if !accounted {
        if swap < 0 {
            return write_limit();
        }
        return Err(Error::ControllerMissing {
            controller: "memory (swap accounting)",
            what: "linux.resources.memory.swap",
        });
    }
    let current: i64 = read(dir, "memory.limit_in_bytes")?
        .parse()
        .unwrap_or(i64::MAX);
    if swap < 0 || swap > current {
        write(dir, MEMSW, &v1_limit(swap))?;
        write_limit()
    } else {
        write_limit()?;
        write(dir, MEMSW, &v1_limit(swap))
    }
}

/// Weights (CFQ's blkio.weight or BFQ's blkio.bfq.weight) and throttles.
pub fn blkio(dir: &Path, io: &LinuxBlockIo) -> Result<(), Error> {
    let bfq = !has(dir, "blkio.weight") && has(dir, "blkio.bfq.weight");
    let (weight_file, device_file) = if bfq {
        ("blkio.bfq.weight", "blkio.bfq.weight_device")
    } else {
        ("blkio.weight", "blkio.weight_device")
    };
    if let Some(weight) = io.weight().filter(|w| *w != 0) {
        write(dir, weight_file, &weight.to_string())?;
    }
    if let Some(leaf) = io.leaf_weight().filter(|w| *w != 0) {
        write(dir, "blkio.leaf_weight", &leaf.to_string())?;
    }
    for dev in io.weight_device().iter().flatten() {
        if let Some(weight) = dev.weight() {
            let value = format!("{}:{} {weight}", dev.major(), dev.minor());
            write(dir, device_file, &value)?;
        }
        if let Some(leaf) = dev.leaf_weight() {
            let value = format!("{}:{} {leaf}", dev.major(), dev.minor());
            write(dir, "blkio.leaf_weight_device", &value)?;
        }
    }
    let throttles = [
        (
            "blkio.throttle.read_bps_device",
            io.throttle_read_bps_device(),
        ),
        (
            "blkio.throttle.write_bps_device",
            io.throttle_write_bps_device(),
        ),
        (
            "blkio.throttle.read_iops_device",
            io.throttle_read_iops_device(),
        ),
        (
            "blkio.throttle.write_iops_device",
            io.throttle_write_iops_device(),
        ),
    ];
    for (file, list) in throttles {
        for dev in list.iter().flatten() {
            write(
                dir,
                file,
                &format!("{}:{} {}", dev.major(), dev.minor(), dev.rate()),
            )?;
        }
    }
    Ok(())
}

/// hugetlb.<size>.limit_in_bytes.
pub fn hugetlb(dir: &Path, limits: &[LinuxHugepageLimit]) -> Result<(), Error> {
    for l in limits {
        let file = format!("hugetlb.{}.limit_in_bytes", l.page_size());
        write(dir, &file, &v1_limit(l.limit()))?;
    }
    Ok(())
}

/// Device rules in spec order (FIFO rules are not a devices-cgroup matter and are skipped).
pub fn devices(dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<(), Error> {
    for rule in rules {
        if rule.typ() == Some(LinuxDeviceType::P) {
            continue;
        }
        let file = if rule.allow() {
            "devices.allow"
        } else {
            "devices.deny"
        };
        write(dir, file, &device_rule(rule))?;
    }
    Ok(())
}
