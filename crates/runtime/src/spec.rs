//! Reading `config.json`, and the documents `spec` and `features` print.
//!
//! Theory of operation: the file is read once and parsed to a `serde_json::Value`; values that
//! oci-spec 0.10 would reject for the whole document (an unknown capability or namespace type)
//! are dropped with a warning (capabilities by `process::normalize_json`), `linux.seccomp` is
//! validated by pier's own seccomp parser (which names the rule and field at fault) and taken
//! out, then the rest is handed to oci-spec and the profile put back. Any 1.x `ociVersion` is
//! accepted. Errors name the file and the field.
//!
//! Privileges: none. Tests: unit tests below.
use crate::container::Error;
use oci_spec::runtime::{
    Capability, LinuxDeviceCgroup, LinuxNamespaceType, LinuxResources, LinuxSeccomp, Spec,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// Directory under the root holding compiled seccomp filters (not a container id).
pub const SECCOMP_CACHE: &str = "seccomp-cache";

/// A bundle's spec with its resolved root filesystem.
#[derive(Debug)]
pub struct Bundle {
    /// The parsed config.
    pub spec: Spec,
    /// Absolute path of `root.path`.
    pub rootfs: PathBuf,
}

/// Reads `<bundle>/config.json` and checks that the rootfs exists.
pub fn load(bundle: &Path) -> Result<Bundle, Error> {
    let path = bundle.join("config.json");
    let bytes = std::fs::read(&path).map_err(|e| Error::io("read", &path, e))?;
    let spec = parse(&bytes).map_err(|msg| Error::Spec {
        path: path.clone(),
        msg,
    })?;
    let root = spec.root().as_ref().map(|r| r.path().clone());
    let root = root.ok_or_else(|| Error::Spec {
        path: path.clone(),
        msg: "root.path: missing".into(),
    })?;
    let rootfs = if root.is_absolute() {
        root
    } else {
        bundle.join(root)
    };
    if !rootfs.is_dir() {
        return Err(Error::RootfsMissing(rootfs));
    }
    Ok(Bundle { spec, rootfs })
}

/// Parses and sanitises a config; the error text names the field.
pub fn parse(bytes: &[u8]) -> Result<Spec, String> {
    let mut value: Value =
        serde_json::from_slice(bytes).map_err(|e| format!("invalid JSON: {e}"))?;
    check_version(&value)?;
    if let Some(process) = value.get_mut("process") {
        crate::process::normalize_json(process);
    }
    drop_unknown_namespaces(&mut value);
    let seccomp = match value.pointer_mut("/linux/seccomp").map(Value::take) {
        Some(Value::Null) | None => None,
        Some(profile) => {
            Some(pier_seccomp::from_json(&profile).map_err(|e| format!("linux.seccomp: {e}"))?)
        }
    };
    let mut spec: Spec =
        serde_path_to_error::deserialize(value).map_err(|e| match e.path().to_string() {
            path if path == "." => e.inner().to_string(),
            path => format!("{path}: {}", e.inner()),
        })?;
    if let (Some(profile), Some(linux)) = (seccomp, spec.linux_mut().as_mut()) {
        linux.set_seccomp(Some(profile));
    }
    Ok(spec)
}

/// The spec's `linux.seccomp`.
pub fn seccomp_profile(spec: &Spec) -> Option<&LinuxSeccomp> {
    spec.linux().as_ref().and_then(|l| l.seccomp().as_ref())
}

/// The compiled filter of the spec's profile, from the cache under `root` (compiled and stored
/// on a miss).
pub fn seccomp_program(root: &Path, spec: &Spec) -> Result<Option<pier_seccomp::Program>, Error> {
    let Some(profile) = seccomp_profile(spec) else {
        return Ok(None);
    };
    let cache = pier_seccomp::Cache::new(root.join(SECCOMP_CACHE));
    cache
        .get_or_compile(profile)
        .map(Some)
        .map_err(Error::Seccomp)
}

/// Devices every container may use whatever the spec's rules say (runc's `AllowedDevices`):
/// mknod of any node, null, zero, full, random, urandom, tty, console, ptmx, the pts, tun/tap.
const ALLOWED_DEVICES: [(char, i64, i64, &str); 12] = [
    ('c', -1, -1, "m"),
    ('b', -1, -1, "m"),
    ('c', 1, 3, "rwm"),
    ('c', 1, 5, "rwm"),
    ('c', 1, 7, "rwm"),
    ('c', 1, 8, "rwm"),
    ('c', 1, 9, "rwm"),
    ('c', 5, 0, "rwm"),
    ('c', 5, 1, "rwm"),
    ('c', 5, 2, "rwm"),
    ('c', 136, -1, "rwm"),
    ('c', 10, 200, "rwm"),
];

/// `linux.resources` as the cgroup gets it: the spec's device rules, then an allow rule for each
/// `linux.devices` entry and the default allowed devices, like runc (Docker relies on it).
pub fn cgroup_resources(spec: &Spec) -> Option<LinuxResources> {
    let linux = spec.linux().as_ref()?;
    let mut resources = linux.resources().clone()?;
    let mut rules = resources.devices().clone().unwrap_or_default();
    if rules.is_empty() {
        return Some(resources);
    }
    rules.extend(linux.devices().iter().flatten().map(|d| {
        let mut rule = LinuxDeviceCgroup::from(d);
        rule.set_allow(true);
        rule.set_access(Some("rwm".into()));
        rule
    }));
    for (typ, major, minor, access) in ALLOWED_DEVICES {
        let rule = json!({"allow": true, "type": typ.to_string(), "access": access,
            "major": (major >= 0).then_some(major), "minor": (minor >= 0).then_some(minor)});
        rules.push(serde_json::from_value(rule).expect("built-in device rule is valid"));
    }
    resources.set_devices(Some(rules));
    Some(resources)
}

fn check_version(value: &Value) -> Result<(), String> {
    match value.get("ociVersion").and_then(Value::as_str) {
        Some(v) if v.starts_with("1.") || v == "1" => Ok(()),
        Some(v) => Err(format!(
            "ociVersion: unsupported version {v:?} (pier supports 1.x)"
        )),
        None => Err("ociVersion: missing".into()),
    }
}

fn drop_unknown_namespaces(value: &mut Value) {
    let Some(Value::Array(list)) = value.pointer_mut("/linux/namespaces") else {
        return;
    };
    list.retain(|ns| {
        let typ = ns.get("type").cloned().unwrap_or(Value::Null);
        let known = serde_json::from_value::<LinuxNamespaceType>(typ.clone()).is_ok();
        if !known {
            log::warn!("linux.namespaces: ignoring unknown namespace type {typ}");
        }
        known
    });
}

/// runc's `spec` output: `sh` on a terminal, default namespaces, Docker-like capabilities,
/// masked and readonly paths.
pub fn default_spec() -> Spec {
    serde_json::from_value(default_spec_json()).expect("the built-in default spec is valid")
}

const DEFAULT_CAPS: [&str; 3] = ["CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"];

fn default_spec_json() -> Value {
    let caps = json!(DEFAULT_CAPS);
    json!({
        "ociVersion": "1.0.2-dev",
        "process": {
            "terminal": true,
            "user": {"uid": 0, "gid": 0},
            "args": ["sh"],
            "env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "TERM=xterm"
            ],
            "cwd": "/",
            "capabilities": {
                "bounding": caps, "effective": caps, "permitted": caps, "ambient": caps
            },
            "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024}],
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs", "readonly": true},
        "hostname": "runc",
        "mounts": default_mounts(),
        "linux": {
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [
                {"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"},
                {"type": "mount"}
            ],
            "maskedPaths": [
                "/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware",
                "/proc/scsi"
            ],
            "readonlyPaths": [
                "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"
            ]
        }
    })
}

fn default_mounts() -> Value {
    json!([
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
         "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
         "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
         "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
         "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs",
         "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
         "options": ["nosuid", "noexec", "nodev", "relatime", "ro"]}
    ])
}

