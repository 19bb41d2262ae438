//! Usage figures for `pier events --stats`, shaped like the `data` object of runc's stats event
//! (`cpu.usage`, `cpu.throttling`, `memory.usage`, `pids`), read from v1 files where the
//! container has that v1 hierarchy, else from cgroup2.
//!
//! Theory: a figure the kernel does not offer here (a missing file) stays 0, as in runc; a
//! directory that cannot be read at all is an error. v1 cpuacct.stat counts USER_HZ ticks
//! (100 per second on Linux), converted to ns; v2 reports µs. A limit of `max` is
//! u64::MAX for memory (what v1 reports for "no limit", near enough) and 0 for pids (runc's
//! "no limit").
//!
//! Privileges: read access to the cgroup files. Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::fsio::read;
use crate::{Cgroup, Error};
use serde::Serialize;
use std::path::Path;

/// Everything `stats` reports.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Stats {
    /// CPU time and CFS throttling.
    pub cpu: CpuStats,
    /// Memory use and limit.
    pub memory: MemoryStats,
    /// Task count and limit.
    pub pids: PidsStats,
}

/// `cpu` of runc's stats.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct CpuStats {
    /// CPU time used.
    pub usage: CpuUsage,
    /// CFS bandwidth throttling.
    pub throttling: Throttling,
}

/// CPU time in ns.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct CpuUsage {
    /// Total.
    pub total: u64,
    /// In the kernel.
    pub kernel: u64,
    /// In user space.
    pub user: u64,
}

/// CFS throttling counters.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Throttling {
    /// Enforcement periods elapsed.
    pub periods: u64,
    /// Periods in which the cgroup was throttled.
    pub throttled_periods: u64,
    /// Time throttled, ns.
    pub throttled_time: u64,
}

/// `memory` of runc's stats (only `usage`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryStats {
    /// Current, peak, limit and limit hits.
    pub usage: MemoryUsage,
}

/// Memory figures in bytes.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct MemoryUsage {
    /// Current use.
    pub usage: u64,
    /// Peak use.
    pub max: u64,
    /// Limit.
    pub limit: u64,
    /// Times the limit was hit.
    pub failcnt: u64,
}

/// `pids` of runc's stats.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct PidsStats {
    /// Tasks now.
    pub current: u64,
    /// Limit (0 = none).
    pub limit: u64,
}

const TICK_NS: u64 = 10_000_000;

/// Reads all figures of `cg`.
pub fn read_all(cg: &Cgroup) -> Result<Stats, Error> {
    let mut s = Stats::default();
    let v2 = cg.v2_dir().map(|d| d.path.as_path());
    if let Some(d) = cg.v1_dir("cpuacct") {
        s.cpu.usage.total = number(&d.path, "cpuacct.usage")?;
        let stat = keyed(&d.path, "cpuacct.stat")?;
        s.cpu.usage.user = key(&stat, "user") * TICK_NS;
        s.cpu.usage.kernel = key(&stat, "system") * TICK_NS;
    } else if let Some(d) = v2 {
        let stat = keyed(d, "cpu.stat")?;
        s.cpu.usage.total = key(&stat, "usage_usec") * 1000;
        s.cpu.usage.user = key(&stat, "user_usec") * 1000;
        s.cpu.usage.kernel = key(&stat, "system_usec") * 1000;
    }
    if let Some(d) = cg.v1_dir("cpu") {
        let stat = keyed(&d.path, "cpu.stat")?;
        s.cpu.throttling = Throttling {
            periods: key(&stat, "nr_periods"),
            throttled_periods: key(&stat, "nr_throttled"),
            throttled_time: key(&stat, "throttled_time"),
        };
    } else if let Some(d) = v2 {
        let stat = keyed(d, "cpu.stat")?;
        s.cpu.throttling = Throttling {
            periods: key(&stat, "nr_periods"),
            throttled_periods: key(&stat, "nr_throttled"),
            throttled_time: key(&stat, "throttled_usec") * 1000,
        };
    }
    s.memory.usage = memory(cg, v2)?;
    s.pids = pids(cg, v2)?;
    Ok(s)
}

fn memory(cg: &Cgroup, v2: Option<&Path>) -> Result<MemoryUsage, Error> {
    if let Some(d) = cg.v1_dir("memory") {
        return Ok(MemoryUsage {
            usage: number(&d.path, "memory.usage_in_bytes")?,
            max: number(&d.path, "memory.max_usage_in_bytes")?,
            limit: number(&d.path, "memory.limit_in_bytes")?,
            failcnt: number(&d.path, "memory.failcnt")?,
        });
    }
    let Some(d) = v2 else {
        return Ok(MemoryUsage::default());
    };
    Ok(MemoryUsage {
        usage: number(d, "memory.current")?,
        max: number(d, "memory.peak")?,
        limit: number(d, "memory.max")?,
        failcnt: key(&keyed(d, "memory.events")?, "max"),
    })
}

fn pids(cg: &Cgroup, v2: Option<&Path>) -> Result<PidsStats, Error> {
    let Some(d) = cg.v1_dir("pids").map(|d| d.path.as_path()).or(v2) else {
        return Ok(PidsStats::default());
    };
    let limit = number(d, "pids.max")?;
    Ok(PidsStats {
        current: number(d, "pids.current")?,
        limit: if limit == u64::MAX { 0 } else { limit },
    })
}

/// A one-number file; a missing file is 0, `max` is u64::MAX.
fn number(dir: &Path, file: &str) -> Result<u64, Error> {
    if !dir.join(file).exists() {
        return Ok(0);
    }
    let text = read(dir, file)?;
    if text == "max" {
        return Ok(u64::MAX);
    }
    text.parse().map_err(|_| Error::Parse {
        file: file.to_string(),
        dir: dir.to_path_buf(),
        content: text,
    })
}

/// A `key value` per line file; a missing file is empty.
fn keyed(dir: &Path, file: &str) -> Result<Vec<(String, u64)>, Error> {
    if !dir.join(file).exists() {
        return Ok(Vec::new());
    }
    Ok(read(dir, file)?
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.trim().parse().ok()?))
        })
        .collect())
}

fn key(list: &[(String, u64)], name: &str) -> u64 {
    list.iter().find(|(k, _)| k == name).map_or(0, |(_, v)| *v)
}
