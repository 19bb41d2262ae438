//! A [`RunConfig`] becomes an OCI runtime spec carrying Docker's defaults.
//!
//! Theory of operation: the spec is written as the JSON dockerd would hand runc (moby's
//! `oci/defaults.go` and `daemon/oci_linux.go`) and parsed into oci-spec's [`Spec`] once:
//! Docker's default capabilities (bounding, effective, permitted; never inheritable or ambient)
//! adjusted by `--cap-add`/`--cap-drop` with Docker's arithmetic ([`capabilities`]), its masked
//! and readonly paths, default mounts, device cgroup rules (the default nodes themselves are the
//! runtime's), namespaces (network per [`NetNs`], plus a private cgroup namespace), the
//! unprivileged-port and ping sysctls Docker sets in a private network namespace, env in
//! Docker's order, `-u` resolved in the root's own passwd/group (`spec/user.rs`), rlimits only
//! for `--ulimit` (the caller's are inherited otherwise; config.rs refused any hard limit above
//! pier's own), resources (`--cpus` as quota over a 100 ms period), the root's mounts, the /etc
//! files, volumes and tmpfs (parents first), and `--init`: pier's own binary bound read-only at
//! /dev/init and run as `/dev/init -- ARGS` (see `init.rs`). The seccomp profile is Docker's
//! default re-resolved for the final capabilities, or a file in Docker's or OCI's format
//! converted as dockerd does (`spec/seccomp.rs`). pier-runtime sets no HOME, so the engine adds
//! the user's home from passwd, as runc would. No I/O but reading passwd/group and a profile.
//! Tests: unit tests below and in the submodules (the values Docker writes, field by field);
//! crates/engine/tests/priv_rootfs.rs runs generated specs.
use oci_spec::runtime::Spec;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

use crate::config::{caller_bounding_set, RunConfig, Tmpfs, Volume, ALL_CAPS};
use crate::rootfs::Prepared;

mod seccomp;
mod user;

/// The container's network namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetNs {
    /// A new, empty one (`none`, and networks the engine attaches after `create`).
    New,
    /// Join this one (`container:NAME` gives the other container's `/proc/PID/ns/net`).
    Join(PathBuf),
    /// The host's (`--network host`).
    Host,
}

/// Everything the spec needs beyond the config.
#[derive(Debug, Clone)]
pub struct Context {
    pub root: Prepared,
    pub hostname: String,
    pub netns: NetNs,
    /// Generated `/etc/hosts`, `/etc/hostname`, `/etc/resolv.conf` (None with `--network host`
    /// for hosts and resolv.conf, which then come from the host root or image).
    pub hosts: Option<PathBuf>,
    pub hostname_file: Option<PathBuf>,
    pub resolv_conf: Option<PathBuf>,
    /// `linux.cgroupsPath`; empty leaves it out (the runtime's default location).
    pub cgroups_path: String,
    /// The binary bound at /dev/init with `--init` (pier's own executable).
    pub init_binary: Option<PathBuf>,
}

/// Why a spec could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// oci-spec refused the generated JSON (a bug in this file).
    #[error("generated spec: {source}")]
    Generated { source: serde_json::Error },
    /// `seccomp=FILE` could not be read, converted or validated.
    #[error("seccomp profile {path}: {reason}")]
    Seccomp { path: PathBuf, reason: String },
    /// `--init` without `Context.init_binary`.
    #[error("--init: no init binary to bind at /dev/init")]
    NoInitBinary,
    /// `-u`: the user or group is not in the root's /etc/passwd or /etc/group.
    #[error("-u {user}: {reason}")]
    User { user: String, reason: String },
}

