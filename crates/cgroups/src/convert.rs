//! Conversions between OCI resource values and the strings cgroup files take.
//!
//! The OCI spec speaks cgroup v1 (cpu shares 2–262144, blkio weight 10–1000, `memory.swap` as
//! memory+swap, -1 for "no limit"); cgroup v2 files take a weight 1–10000, `max`, and swap on
//! its own. The linear maps are the ones runc and crun use, so a container gets the same share
//! of the machine whichever runtime started it.
//!
//! Privileges: none. Tests: unit tests below.
use crate::Error;
use oci_spec::runtime::LinuxDeviceCgroup;

/// cpu.shares (2–262144) → cpu.weight (1–10000); 0 means "not set".
pub fn shares_to_weight(shares: u64) -> u64 {
    if shares == 0 {
        return 0;
    }
    let shares = shares.clamp(2, 262_144);
    1 + (shares - 2) * 9999 / 262_142
}

/// blkio.weight (10–1000) → io.weight (1–10000); 0 means "not set".
pub fn blkio_to_io_weight(weight: u16) -> u64 {
    if weight == 0 {
        return 0;
    }
    let weight = u64::from(weight.clamp(10, 1000));
    1 + (weight - 10) * 9999 / 990
}

/// A v2 limit: negative is `max`.
pub fn v2_limit(value: i64) -> String {
    if value < 0 {
        "max".to_string()
    } else {
        value.to_string()
    }
}

/// A v1 limit: negative is `-1` (the files take -1 for "no limit").
pub fn v1_limit(value: i64) -> String {
    if value < 0 {
        "-1".to_string()
    } else {
        value.to_string()
    }
}

/// cpu.max from quota and period: `None` when neither is set; a quota ≤ 0 is `max`.
pub fn cpu_max(quota: Option<i64>, period: Option<u64>) -> Option<String> {
    let quota = quota.filter(|q| *q != 0);
    let period = period.filter(|p| *p != 0);
    if quota.is_none() && period.is_none() {
        return None;
    }
    let mut value = match quota {
        Some(q) if q > 0 => q.to_string(),
        _ => "max".to_string(),
    };
    if let Some(p) = period {
        value.push_str(&format!(" {p}"));
    }
    Some(value)
}

/// memory.swap.max from OCI's memory+swap total (`swap`) and the memory limit.
/// `None` = leave unset; `-1` total (or unlimited memory with no swap given) = `max`.
pub fn swap_v2(swap: Option<i64>, limit: Option<i64>) -> Result<Option<String>, Error> {
    let bad = |reason| Error::InvalidValue {
        field: "memory.swap",
        value: swap.unwrap_or(0).to_string(),
        reason,
    };
    match (swap, limit) {
        (None | Some(0), Some(l)) if l < 0 => Ok(Some("max".into())),
        (None | Some(0), _) => Ok(None),
        (Some(s), _) if s < 0 => Ok(Some("max".into())),
        (Some(_), None | Some(0)) => Err(bad("a swap limit needs a memory limit")),
        (Some(_), Some(l)) if l < 0 => Err(bad("a swap limit needs a memory limit")),
        (Some(s), Some(l)) if s < l => Err(bad("memory+swap must be at least the memory limit")),
        (Some(s), Some(l)) => Ok(Some((s - l).to_string())),
    }
}

/// A device rule as devices.allow/deny take it: `c 1:3 rwm`, `a *:* rwm`.
pub fn device_rule(rule: &LinuxDeviceCgroup) -> String {
    let typ = match rule.typ().map(|t| t.as_str().to_string()) {
        None => "a".to_string(),
        Some(t) if t == "u" => "c".to_string(),
        Some(t) => t,
    };
    let num = |n: Option<i64>| match n {
        Some(n) if n >= 0 => n.to_string(),
        _ => "*".to_string(),
    };
    let access = rule.access().clone().unwrap_or_else(|| "rwm".to_string());
    if typ == "a" {
        return format!("a *:* {access}");
    }
    format!("{typ} {}:{} {access}", num(rule.major()), num(rule.minor()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxDeviceCgroupBuilder, LinuxDeviceType};

    #[test]
    fn shares_map_onto_weights() {
        assert_eq!(shares_to_weight(0), 0);
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(shares_to_weight(1), 1, "below the range clamps");
        assert_eq!(shares_to_weight(1 << 40), 10_000, "above the range clamps");
    }

    #[test]
    fn blkio_weights_map_onto_io_weights() {
        assert_eq!(blkio_to_io_weight(0), 0);
        assert_eq!(blkio_to_io_weight(10), 1);
        assert_eq!(blkio_to_io_weight(500), 4950);
        assert_eq!(blkio_to_io_weight(1000), 10_000);
    }

    #[test]
    fn limits() {
        assert_eq!(v2_limit(-1), "max");
        assert_eq!(v2_limit(4096), "4096");
        assert_eq!(v1_limit(-5), "-1");
        assert_eq!(cpu_max(None, None), None);
        assert_eq!(cpu_max(Some(50_000), None).unwrap(), "50000");
        assert_eq!(
            cpu_max(Some(50_000), Some(100_000)).unwrap(),
            "50000 100000"
        );
        assert_eq!(cpu_max(Some(-1), Some(100_000)).unwrap(), "max 100000");
        assert_eq!(cpu_max(None, Some(20_000)).unwrap(), "max 20000");
    }

    #[test]
    fn swap_is_total_minus_memory_on_v2() {
        assert_eq!(swap_v2(Some(300), Some(100)).unwrap().unwrap(), "200");
        assert_eq!(swap_v2(Some(100), Some(100)).unwrap().unwrap(), "0");
        assert_eq!(swap_v2(Some(-1), Some(100)).unwrap().unwrap(), "max");
        assert_eq!(swap_v2(None, Some(-1)).unwrap().unwrap(), "max");
        assert_eq!(swap_v2(None, Some(100)).unwrap(), None);
        assert_eq!(swap_v2(Some(0), None).unwrap(), None);
        assert!(swap_v2(Some(50), Some(100)).is_err());
        assert!(swap_v2(Some(50), None).is_err());
        assert!(swap_v2(Some(50), Some(-1)).is_err());
    }

    #[test]
    fn device_rules() {
        let rule = |t, maj, min, acc: &str| {
            let mut b = LinuxDeviceCgroupBuilder::default()
                .allow(true)
                .typ(t)
                .access(acc);
            if let Some(m) = maj {
                b = b.major(m);
            }
            if let Some(m) = min {
                b = b.minor(m);
            }
            device_rule(&b.build().unwrap())
        };
        assert_eq!(
            rule(LinuxDeviceType::C, Some(1), Some(3), "rwm"),
            "c 1:3 rwm"
        );
        assert_eq!(rule(LinuxDeviceType::B, Some(8), None, "r"), "b 8:* r");
        assert_eq!(rule(LinuxDeviceType::U, Some(5), Some(-1), "m"), "c 5:* m");
        assert_eq!(rule(LinuxDeviceType::A, None, None, "rwm"), "a *:* rwm");
    }
}
