//! The container's `linux.seccomp`, converted the way dockerd converts a profile.
//!
//! Theory of operation: Docker's profile format adds to OCI's `archMap` and, per rule,
//! `includes`/`excludes` conditions (capabilities, architectures, minimum kernel). dockerd
//! resolves them against the container's final capability set, Go's architecture name and the
//! running kernel, and hands the runtime plain OCI rules; [`to_oci`] does the same, so one
//! converter reads Docker's and OCI's JSON (an OCI profile has no conditions to resolve).
//! The default profile is pier-seccomp's `DOCKER_DEFAULT_PROFILE`, which is Docker's resolved
//! for Docker's default capabilities; [`default_profile`] re-resolves its capability-dependent
//! rules (listed in [`CAP_RULES`], from Docker's profile) for the container's capabilities:
//! `--cap-add SYS_ADMIN` allows mount/unshare/setns…, `--cap-drop SYS_CHROOT` forbids chroot.
//! Tests: below, the default capabilities give exactly the shipped profile.
use serde_json::{json, Value};
use std::path::Path;

use super::SpecError;
use crate::config::Seccomp;

/// The syscalls Docker's default profile allows only with a capability, in the profile's order.
const CAP_RULES: [(&str, &[&str]); 14] = [
    ("CAP_DAC_READ_SEARCH", &["open_by_handle_at"]),
    (
        "CAP_SYS_ADMIN",
        &[
            "bpf",
            "clone",
            "clone3",
            "fanotify_init",
            "fsconfig",
            "fsmount",
            "fsopen",
            "fspick",
            "lookup_dcookie",
            "mount",
            "mount_setattr",
            "move_mount",
            "open_tree",
            "perf_event_open",
            "quotactl",
            "quotactl_fd",
            "setdomainname",
            "sethostname",
            "setns",
            "syslog",
            "umount",
            "umount2",
            "unshare",
        ],
    ),
    ("CAP_SYS_BOOT", &["reboot"]),
    ("CAP_SYS_CHROOT", &["chroot"]),
    (
        "CAP_SYS_MODULE",
        &["delete_module", "init_module", "finit_module"],
    ),
    ("CAP_SYS_PACCT", &["acct"]),
    (
        "CAP_SYS_PTRACE",
        &[
            "kcmp",
            "pidfd_getfd",
            "process_madvise",
            "process_vm_readv",
            "process_vm_writev",
            "ptrace",
        ],
    ),
    ("CAP_SYS_RAWIO", &["iopl", "ioperm"]),
    (
        "CAP_SYS_TIME",
        &["settimeofday", "stime", "clock_settime", "clock_settime64"],
    ),
    ("CAP_SYS_TTY_CONFIG", &["vhangup"]),
    (
        "CAP_SYS_NICE",
        &[
            "get_mempolicy",
            "mbind",
            "set_mempolicy",
            "set_mempolicy_home_node",
        ],
    ),
    ("CAP_SYSLOG", &["syslog"]),
    ("CAP_BPF", &["bpf"]),
    ("CAP_PERFMON", &["perf_event_open"]),
];

/// The rules Docker's profile applies only *without* CAP_SYS_ADMIN (clone without namespace
/// flags, clone3 refused with ENOSYS so libcs fall back to clone): they are in the shipped
/// profile, which was resolved without it.
fn only_without_sys_admin(rule: &Value) -> bool {
    matches!(rule["names"].as_array().map(Vec::as_slice), Some([n]) if n == "clone" || n == "clone3")
}

fn is_cap_rule(rule: &Value) -> bool {
    let names = rule["names"].as_array();
    CAP_RULES.iter().any(|(_, list)| {
        names.is_some_and(|n| n.len() == list.len() && n.iter().zip(*list).all(|(a, b)| a == b))
    })
}

/// The container's profile: None when unconfined.
pub(super) fn profile(seccomp: &Seccomp, caps: &[String]) -> Result<Option<Value>, SpecError> {
    match seccomp {
        Seccomp::Unconfined => Ok(None),
        Seccomp::Default => Ok(Some(default_profile(caps))),
        Seccomp::Profile(path) => from_file(path, caps).map(Some),
    }
}

/// Docker's default profile for `caps`.
pub(super) fn default_profile(caps: &[String]) -> Value {
    let mut profile: Value = serde_json::from_str(pier_seccomp::DOCKER_DEFAULT_PROFILE)
        .expect("pier-seccomp's embedded profile is JSON");
    let rules = profile["syscalls"].as_array().cloned().unwrap_or_default();
    let without_admin: Vec<Value> = rules
        .iter()
        .filter(|r| only_without_sys_admin(r))
        .cloned()
        .collect();
    let mut out: Vec<Value> = rules
        .into_iter()
        .filter(|r| !only_without_sys_admin(r) && !is_cap_rule(r))
        .collect();
    let has = |cap: &str| caps.iter().any(|c| c == cap);
    for (cap, names) in CAP_RULES {
        if has(cap) {
            out.push(json!({"names": names, "action": "SCMP_ACT_ALLOW"}));
        }
        if cap == "CAP_SYS_ADMIN" && !has(cap) {
            out.extend(without_admin.iter().cloned());
        }
    }
    profile["syscalls"] = Value::Array(out);
    profile
}