/// The container's config.json.
pub fn build(config: &RunConfig, ctx: &Context) -> Result<Spec, SpecError> {
    if config.init && ctx.init_binary.is_none() {
        return Err(SpecError::NoInitBinary);
    }
    let user = user::resolve(config.user.as_deref(), &ctx.root.etc_root)?;
    let caps = capabilities(&config.cap_add, &config.cap_drop, caller_bounding_set());
    let mut linux = json!({
        "cgroupsPath": ctx.cgroups_path,
        "namespaces": namespaces(&ctx.netns),
        "maskedPaths": MASKED_PATHS,
        "readonlyPaths": READONLY_PATHS,
        "devices": [],
        "resources": resources(config, swap_accounting()),
        "sysctl": sysctls(&ctx.netns),
    });
    if ctx.cgroups_path.is_empty() {
        if let Some(linux) = linux.as_object_mut() {
            linux.remove("cgroupsPath");
        }
    }
    let mut spec = json!({
        "ociVersion": "1.0.2",
        "process": process(config, ctx, &user, &caps),
        "root": {"path": ctx.root.root, "readonly": ctx.root.readonly},
        "hostname": ctx.hostname,
        "mounts": mounts(config, ctx),
        "linux": linux,
    });
    if let Some(profile) = seccomp::profile(&config.seccomp, &caps)? {
        spec["linux"]["seccomp"] = profile;
    }
    serde_json::from_value(spec).map_err(|source| SpecError::Generated { source })
}

/// Docker's default capabilities (moby `oci.DefaultCapabilities`).
pub const DEFAULT_CAPS: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// Docker's masked paths (moby `oci.DefaultLinuxSpec`, with the powercap path Docker 25 added).
const MASKED_PATHS: [&str; 11] = [
    "/proc/asound",
    "/proc/acpi",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/proc/scsi",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
];

const READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// Docker's `PATH` (moby `system.DefaultPathEnv`).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Docker's capability arithmetic (moby `caps.TweakCapabilities`): `--cap-add ALL` gives every
/// capability pier holds minus the drops; `--cap-drop ALL` gives only the adds; otherwise the
/// defaults minus the drops plus the adds. In that order, without duplicates.
pub fn capabilities(add: &[String], drop: &[String], bounding: u64) -> Vec<String> {
    let all = || {
        ALL_CAPS
            .iter()
            .enumerate()
            .filter(move |(bit, _)| bounding & (1 << bit) != 0)
            .map(|(_, c)| c.to_string())
    };
    let has_all = |list: &[String]| list.iter().any(|c| c == "ALL");
    let caps: Vec<String> = if has_all(add) {
        all().filter(|c| !drop.contains(c)).collect()
    } else if has_all(drop) {
        add.to_vec()
    } else {
        let kept = DEFAULT_CAPS.iter().map(|c| c.to_string());
        kept.filter(|c| !drop.contains(c))
            .chain(add.iter().cloned())
            .collect()
    };
    let mut seen = std::collections::HashSet::new();
    caps.into_iter()
        .filter(|c| seen.insert(c.clone()))
        .collect()
}

fn process(config: &RunConfig, ctx: &Context, user: &user::User, caps: &[String]) -> Value {
    let mut args = config.args.clone();
    if config.init {
        args.splice(0..0, [INIT_PATH.to_string(), "--".to_string()]);
    }
    let rlimits: Vec<Value> = config
        .ulimits
        .iter()
        .map(|u| {
            let typ = format!("RLIMIT_{}", u.name.to_ascii_uppercase());
            json!({"type": typ, "soft": u.soft, "hard": u.hard})
        })
        .collect();
    json!({
        "terminal": config.tty,
        "user": {"uid": user.uid, "gid": user.gid, "additionalGids": user.additional_gids},
        "args": args,
        "env": environment(config, &ctx.hostname, &user.home),
        "cwd": config.workdir.as_deref().unwrap_or("/"),
        "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
        "rlimits": rlimits,
        "noNewPrivileges": config.no_new_privileges,
    })
}

/// Where `--init` binds pier's own binary; pier runs its init when started under this name.
pub const INIT_PATH: &str = "/dev/init";

/// Docker's order (moby `CreateDaemonEnvironment`): PATH, HOSTNAME, TERM with -t, then the
/// user's variables, each replacing an earlier one of its name. HOME last, from the user's
/// passwd entry, unless set (runc's rule, which pier-runtime leaves to the engine).
fn environment(config: &RunConfig, hostname: &str, home: &str) -> Vec<String> {
    let mut env = vec![
        format!("PATH={DEFAULT_PATH}"),
        format!("HOSTNAME={hostname}"),
    ];
    if config.tty {
        env.push("TERM=xterm".to_string());
    }
    for var in &config.env {
        let key = var.split_once('=').map_or(var.as_str(), |(k, _)| k);
        match env
            .iter_mut()
            .find(|e| e.split_once('=').map(|(k, _)| k) == Some(key))
        {
            Some(slot) => slot.clone_from(var),
            None => env.push(var.clone()),
        }
    }
    if !env.iter().any(|e| e.starts_with("HOME=")) {
        env.push(format!("HOME={home}"));
    }
    env
}

