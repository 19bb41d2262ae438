//! `process.capabilities`: the spec's five sets as kernel bit masks, applied in runc's order.
//!
//! Theory of operation: names map to numbers through [`NAMES`] (index = capability number, as in
//! `<linux/capability.h>`). A name the kernel does not know (number above `cap_last_cap`, or a
//! name newer than this table) is a warning and is skipped, never a failure. Application is
//! split around the user switch, as runc does it: the bounding set is narrowed first (that needs
//! CAP_SETPCAP, which a non-root uid no longer has after setuid), then, after setuid with
//! keep-caps, capset sets effective/permitted/inheritable and the ambient set is raised.
//!
//! Privileges: CAP_SETPCAP for the bounding drop; capset can only narrow without it.
//! Tests: unit tests below; the resulting /proc/self/status in `tests/priv_process.rs`.
use super::ProcessError;
use oci_spec::runtime::{Capabilities, LinuxCapabilities};

/// Capability names without the `CAP_` prefix; the index is the capability number. The one
/// table of pier (`spec::features` lists its names too).
pub(crate) const NAMES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// The number of capability `name` (`CAP_SYS_ADMIN` or `SYS_ADMIN`, any case), if known.
pub(super) fn number(name: &str) -> Option<u32> {
    let upper = name.to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    NAMES.iter().position(|n| *n == bare).map(|i| i as u32)
}

/// Removes the capability names this table does not know from the five sets of a raw
/// `process` JSON object (oci-spec would reject the whole config for one of them), warning for
/// each; returns the names removed.
pub(super) fn retain_known(process: &mut serde_json::Value) -> Vec<String> {
    let mut removed = Vec::new();
    let Some(sets) = process
        .get_mut("capabilities")
        .and_then(|c| c.as_object_mut())
    else {
        return removed;
    };
    for (set, names) in sets.iter_mut() {
        let Some(list) = names.as_array_mut() else {
            continue;
        };
        list.retain(|n| match n.as_str() {
            Some(name) if number(name).is_none() => {
                log::warn!("unknown capability {name:?} in process.capabilities.{set} ignored");
                removed.push(name.to_string());
                false
            }
            _ => true,
        });
    }
    removed
}

/// The kernel masks of the five sets; a set absent from the spec is empty.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Masks {
    pub bounding: u64,
    pub effective: u64,
    pub permitted: u64,
    pub inheritable: u64,
    pub ambient: u64,
}

/// Maps the spec's sets to masks, warning about (and skipping) capabilities above `last_cap`.
pub(super) fn masks(caps: &LinuxCapabilities, last_cap: u32) -> Masks {
    let mask = |set: &Option<Capabilities>, which: &str| -> u64 {
        let mut bits = 0u64;
        for cap in set.iter().flatten() {
            let name = cap.to_string();
            match number(&name).filter(|n| *n <= last_cap) {
                Some(n) => bits |= 1 << n,
                None => log::warn!(
                    "capability CAP_{name} in {which} is unknown to this kernel: ignored"
                ),
            }
        }
        bits
    };
    Masks {
        bounding: mask(caps.bounding(), "bounding"),
        effective: mask(caps.effective(), "effective"),
        permitted: mask(caps.permitted(), "permitted"),
        inheritable: mask(caps.inheritable(), "inheritable"),
        ambient: mask(caps.ambient(), "ambient"),
    }
}

/// Reads `cap_last_cap`.
pub(super) fn last_cap() -> Result<u32, ProcessError> {
    pier_sys::caps::last_cap().map_err(|source| ProcessError::CapRead {
        what: "/proc/sys/kernel/cap_last_cap",
        source,
    })
}

/// Drops every capability not in `m.bounding` from the bounding set.
pub(super) fn drop_bounding(m: &Masks, last_cap: u32) -> Result<(), ProcessError> {
    for cap in (0..=last_cap).filter(|c| m.bounding & (1 << c) == 0) {
        let present =
            pier_sys::caps::bounding_has(cap).map_err(|source| ProcessError::CapRead {
                what: "the bounding set",
                source,
            })?;
        if present {
            pier_sys::caps::bounding_drop(cap).map_err(|source| ProcessError::Bounding {
                cap: name_of(cap),
                source,
            })?;
        }
    }
    Ok(())
}

