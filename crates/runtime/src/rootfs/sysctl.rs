//! `linux.sysctl`: kernel parameters the container sets in its own namespaces.
//!
//! Theory of operation: a key is allowed only if it belongs to a namespace the container has
//! (as runc validates): the IPC keys (`kernel.msg*`, `kernel.sem`, `kernel.shm*`,
//! `fs.mqueue.*`) need an IPC namespace, `net.*` a network namespace, `kernel.hostname` and
//! `kernel.domainname` a UTS namespace; anything else would change the host and is refused. All
//! keys are checked before the first is written. A key is `a.b.c` or `a/b/c` (the slash form
//! allows dots in a component, e.g. an interface `eth0.100`) and is written to
//! `/proc/sys/a/b/c` of the container's `/proc`.
//!
//! Privileges: those of the sysctl inside the container's namespaces. Tests: below and
//! `tests/priv_rootfs.rs`.
use super::{Namespaces, RootfsError};
use std::collections::HashMap;
use std::io::Write;

const IPC_KEYS: [&str; 8] = [
    "kernel.msgmax",
    "kernel.msgmnb",
    "kernel.msgmni",
    "kernel.sem",
    "kernel.shmall",
    "kernel.shmmax",
    "kernel.shmmni",
    "kernel.shm_rmid_forced",
];

/// Checks and writes every sysctl.
pub(crate) fn apply(sysctls: &HashMap<String, String>, ns: Namespaces) -> Result<(), RootfsError> {
    for key in sysctls.keys() {
        check(key, ns).map_err(|reason| RootfsError::SysctlNotAllowed {
            key: key.clone(),
            reason,
        })?;
    }
    for (key, value) in sysctls {
        write(key, value).map_err(|source| RootfsError::Sysctl {
            key: key.clone(),
            value: value.clone(),
            source,
        })?;
    }
    Ok(())
}

/// The key split into its components (slash form if it has a slash, else dot form).
fn components(key: &str) -> impl Iterator<Item = &str> {
    let sep = if key.contains('/') { '/' } else { '.' };
    key.split(sep)
}

/// Why `key` may not be set by a container with namespaces `ns`, if it may not.
fn check(key: &str, ns: Namespaces) -> Result<(), &'static str> {
    if components(key).any(|c| c.is_empty() || c == "." || c == "..") {
        return Err("it is not a sysctl name");
    }
    let first: Vec<&str> = components(key).take(2).collect();
    match first.as_slice() {
        ["net", ..] if ns.net => Ok(()),
        ["net", ..] => Err("the container has no network namespace"),
        ["fs", "mqueue"] if ns.ipc => Ok(()),
        ["fs", "mqueue"] => Err("the container has no ipc namespace"),
        ["kernel", name] if components(key).count() == 2 => {
            let dotted = format!("kernel.{name}");
            if IPC_KEYS.contains(&dotted.as_str()) {
                ns.ipc
                    .then_some(())
                    .ok_or("the container has no ipc namespace")
            } else if *name == "hostname" || *name == "domainname" {
                ns.uts
                    .then_some(())
                    .ok_or("the container has no uts namespace")
            } else {
                Err("it is not namespaced, so it would change the host")
            }
        }
        _ => Err("it is not namespaced, so it would change the host"),
    }
}

fn write(key: &str, value: &str) -> std::io::Result<()> {
    let mut path = String::with_capacity(10 + key.len());
    path.push_str("/proc/sys");
    for c in components(key) {
        path.push('/');
        path.push_str(c);
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)?
        .write_all(value.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(net: bool, ipc: bool, uts: bool) -> Namespaces {
        Namespaces {
            net,
            ipc,
            uts,
            ..Default::default()
        }
    }

    #[test]
    fn namespaced_keys_need_their_namespace() {
        assert!(check("net.ipv4.ip_forward", ns(true, false, false)).is_ok());
        assert!(check("net/ipv4/conf/eth0.100/forwarding", ns(true, false, false)).is_ok());
        assert!(check("net.ipv4.ip_forward", ns(false, true, true)).is_err());
        assert!(check("kernel.shmmax", ns(false, true, false)).is_ok());
        assert!(check("kernel.shmmax", ns(true, false, true)).is_err());
        assert!(check("fs.mqueue.queues_max", ns(false, true, false)).is_ok());
        assert!(check("kernel.domainname", ns(false, false, true)).is_ok());
    }

    #[test]
    fn host_wide_and_malformed_keys_are_refused() {
        let all = ns(true, true, true);
        assert!(check("kernel.panic", all).is_err());
        assert!(check("vm.overcommit_memory", all).is_err());
        assert!(check("kernel.shmmax.x", all).is_err());
        assert!(check("net/../kernel/panic", all).is_err());
        assert!(check("net..x", all).is_err());
    }
}