/// Docker's namespaces (mount, network, uts, pid, ipc) plus a private cgroup namespace; the
/// network one new, joined or absent (host).
fn namespaces(netns: &NetNs) -> Vec<Value> {
    let mut ns = vec![json!({"type": "mount"})];
    match netns {
        NetNs::New => ns.push(json!({"type": "network"})),
        NetNs::Join(path) => ns.push(json!({"type": "network", "path": path})),
        NetNs::Host => {}
    }
    for typ in ["uts", "pid", "ipc", "cgroup"] {
        ns.push(json!({"type": typ}));
    }
    ns
}

/// Docker 20.10+ lets a container with its own network namespace bind low ports and ping
/// without privileges.
fn sysctls(netns: &NetNs) -> Value {
    match netns {
        NetNs::New => json!({
            "net.ipv4.ip_unprivileged_port_start": "0",
            "net.ipv4.ping_group_range": "0 2147483647",
        }),
        NetNs::Join(_) | NetNs::Host => json!({}),
    }
}

/// Docker's device cgroup rules (moby `oci.DefaultLinuxSpec`) and the limits asked for:
/// `--cpus` as a CFS quota over a 100 ms period, `--memory` (with Docker's default swap where
/// the host accounts swap), `--pids-limit`.
fn resources(config: &RunConfig, swap_accounting: bool) -> Value {
    let rule = |allow: bool, major: i64, minor: i64| json!({"allow": allow, "type": "c", "major": major, "minor": minor, "access": "rwm"});
    let mut res = json!({"devices": [
        {"allow": false, "access": "rwm"},
        rule(true, 1, 5),
        rule(true, 1, 3),
        rule(true, 1, 9),
        rule(true, 1, 8),
        rule(true, 5, 0),
        rule(true, 5, 1),
        rule(false, 10, 229),
    ]});
    if let Some(milli) = config.cpus_milli {
        res["cpu"] = json!({"quota": milli * 100, "period": CPU_PERIOD_US});
    }
    if let Some(limit) = config.memory_bytes {
        res["memory"] = json!({"limit": limit});
        if swap_accounting {
            // Docker: without --memory-swap, as much swap as memory (memory+swap = 2 × limit).
            res["memory"]["swap"] = json!(limit.saturating_mul(2));
        }
    }
    if let Some(limit) = config.pids_limit {
        res["pids"] = json!({"limit": limit});
    }
    res
}

/// Whether cgroups account swap here (cgroup v1 `memory.memsw.*`, or a cgroup v2 memory
/// controller), as dockerd checks before giving a container swap.
fn swap_accounting() -> bool {
    let v1 = Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes");
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers");
    v1.exists() || v2.is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
}

/// Docker's CFS period for `--cpus`.
pub const CPU_PERIOD_US: u64 = 100_000;