/// A `seccomp=FILE` profile, Docker's format or OCI's, resolved and checked.
fn from_file(path: &Path, caps: &[String]) -> Result<Value, SpecError> {
    let fail = |reason: String| SpecError::Seccomp {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let raw: Value = serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?;
    let profile = to_oci(raw, caps, &Host::current()).map_err(fail)?;
    pier_seccomp::from_json(&profile).map_err(|e| fail(e.to_string()))?;
    Ok(profile)
}

/// What Docker's conditions are evaluated against.
#[derive(Debug)]
struct Host {
    /// Go's name of the architecture (`amd64`), as in Docker's `arches`.
    go_arch: &'static str,
    /// libseccomp's name (`SCMP_ARCH_X86_64`), as in `archMap`.
    scmp_arch: &'static str,
    kernel: (u32, u32),
}

impl Host {
    fn current() -> Host {
        let (go_arch, scmp_arch) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", "SCMP_ARCH_X86_64"),
            "aarch64" => ("arm64", "SCMP_ARCH_AARCH64"),
            "riscv64" => ("riscv64", "SCMP_ARCH_RISCV64"),
            "s390x" => ("s390x", "SCMP_ARCH_S390X"),
            other => (other, "SCMP_ARCH_NATIVE"),
        };
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        Host {
            go_arch,
            scmp_arch,
            kernel: kernel_version(&release).unwrap_or((0, 0)),
        }
    }
}

fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.trim().split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Docker's profile → OCI: `archMap` → the host's `architectures`; each rule kept only when its
/// conditions hold, without `includes`, `excludes`, `comment`; `name` → `names`.
fn to_oci(mut profile: Value, caps: &[String], host: &Host) -> Result<Value, String> {
    let obj = profile.as_object_mut().ok_or("not a JSON object")?;
    if let Some(map) = obj.remove("archMap") {
        if obj
            .get("architectures")
            .is_some_and(|a| a.as_array().is_some_and(|a| !a.is_empty()))
        {
            return Err("both \"architectures\" and \"archMap\" are given".into());
        }
        obj.insert("architectures".into(), arches_from_map(&map, host));
    }
    let rules = obj.remove("syscalls").unwrap_or(json!([]));
    let rules = rules.as_array().ok_or("\"syscalls\" is not a list")?;
    let mut out = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        if applies(rule, caps, host).map_err(|e| format!("syscalls[{i}]: {e}"))? {
            out.push(plain_rule(rule).map_err(|e| format!("syscalls[{i}]: {e}"))?);
        }
    }
    obj.insert("syscalls".into(), Value::Array(out));
    Ok(profile)
}

fn arches_from_map(map: &Value, host: &Host) -> Value {
    let entries = map.as_array().map(Vec::as_slice).unwrap_or_default();
    let native = entries.iter().find(|e| e["architecture"] == host.scmp_arch);
    let mut arches = vec![json!(host.scmp_arch)];
    if let Some(subs) = native.and_then(|e| e["subArchitectures"].as_array()) {
        arches.extend(subs.iter().cloned());
    }
    match native {
        Some(_) => Value::Array(arches),
        None => json!([]),
    }
}

/// Docker's rule conditions: every included capability held, the architecture among the
/// included ones, the kernel at least `minKernel`; no excluded capability or architecture.
fn applies(rule: &Value, caps: &[String], host: &Host) -> Result<bool, String> {
    let list = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (inc, exc) = (&rule["includes"], &rule["excludes"]);
    let inc_caps = list(&inc["caps"]);
    let inc_arches = list(&inc["arches"]);
    if !inc_caps.iter().all(|c| caps.contains(c))
        || (!inc_arches.is_empty() && !inc_arches.iter().any(|a| a == host.go_arch))
        || list(&exc["caps"]).iter().any(|c| caps.contains(c))
        || list(&exc["arches"]).iter().any(|a| a == host.go_arch)
    {
        return Ok(false);
    }
    match inc["minKernel"].as_str() {
        None => Ok(true),
        Some(min) => {
            let min = kernel_version(min).ok_or(format!("minKernel {min:?} is not a version"))?;
            Ok(host.kernel >= min)
        }
    }
}