/// Every capability name oci-spec (and so pier) knows.
fn known_capabilities() -> Vec<String> {
    crate::process::caps::NAMES
        .iter()
        .map(|name| format!("CAP_{name}"))
        .filter(|name| serde_json::from_value::<Capability>(json!(name)).is_ok())
        .collect()
}

const SECCOMP_FLAGS: [&str; 3] = [
    "SECCOMP_FILTER_FLAG_TSYNC",
    "SECCOMP_FILTER_FLAG_LOG",
    "SECCOMP_FILTER_FLAG_SPEC_ALLOW",
];

/// The OCI features document (runtime-spec `features.md`).
pub fn features() -> Value {
    json!({
        "ociVersionMin": "1.0.0",
        "ociVersionMax": "1.2.0",
        "hooks": [
            "prestart", "createRuntime", "createContainer", "startContainer", "poststart",
            "poststop"
        ],
        "mountOptions": [
            "async", "atime", "bind", "defaults", "dev", "diratime", "dirsync", "exec", "iversion",
            "lazytime", "loud", "mand", "noatime", "nodev", "nodiratime", "noexec", "noiversion",
            "nolazytime", "nomand", "norelatime", "nostrictatime", "nosuid", "nosymfollow",
            "private",
            "ratime", "rbind", "rdev", "rdiratime", "relatime", "remount", "rexec", "rnoatime",
            "rnodev", "rnodiratime", "rnoexec", "rnorelatime", "rnostrictatime", "rnosuid",
            "rnosymfollow", "ro", "rprivate", "rrelatime", "rro", "rrw", "rshared", "rslave",
            "rstrictatime", "rsuid", "rsymfollow", "runbindable", "rw", "shared", "silent", "slave",
            "strictatime", "suid", "symfollow", "sync", "unbindable"
        ],
        "linux": {
            "namespaces": ["cgroup", "ipc", "mount", "network", "pid", "time", "user", "uts"],
            "capabilities": known_capabilities(),
            "cgroup": {
                "v1": true, "v2": true, "systemd": true, "systemdUser": false, "rdma": false
            },
            "seccomp": {
                "enabled": true,
                "actions": [
                    "SCMP_ACT_ALLOW", "SCMP_ACT_ERRNO", "SCMP_ACT_KILL", "SCMP_ACT_KILL_PROCESS",
                    "SCMP_ACT_KILL_THREAD", "SCMP_ACT_LOG", "SCMP_ACT_NOTIFY", "SCMP_ACT_TRACE",
                    "SCMP_ACT_TRAP"
                ],
                "operators": [
                    "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_LE", "SCMP_CMP_LT",
                    "SCMP_CMP_MASKED_EQ", "SCMP_CMP_NE"
                ],
                "archs": ["SCMP_ARCH_X86", "SCMP_ARCH_X86_64", "SCMP_ARCH_X32"],
                "knownFlags": SECCOMP_FLAGS,
                "supportedFlags": SECCOMP_FLAGS
            },
            "apparmor": {"enabled": Path::new("/sys/kernel/security/apparmor").exists()},
            "selinux": {"enabled": Path::new("/sys/fs/selinux/enforce").exists()}
        },
        "annotations": {
            "org.opencontainers.runc.version": "pier",
            "io.github.pier.version": env!("CARGO_PKG_VERSION")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    static PROCESS: std::sync::LazyLock<Value> = std::sync::LazyLock::new(
        || json!({"args": ["true"], "cwd": "/", "user": {"uid": 0, "gid": 0}}),
    );

    fn config(extra: Value) -> Vec<u8> {
        let mut v =
            json!({"ociVersion": "1.2.0", "root": {"path": "rootfs"}, "process": PROCESS.clone()});
        if let (Value::Object(base), Value::Object(more)) = (&mut v, extra) {
            base.extend(more);
        }
        serde_json::to_vec(&v).unwrap()
    }

    #[test]
    fn unknown_capability_and_namespace_are_dropped() {
        let bytes = config(json!({
            "process": {"args": ["true"], "cwd": "/", "user": {"uid": 0, "gid": 0},
                        "capabilities": {"bounding": ["CAP_KILL", "CAP_FROBNICATE"]}},
            "linux": {"namespaces": [{"type": "pid"}, {"type": "wormhole"}]}
        }));
        let spec = parse(&bytes).unwrap();
        let caps = spec
            .process()
            .as_ref()
            .unwrap()
            .capabilities()
            .as_ref()
            .unwrap();
        assert_eq!(caps.bounding().as_ref().unwrap().len(), 1);
        assert_eq!(
            spec.linux()
                .as_ref()
                .unwrap()
                .namespaces()
                .as_ref()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn version_must_be_1x() {
        assert!(parse(&config(json!({"ociVersion": "1.1.0-rc.1"}))).is_ok());
        let err = parse(&config(json!({"ociVersion": "2.0.0"}))).unwrap_err();
        assert!(err.contains("ociVersion"), "{err}");
    }

    #[test]
    fn missing_field_is_named() {
        let err = parse(&config(json!({"process": {"args": ["true"], "cwd": "/"}}))).unwrap_err();
        assert_eq!(err, "process: missing field `user`");
    }

    #[test]
    fn malformed_json_is_reported() {
        assert!(parse(b"{").unwrap_err().contains("invalid JSON"));
    }

    #[test]
    fn default_spec_is_runcs() {
        let spec = default_spec();
        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.args().as_ref().unwrap(), &["sh".to_string()]);
        assert!(process.terminal().unwrap_or(false));
        assert_eq!(
            spec.linux()
                .as_ref()
                .unwrap()
                .namespaces()
                .as_ref()
                .unwrap()
                .len(),
            5
        );
    }

    #[test]
    fn default_devices_follow_the_spec_rules() {
        let spec = default_spec();
        let rules = cgroup_resources(&spec).unwrap().devices().clone().unwrap();
        assert!(!rules[0].allow(), "the spec's deny-all comes first");
        let null = rules
            .iter()
            .find(|r| r.major() == Some(1) && r.minor() == Some(3))
            .unwrap();
        assert!(null.allow());
        assert_eq!(rules.len(), 1 + ALLOWED_DEVICES.len());
    }

    #[test]
    fn features_list_capabilities() {
        let f = features();
        let caps = f["linux"]["capabilities"].as_array().unwrap();
        assert!(caps.iter().any(|c| c == "CAP_SYS_ADMIN"));
        assert_eq!(caps.len(), crate::process::caps::NAMES.len());
        assert_eq!(caps[40], "CAP_CHECKPOINT_RESTORE");
        assert_eq!(f["ociVersionMin"], "1.0.0");
    }
}