/// Docker's default mounts (moby `oci.DefaultLinuxSpec`; /dev/shm with the daemon's 64 MiB).
fn default_mounts() -> Vec<Value> {
    let m = |dst: &str, typ: &str, src: &str, opts: &[&str]| json!({"destination": dst, "type": typ, "source": src, "options": opts});
    vec![
        m("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        m(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        m(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        m(
            "/sys",
            "sysfs",
            "sysfs",
            &["nosuid", "noexec", "nodev", "ro"],
        ),
        m(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["ro", "nosuid", "noexec", "nodev"],
        ),
        m(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        m(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=67108864"],
        ),
    ]
}

/// The root's own mounts, Docker's defaults, the generated /etc files, the init, then the
/// user's volumes and tmpfs parents first (Docker sorts them by depth); a user mount replaces
/// a root or default mount of the same destination.
fn mounts(config: &RunConfig, ctx: &Context) -> Vec<Value> {
    let mut user: Vec<(PathBuf, Value)> = config.volumes.iter().map(volume).collect();
    user.extend(config.tmpfs.iter().map(tmpfs));
    user.sort_by_key(|(dst, _)| dst.components().count());
    let taken = |m: &Value| {
        let dst = m["destination"].as_str().map(Path::new);
        user.iter().any(|(d, _)| Some(d.as_path()) == dst)
    };
    let root = ctx
        .root
        .mounts
        .iter()
        .filter_map(|m| serde_json::to_value(m).ok());
    let mut out: Vec<Value> = root.chain(default_mounts()).filter(|m| !taken(m)).collect();
    out.extend(etc_files(ctx, config.read_only));
    if let (true, Some(init)) = (config.init, &ctx.init_binary) {
        out.push(
            json!({"destination": INIT_PATH, "type": "bind", "source": init,
            "options": ["bind", "ro", "nosuid", "nodev"]}),
        );
    }
    out.extend(user.into_iter().map(|(_, m)| m));
    out
}

/// /etc/hosts, /etc/hostname, /etc/resolv.conf: binds of the engine's files, writable as in
/// Docker unless the root is read-only.
fn etc_files(ctx: &Context, read_only: bool) -> Vec<Value> {
    let files = [
        ("/etc/resolv.conf", &ctx.resolv_conf),
        ("/etc/hostname", &ctx.hostname_file),
        ("/etc/hosts", &ctx.hosts),
    ];
    let mut options = vec!["rbind", "rprivate"];
    if read_only {
        options.push("ro");
    }
    files
        .into_iter()
        .filter_map(|(dst, src)| Some((dst, src.as_ref()?)))
        .map(|(dst, src)| {
            json!({"destination": dst, "type": "bind", "source": src, "options": options})
        })
        .collect()
}

/// `-v`: Docker's bind (`rbind`, `rprivate`, `ro` with `:ro`).
fn volume(v: &Volume) -> (PathBuf, Value) {
    let mut options = vec!["rbind", "rprivate"];
    if v.read_only {
        options.push("ro");
    }
    let m = json!({"destination": v.destination, "type": "bind", "source": v.source,
        "options": options});
    (v.destination.clone(), m)
}

/// `--tmpfs`: Docker's defaults `noexec,nosuid,nodev` merged with the user's options (a flag
/// replaces its opposite, a `key=` option an earlier one of its key).
fn tmpfs(t: &Tmpfs) -> (PathBuf, Value) {
    let mut options: Vec<String> = ["noexec", "nosuid", "nodev"].map(String::from).to_vec();
    for opt in &t.options {
        options.retain(|old| !overrides(opt, old));
        options.push(opt.clone());
    }
    let m = json!({"destination": t.destination, "type": "tmpfs", "source": "tmpfs",
        "options": options});
    (t.destination.clone(), m)
}

/// True when tmpfs option `new` replaces `old`: the same `key=`, or the same flag or its opposite.
fn overrides(new: &str, old: &str) -> bool {
    let key = |o: &str| o.split_once('=').map(|(k, _)| k.to_string());
    let flag = |o: &str| match o {
        "ro" => "rw".to_string(),
        o => o.strip_prefix("no").unwrap_or(o).to_string(),
    };
    match (key(new), key(old)) {
        (Some(a), Some(b)) => a == b,
        (None, None) => flag(new) == flag(old),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{RunArgs, Seccomp};

    fn config(edit: impl FnOnce(&mut RunArgs)) -> RunConfig {
        let mut args = RunArgs {
            rootfs: "host".into(),
            command: vec!["/bin/sh".into(), "-c".into(), "true".into()],
            ..RunArgs::default()
        };
        edit(&mut args);
        RunConfig::parse(&args).unwrap()
    }

    fn context(etc: &Path) -> Context {
        Context {
            root: Prepared {
                root: PathBuf::from("/state/hostroot"),
                readonly: true,
                mounts: Vec::new(),
                etc_root: etc.to_path_buf(),
            },
            hostname: "c0ffee".into(),
            netns: NetNs::New,
            hosts: Some("/state/c/hosts".into()),
            hostname_file: Some("/state/c/hostname".into()),
            resolv_conf: Some("/state/c/resolv.conf".into()),
            cgroups_path: "/pier/c0ffee".into(),
            init_binary: Some("/usr/bin/pier".into()),
        }
    }

    /// The spec as JSON, from a config and a context edit, with a Debian-like /etc.
    fn spec_json(edit: impl FnOnce(&mut RunArgs), ctx_edit: impl FnOnce(&mut Context)) -> Value {
        let etc = tempfile::tempdir().unwrap();
        std::fs::create_dir(etc.path().join("etc")).unwrap();
        std::fs::write(
            etc.path().join("etc/passwd"),
            "root:x:0:0:root:/root:/bin/bash\nwww-data:x:33:33:www:/var/www:/bin/false\n",
        )
        .unwrap();
        std::fs::write(
            etc.path().join("etc/group"),
            "root:x:0:\nadm:x:4:www-data\n",
        )
        .unwrap();
        let mut ctx = context(etc.path());
        ctx_edit(&mut ctx);
        serde_json::to_value(build(&config(edit), &ctx).unwrap()).unwrap()
    }

    fn default_spec() -> Value {
        spec_json(|_| {}, |_| {})
    }

    fn destinations(spec: &Value) -> Vec<&str> {
        let mounts = spec["mounts"].as_array().unwrap();
        mounts
            .iter()
            .map(|m| m["destination"].as_str().unwrap())
            .collect()
    }

    fn mount<'a>(spec: &'a Value, dst: &str) -> &'a Value {
        let mounts = spec["mounts"].as_array().unwrap();
        mounts.iter().find(|m| m["destination"] == dst).unwrap()
    }

    /// What dockerd 20.10 wrote for `docker run IMAGE sleep 100` (tests/data/README.md).
    fn docker_written() -> Value {
        serde_json::from_str(include_str!("../tests/data/docker-20.10-config.json")).unwrap()
    }

    #[test]
    fn the_spec_carries_what_dockerd_writes() {
        let docker = docker_written();
        let ours = spec_json(
            |a| a.command = vec!["sleep".into(), "100".into()],
            |c| c.hostname = docker["hostname"].as_str().unwrap().into(),
        );
        let (dp, op) = (&docker["process"], &ours["process"]);
        assert_eq!(op["args"], dp["args"]);
        assert_eq!(op["cwd"], dp["cwd"]);
        assert_eq!(
            (&op["user"]["uid"], &op["user"]["gid"]),
            (&dp["user"]["uid"], &dp["user"]["gid"])
        );
        let mut env = dp["env"].as_array().unwrap().clone();
        env.push(json!("HOME=/root")); // runc's addition at exec; pier-runtime leaves it to us
        assert_eq!(op["env"], json!(env));
        let sorted = |v: &Value| {
            let mut caps: Vec<String> = serde_json::from_value(v.clone()).unwrap();
            caps.sort();
            caps
        };
        for set in ["bounding", "effective", "permitted"] {
            assert_eq!(
                sorted(&op["capabilities"][set]),
                sorted(&dp["capabilities"][set])
            );
        }
        let (dm, om) = (
            docker["mounts"].as_array().unwrap(),
            ours["mounts"].as_array().unwrap(),
        );
        assert_eq!(om.len(), dm.len());
        for (d, o) in dm.iter().zip(om) {
            assert_eq!(
                (&o["destination"], &o["type"], &o["options"]),
                (&d["destination"], &d["type"], &d["options"])
            );
        }
        let (dl, ol) = (&docker["linux"], &ours["linux"]);
        for key in ["readonlyPaths", "sysctl"] {
            assert_eq!(ol[key], dl[key], "{key}");
        }
        assert_eq!(ol["resources"]["devices"], dl["resources"]["devices"]);
        let mut masked = dl["maskedPaths"].as_array().unwrap().clone();
        masked.push(json!("/sys/devices/virtual/powercap")); // added by Docker 25
        assert_eq!(ol["maskedPaths"], json!(masked));
        let mut ns = dl["namespaces"].as_array().unwrap().clone();
        ns.push(json!({"type": "cgroup"})); // dockerd's default on cgroup v2; pier's everywhere
        assert_eq!(ol["namespaces"], json!(ns));
    }

    #[test]
    fn dockers_default_capabilities_without_inheritable_or_ambient() {
        let caps = &default_spec()["process"]["capabilities"];
        let mut docker = DEFAULT_CAPS.to_vec();
        docker.sort_unstable();
        for set in ["bounding", "effective", "permitted"] {
            // oci-spec keeps capabilities in a set: compare them sorted.
            let mut got: Vec<&str> = caps[set]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            got.sort_unstable();
            assert_eq!(got, docker, "{set}");
        }
        assert!(caps.get("inheritable").is_none_or(|v| v.is_null()));
        assert!(caps.get("ambient").is_none_or(|v| v.is_null()));
    }

    #[test]
    fn cap_add_and_drop_as_docker_computes_them() {
        let s = |v: &[&str]| v.iter().map(|c| c.to_string()).collect::<Vec<_>>();
        let all = u64::MAX;
        let caps = capabilities(&s(&["CAP_SYS_ADMIN"]), &s(&["CAP_NET_RAW"]), all);
        assert_eq!(caps.len(), 14);
        assert!(caps.contains(&"CAP_SYS_ADMIN".into()) && !caps.contains(&"CAP_NET_RAW".into()));
        assert_eq!(
            capabilities(&s(&["CAP_KILL"]), &s(&["ALL"]), all),
            ["CAP_KILL"]
        );
        let everything = capabilities(&s(&["ALL"]), &s(&["CAP_SYS_TIME"]), all);
        assert_eq!(everything.len(), ALL_CAPS.len() - 1);
        let without_resource = all & !(1 << 24);
        let bounded = capabilities(&s(&["ALL"]), &[], without_resource);
        assert!(!bounded.contains(&"CAP_SYS_RESOURCE".into()));
        assert_eq!(capabilities(&s(&["CAP_KILL"]), &[], all), DEFAULT_CAPS);
    }

    #[test]
    fn masked_and_readonly_paths_are_dockers() {
        let spec = default_spec();
        assert_eq!(spec["linux"]["maskedPaths"], json!(MASKED_PATHS));
        assert!(MASKED_PATHS.contains(&"/proc/kcore") && MASKED_PATHS.contains(&"/sys/firmware"));
        assert_eq!(
            spec["linux"]["readonlyPaths"],
            json!([
                "/proc/bus",
                "/proc/fs",
                "/proc/irq",
                "/proc/sys",
                "/proc/sysrq-trigger"
            ])
        );
    }

    #[test]
    fn default_mounts_devices_and_rules() {
        let spec = default_spec();
        let dsts = destinations(&spec);
        let defaults = [
            "/proc",
            "/dev",
            "/dev/pts",
            "/sys",
            "/sys/fs/cgroup",
            "/dev/mqueue",
            "/dev/shm",
        ];
        assert_eq!(&dsts[..7], defaults);
        assert_eq!(mount(&spec, "/dev/shm")["options"][4], "size=67108864");
        assert_eq!(
            mount(&spec, "/sys")["options"],
            json!(["nosuid", "noexec", "nodev", "ro"])
        );
        assert_eq!(spec["linux"]["devices"], json!([]));
        let rules = spec["linux"]["resources"]["devices"].as_array().unwrap();
        assert_eq!(rules[0], json!({"allow": false, "access": "rwm"}));
        let allowed: Vec<(i64, i64)> = rules[1..]
            .iter()
            .filter(|r| r["allow"] == true)
            .map(|r| (r["major"].as_i64().unwrap(), r["minor"].as_i64().unwrap()))
            .collect();
        assert_eq!(allowed, [(1, 5), (1, 3), (1, 9), (1, 8), (5, 0), (5, 1)]);
    }

    #[test]
    fn namespaces_follow_the_network() {
        let types = |spec: &Value| -> Vec<String> {
            let ns = spec["linux"]["namespaces"].as_array().unwrap();
            ns.iter()
                .map(|n| n["type"].as_str().unwrap().to_string())
                .collect()
        };
        let spec = default_spec();
        assert_eq!(
            types(&spec),
            ["mount", "network", "uts", "pid", "ipc", "cgroup"]
        );
        assert_eq!(
            spec["linux"]["sysctl"]["net.ipv4.ip_unprivileged_port_start"],
            "0"
        );
        let host = spec_json(|_| {}, |c| c.netns = NetNs::Host);
        assert_eq!(types(&host), ["mount", "uts", "pid", "ipc", "cgroup"]);
        let join = spec_json(|_| {}, |c| c.netns = NetNs::Join("/proc/42/ns/net".into()));
        assert_eq!(join["linux"]["namespaces"][1]["path"], "/proc/42/ns/net");
        assert!(join["linux"]["sysctl"]
            .get("net.ipv4.ip_unprivileged_port_start")
            .is_none());
    }

    #[test]
    fn environment_in_dockers_order() {
        let spec = spec_json(
            |a| {
                a.tty = true;
                a.env = vec!["A=1".into(), "PATH=/opt/bin".into(), "A=2".into()];
            },
            |_| {},
        );
        assert_eq!(
            spec["process"]["env"],
            json!([
                "PATH=/opt/bin",
                "HOSTNAME=c0ffee",
                "TERM=xterm",
                "A=2",
                "HOME=/root"
            ])
        );
        let plain = default_spec();
        assert_eq!(
            plain["process"]["env"],
            json!([
                format!("PATH={DEFAULT_PATH}"),
                "HOSTNAME=c0ffee",
                "HOME=/root"
            ])
        );
        assert_eq!(plain["process"]["terminal"], false);
    }

    #[test]
    fn users_come_from_the_roots_passwd() {
        let spec = spec_json(|a| a.user = Some("www-data".into()), |_| {});
        assert_eq!(
            spec["process"]["user"],
            json!({"uid": 33, "gid": 33, "additionalGids": [4]})
        );
        assert!(spec["process"]["env"]
            .as_array()
            .unwrap()
            .contains(&json!("HOME=/var/www")));
        let root = default_spec();
        assert_eq!(root["process"]["user"]["uid"], 0);
        let etc = tempfile::tempdir().unwrap();
        let err = build(
            &config(|a| a.user = Some("ghost".into())),
            &context(etc.path()),
        );
        assert!(err
            .unwrap_err()
            .to_string()
            .contains("unable to find user ghost"));
    }

    #[test]
    fn resources_rlimits_and_flags() {
        let spec = spec_json(
            |a| {
                a.cpus = Some("1.5".into());
                a.memory = Some("256m".into());
                a.pids_limit = Some(100);
                a.ulimit = vec!["nofile=512:1024".into()];
                a.workdir = Some("/srv".into());
                a.read_only = true;
                a.security_opt = vec!["no-new-privileges".into()];
            },
            |_| {},
        );
        let res = &spec["linux"]["resources"];
        assert_eq!(res["cpu"], json!({"quota": 150000, "period": 100000}));
        assert_eq!(res["memory"]["limit"], 256 << 20);
        assert_eq!(res["pids"]["limit"], 100);
        assert_eq!(
            spec["process"]["rlimits"],
            json!([{"type": "RLIMIT_NOFILE", "soft": 512, "hard": 1024}])
        );
        assert_eq!(spec["process"]["cwd"], "/srv");
        assert_eq!(spec["process"]["noNewPrivileges"], true);
        assert_eq!(spec["linux"]["cgroupsPath"], "/pier/c0ffee");
        assert_eq!(spec["hostname"], "c0ffee");
        assert_eq!(
            spec["root"],
            json!({"path": "/state/hostroot", "readonly": true})
        );
        assert_eq!(
            mount(&spec, "/etc/hosts")["options"],
            json!(["rbind", "rprivate", "ro"])
        );
        let plain = default_spec();
        assert!(plain["process"]
            .get("rlimits")
            .is_none_or(|r| r == &json!([])));
        assert!(plain["linux"]["resources"]
            .get("memory")
            .is_none_or(|m| m.is_null()));
    }

    #[test]
    fn memory_gets_dockers_swap_where_swap_is_accounted() {
        let c = config(|a| a.memory = Some("64m".into()));
        assert_eq!(
            resources(&c, true)["memory"],
            json!({"limit": 64 << 20, "swap": 128 << 20})
        );
        assert_eq!(resources(&c, false)["memory"], json!({"limit": 64 << 20}));
    }

    #[test]
    fn init_needs_a_binary() {
        let etc = tempfile::tempdir().unwrap();
        let mut ctx = context(etc.path());
        ctx.init_binary = None;
        let err = build(&config(|a| a.init = true), &ctx)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--init"), "{err}");
    }

    #[test]
    fn init_runs_first_from_a_read_only_bind() {
        let spec = spec_json(|a| a.init = true, |_| {});
        assert_eq!(
            spec["process"]["args"],
            json!(["/dev/init", "--", "/bin/sh", "-c", "true"])
        );
        let init = mount(&spec, "/dev/init");
        assert_eq!(init["source"], "/usr/bin/pier");
        assert!(init["options"].as_array().unwrap().contains(&json!("ro")));
        let dsts = destinations(&spec);
        let pos = |d: &str| dsts.iter().position(|x| *x == d).unwrap();
        assert!(pos("/dev/init") > pos("/dev"));
        assert!(!destinations(&default_spec()).contains(&"/dev/init"));
    }

    #[test]
    fn etc_files_volumes_and_tmpfs() {
        let src = tempfile::tempdir().unwrap();
        let v = format!("{}:/data/deep/er:ro", src.path().display());
        let w = format!("{}:/data", src.path().display());
        let spec = spec_json(
            |a| {
                a.volumes = vec![v, w];
                a.tmpfs = vec!["/dev/shm:size=1m".into(), "/cache:exec,mode=700".into()];
            },
            |_| {},
        );
        let dsts = destinations(&spec);
        let tail = &dsts[dsts.len() - 4..];
        assert_eq!(tail, ["/data", "/cache", "/dev/shm", "/data/deep/er"]);
        assert_eq!(dsts.iter().filter(|d| **d == "/dev/shm").count(), 1);
        assert_eq!(
            mount(&spec, "/data/deep/er")["options"],
            json!(["rbind", "rprivate", "ro"])
        );
        assert_eq!(
            mount(&spec, "/cache")["options"],
            json!(["nosuid", "nodev", "exec", "mode=700"])
        );
        assert_eq!(
            mount(&spec, "/etc/resolv.conf")["source"],
            "/state/c/resolv.conf"
        );
        assert_eq!(
            mount(&spec, "/etc/hostname")["options"],
            json!(["rbind", "rprivate"])
        );
        let none = spec_json(|_| {}, |c| c.hosts = None);
        assert!(!destinations(&none).contains(&"/etc/hosts"));
    }

    #[test]
    fn tmpfs_options_override_dockers_defaults() {
        let t = |opts: &[&str]| {
            let t = Tmpfs {
                destination: "/t".into(),
                options: opts.iter().map(|o| o.to_string()).collect(),
            };
            tmpfs(&t).1["options"].clone()
        };
        assert_eq!(t(&[]), json!(["noexec", "nosuid", "nodev"]));
        assert_eq!(
            t(&["suid", "size=1m", "size=2m"]),
            json!(["noexec", "nodev", "suid", "size=2m"])
        );
        assert_eq!(t(&["ro", "rw"]), json!(["noexec", "nosuid", "nodev", "rw"]));
    }

    #[test]
    fn seccomp_follows_the_security_opt_and_the_capabilities() {
        let spec = default_spec();
        let shipped: Value = serde_json::from_str(pier_seccomp::DOCKER_DEFAULT_PROFILE).unwrap();
        assert_eq!(spec["linux"]["seccomp"]["syscalls"], shipped["syscalls"]);
        let unconfined = spec_json(
            |a| a.security_opt = vec!["seccomp=unconfined".into()],
            |_| {},
        );
        assert!(unconfined["linux"]
            .get("seccomp")
            .is_none_or(|s| s.is_null()));
        let admin = spec_json(|a| a.cap_add = vec!["SYS_ADMIN".into()], |_| {});
        let rules = admin["linux"]["seccomp"]["syscalls"].as_array().unwrap();
        assert!(rules
            .iter()
            .any(|r| r["names"].as_array().unwrap().contains(&json!("mount"))));
    }

    #[test]
    fn a_profile_file_in_dockers_format_is_converted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.json");
        let profile = json!({"defaultAction": "SCMP_ACT_ALLOW",
            "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
            "syscalls": [{"names": ["mount"], "action": "SCMP_ACT_ERRNO",
                "excludes": {"caps": ["CAP_SYS_ADMIN"]}}]});
        std::fs::write(&file, profile.to_string()).unwrap();
        let opt = format!("seccomp={}", file.display());
        let spec = spec_json(|a| a.security_opt = vec![opt], |_| {});
        let seccomp = &spec["linux"]["seccomp"];
        assert_eq!(seccomp["syscalls"][0]["names"], json!(["mount"]));
        assert!(seccomp["syscalls"][0].get("excludes").is_none());
        let mut config = config(|_| {});
        config.seccomp = Seccomp::Profile(dir.path().join("gone.json"));
        let err = build(&config, &context(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("seccomp profile") && err.contains("gone.json"),
            "{err}"
        );
    }
}