fn plain_rule(rule: &Value) -> Result<Value, String> {
    let mut rule = rule.clone();
    let obj = rule.as_object_mut().ok_or("a rule is not a JSON object")?;
    for key in ["includes", "excludes", "comment"] {
        obj.remove(key);
    }
    if let Some(name) = obj.remove("name") {
        if obj.contains_key("names") {
            return Err("use either \"name\" or \"names\"".into());
        }
        obj.insert("names".into(), json!([name]));
    }
    Ok(rule)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::DEFAULT_CAPS;

    fn caps(extra: &[&str], without: &[&str]) -> Vec<String> {
        DEFAULT_CAPS
            .iter()
            .chain(extra)
            .filter(|c| !without.contains(c))
            .map(|c| c.to_string())
            .collect()
    }

    fn allowed(profile: &Value, name: &str) -> bool {
        profile["syscalls"].as_array().unwrap().iter().any(|r| {
            r["action"] == "SCMP_ACT_ALLOW"
                && r.get("args").is_none()
                && r["names"].as_array().unwrap().iter().any(|n| n == name)
        })
    }

    const X86_64: Host = Host {
        go_arch: "amd64",
        scmp_arch: "SCMP_ARCH_X86_64",
        kernel: (6, 18),
    };

    #[test]
    fn default_caps_give_the_shipped_profile_exactly() {
        let shipped: Value = serde_json::from_str(pier_seccomp::DOCKER_DEFAULT_PROFILE).unwrap();
        assert_eq!(default_profile(&caps(&[], &[])), shipped);
    }

    #[test]
    fn sys_admin_allows_mount_and_unshare_and_plain_clone() {
        let p = default_profile(&caps(&["CAP_SYS_ADMIN"], &[]));
        for name in ["mount", "unshare", "setns", "clone", "clone3", "umount2"] {
            assert!(allowed(&p, name), "{name}");
        }
        let rules = p["syscalls"].as_array().unwrap();
        assert!(!rules.iter().any(only_without_sys_admin));
        pier_seccomp::from_json(&p).unwrap();
    }

    #[test]
    fn default_caps_keep_namespaces_out() {
        let p = default_profile(&caps(&[], &[]));
        for name in [
            "mount",
            "unshare",
            "setns",
            "ptrace_but_not",
            "reboot",
            "bpf",
        ] {
            assert!(!allowed(&p, name), "{name}");
        }
        assert!(allowed(&p, "chroot"));
        assert!(!allowed(
            &default_profile(&caps(&[], &["CAP_SYS_CHROOT"])),
            "chroot"
        ));
        assert!(allowed(
            &default_profile(&caps(&["CAP_SYS_PTRACE"], &[])),
            "kcmp"
        ));
    }

    #[test]
    fn dockers_format_is_resolved_like_dockerd_does() {
        let docker = json!({
            "defaultAction": "SCMP_ACT_ERRNO",
            "archMap": [
                {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
                {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]}
            ],
            "syscalls": [
                {"names": ["read"], "action": "SCMP_ACT_ALLOW", "comment": "always"},
                {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
                {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38,
                    "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
                {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64"]}},
                {"names": ["set_tls"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["arm64"]}},
                {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
                {"names": ["future"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "99.1"}},
                {"name": "write", "action": "SCMP_ACT_ALLOW"}
            ]
        });
        let oci = to_oci(docker.clone(), &caps(&[], &[]), &X86_64).unwrap();
        assert_eq!(
            oci,
            json!({
                "defaultAction": "SCMP_ACT_ERRNO",
                "architectures": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"],
                "syscalls": [
                    {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
                    {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
                    {"names": ["arch_prctl"], "action": "SCMP_ACT_ALLOW"},
                    {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW"},
                    {"names": ["write"], "action": "SCMP_ACT_ALLOW"}
                ]
            })
        );
        let admin = to_oci(docker, &caps(&["CAP_SYS_ADMIN"], &[]), &X86_64).unwrap();
        let names: Vec<&Value> = admin["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| &r["names"][0])
            .collect();
        assert_eq!(names, ["read", "mount", "arch_prctl", "ptrace", "write"]);
    }

    #[test]
    fn an_oci_profile_passes_unchanged() {
        let shipped: Value = serde_json::from_str(pier_seccomp::DOCKER_DEFAULT_PROFILE).unwrap();
        assert_eq!(to_oci(shipped.clone(), &[], &X86_64).unwrap(), shipped);
    }

    #[test]
    fn bad_profiles_name_the_rule() {
        let both = json!({"defaultAction": "SCMP_ACT_ALLOW", "architectures": ["SCMP_ARCH_X86_64"],
            "archMap": [], "syscalls": []});
        assert!(to_oci(both, &[], &X86_64).unwrap_err().contains("archMap"));
        let bad = json!({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
            {"names": ["read"], "action": "SCMP_ACT_ALLOW"},
            {"names": ["x"], "name": "y", "action": "SCMP_ACT_ALLOW"}]});
        assert_eq!(
            to_oci(bad, &[], &X86_64).unwrap_err(),
            "syscalls[1]: use either \"name\" or \"names\""
        );
    }

    #[test]
    fn kernel_versions() {
        assert_eq!(kernel_version("6.18.0-1-amd64\n"), Some((6, 18)));
        assert_eq!(kernel_version("4.8"), Some((4, 8)));
        assert_eq!(kernel_version("x"), None);
    }
}