/// Sets effective/permitted/inheritable, then replaces the ambient set.
pub(super) fn set_and_raise_ambient(m: &Masks, last_cap: u32) -> Result<(), ProcessError> {
    let sets = pier_sys::caps::Sets {
        effective: m.effective,
        permitted: m.permitted,
        inheritable: m.inheritable,
    };
    pier_sys::caps::set(&sets).map_err(|source| ProcessError::Capset {
        effective: m.effective,
        permitted: m.permitted,
        inheritable: m.inheritable,
        source,
    })?;
    pier_sys::caps::ambient_clear().map_err(|source| ProcessError::Ambient {
        cap: "(clear all)",
        source,
    })?;
    // The kernel only raises an ambient capability that is also permitted and inheritable.
    // runc's and crun's default specs list ambient capabilities without inheritable ones and
    // both treat the ambient set as best effort, silently: such a capability is skipped here,
    // the one place for create, run and exec alike, with a debug line (a warning would print
    // on every run of runc's own `spec` output, onto the container's terminal).
    let raisable = m.permitted & m.inheritable;
    for cap in (0..=last_cap).filter(|c| m.ambient & (1 << c) != 0) {
        if raisable & (1 << cap) == 0 {
            log::debug!(
                "ambient capability {} is not both permitted and inheritable: not raised",
                name_of(cap)
            );
            continue;
        }
        pier_sys::caps::ambient_raise(cap).map_err(|source| ProcessError::Ambient {
            cap: name_of(cap),
            source,
        })?;
    }
    Ok(())
}

fn name_of(cap: u32) -> &'static str {
    NAMES.get(cap as usize).copied().unwrap_or("(unnamed)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_match_the_kernel_header() {
        assert_eq!(number("CAP_CHOWN"), Some(0));
        assert_eq!(number("CAP_NET_BIND_SERVICE"), Some(10));
        assert_eq!(number("sys_admin"), Some(21));
        assert_eq!(number("CAP_AUDIT_CONTROL"), Some(30));
        assert_eq!(number("CAP_CHECKPOINT_RESTORE"), Some(40));
        assert_eq!(number("CAP_FROB"), None);
    }

    #[test]
    fn oci_spec_names_all_map() {
        let caps: LinuxCapabilities = serde_json::from_value(serde_json::json!({
            "bounding": NAMES.iter().map(|n| format!("CAP_{n}")).collect::<Vec<_>>()
        }))
        .unwrap();
        let m = masks(&caps, 40);
        assert_eq!(m.bounding, (1u64 << 41) - 1);
        assert_eq!((m.effective, m.ambient), (0, 0));
    }

    #[test]
    fn caps_above_last_cap_are_skipped() {
        let caps: LinuxCapabilities = serde_json::from_value(serde_json::json!({
            "effective": ["CAP_KILL", "CAP_CHECKPOINT_RESTORE", "CAP_BPF"]
        }))
        .unwrap();
        assert_eq!(masks(&caps, 38).effective, 1 << 5);
    }

    #[test]
    fn retain_known_removes_unknown_names() {
        let mut p = serde_json::json!({"capabilities": {
            "bounding": ["CAP_KILL", "CAP_FROB"], "effective": ["CAP_NEW_THING"]
        }});
        let removed = retain_known(&mut p);
        assert_eq!(
            removed,
            vec!["CAP_FROB".to_string(), "CAP_NEW_THING".to_string()]
        );
        assert_eq!(
            p["capabilities"]["bounding"],
            serde_json::json!(["CAP_KILL"])
        );
        let caps: LinuxCapabilities = serde_json::from_value(p["capabilities"].take()).unwrap();
        assert_eq!(masks(&caps, 40).bounding, 1 << 5);
    }
}
