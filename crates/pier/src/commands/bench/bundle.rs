//! The benchmark's OCI bundles: one busybox rootfs running `/bin/true`, and one `config.json` per
//! seccomp mode (none, and Docker's default profile).
//!
//! Theory of operation: the configuration is what Docker 20.10 hands a runtime for
//! `docker run --network none busybox true`, minus the three per-container bind mounts of
//! /etc/{resolv.conf,hostname,hosts}: the same mounts, masked and read-only paths, the same 14
//! capabilities, new pid/ipc/uts/mount/network namespaces, no terminal. The seccomp profile is
//! Docker's default as pier ships it (`pier_seccomp::DOCKER_DEFAULT_PROFILE`, from current Moby;
//! Docker 20.10's own differs by six allowed syscalls). `ociVersion` is
//! 1.0.2 because crun 1.8.1 rejects versions without "1.0". The root is shared by both bundles
//! (an absolute `root.path`) and read-write, as Docker's is.
//!
//! Privileges: none (writes files under the given directory). Unit tests below.
use anyhow::Context;
use serde_json::{json, Value};
use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// Where Debian's busybox-static installs its binary.
pub const BUSYBOX: &str = "/bin/busybox";

/// Docker's default seccomp profile in the OCI form dockerd passes to a runtime.
const DOCKER_SECCOMP: &str = pier_seccomp::DOCKER_DEFAULT_PROFILE;

/// The seccomp modes every runtime is measured in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Seccomp {
    /// No seccomp filter.
    None,
    /// Docker's default profile.
    Docker,
}

impl Seccomp {
    pub fn label(self) -> &'static str {
        match self {
            Seccomp::None => "none",
            Seccomp::Docker => "docker",
        }
    }
}

/// The bundle directories (one per seccomp mode) under a work dir, sharing one rootfs.
#[derive(Debug)]
pub struct Bundles {
    dir: PathBuf,
}

impl Bundles {
    /// The bundles of a work dir built earlier.
    pub fn at(dir: &Path) -> Bundles {
        Bundles {
            dir: dir.to_path_buf(),
        }
    }

    /// Builds the rootfs under `dir` and one bundle per mode.
    pub fn build(dir: &Path) -> anyhow::Result<Bundles> {
        let rootfs = dir.join("rootfs");
        busybox_rootfs(&rootfs)?;
        for mode in [Seccomp::None, Seccomp::Docker] {
            let bundle = dir.join(format!("bundle-{}", mode.label()));
            fs::create_dir_all(&bundle)
                .with_context(|| format!("creating {}", bundle.display()))?;
            let config = serde_json::to_string_pretty(&config(&rootfs, mode)?)?;
            let path = bundle.join("config.json");
            fs::write(&path, config).with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(Bundles::at(dir))
    }

    pub fn path(&self, mode: Seccomp) -> PathBuf {
        self.dir.join(format!("bundle-{}", mode.label()))
    }
}

/// A rootfs holding /bin/busybox and the two applets the benchmark needs, plus the mount points.
pub fn busybox_rootfs(rootfs: &Path) -> anyhow::Result<()> {
    for sub in ["bin", "proc", "sys", "dev", "tmp", "etc"] {
        let path = rootfs.join(sub);
        fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
    }
    let target = rootfs.join("bin/busybox");
    fs::copy(BUSYBOX, &target).with_context(|| {
        format!("copying {BUSYBOX} into the bundle (install busybox-static: apt-get install busybox-static)")
    })?;
    for applet in ["true", "sh"] {
        let link = rootfs.join("bin").join(applet);
        symlink("busybox", &link).with_context(|| format!("linking {}", link.display()))?;
    }
    Ok(())
}

/// Docker's default capabilities: the engine's list, so the bundle and `pier run` agree.
const CAPABILITIES: [&str; 14] = pier_engine::spec::DEFAULT_CAPS;

/// The config.json of one mode.
fn config(rootfs: &Path, mode: Seccomp) -> anyhow::Result<Value> {
    let mut linux = json!({
        "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"}],
        "maskedPaths": ["/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
            "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware"],
        "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
    });
    if mode == Seccomp::Docker {
        let profile: Value = serde_json::from_str(DOCKER_SECCOMP)
            .context("parsing the embedded docker seccomp profile")?;
        linux["seccomp"] = profile;
    }
    Ok(json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false,
            "user": {"uid": 0, "gid": 0},
            "args": ["/bin/true"],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "cwd": "/",
            "capabilities": {"bounding": CAPABILITIES, "effective": CAPABILITIES, "permitted": CAPABILITIES},
            "noNewPrivileges": false,
        },
        "root": {"path": rootfs, "readonly": false},
        "hostname": "pier-bench",
        "mounts": mounts(),
        "linux": linux,
    }))
}

fn mounts() -> Value {
    json!([
        {"destination": "/proc", "type": "proc", "source": "proc", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
            "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
            "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        {"destination": "/sys/fs/cgroup", "type": "cgroup", "source": "cgroup",
            "options": ["ro", "nosuid", "noexec", "nodev"]},
        {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue", "options": ["nosuid", "noexec", "nodev"]},
        {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
            "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=67108864"]},
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_mode_carries_the_profile_and_none_mode_does_not() {
        let rootfs = Path::new("/nonexistent/rootfs");
        let none = config(rootfs, Seccomp::None).expect("config");
        let docker = config(rootfs, Seccomp::Docker).expect("config");
        assert!(none["linux"].get("seccomp").is_none());
        assert_eq!(
            docker["linux"]["seccomp"]["defaultAction"],
            "SCMP_ACT_ERRNO"
        );
        assert!(docker["linux"]["seccomp"]["syscalls"]
            .as_array()
            .is_some_and(|s| !s.is_empty()));
    }

    #[test]
    fn config_parses_as_an_oci_spec() {
        for mode in [Seccomp::None, Seccomp::Docker] {
            let value = config(Path::new("/r"), mode).expect("config");
            let spec: oci_spec::runtime::Spec =
                serde_json::from_value(value).expect("valid OCI spec");
            assert_eq!(
                spec.process().as_ref().and_then(|p| p.args().clone()),
                Some(vec!["/bin/true".to_string()])
            );
            assert_eq!(spec.version(), "1.0.2");
        }
    }

    #[test]
    fn bundles_share_one_rootfs() {
        let dir = tempfile::tempdir().expect("tempdir");
        if !Path::new(BUSYBOX).exists() {
            eprintln!("skipped: {BUSYBOX} missing (busybox-static)");
            return;
        }
        let bundles = Bundles::build(dir.path()).expect("build");
        for mode in [Seccomp::None, Seccomp::Docker] {
            let text =
                fs::read_to_string(bundles.path(mode).join("config.json")).expect("config.json");
            let value: Value = serde_json::from_str(&text).expect("json");
            assert_eq!(value["root"]["path"], json!(dir.path().join("rootfs")));
        }
        assert!(dir.path().join("rootfs/bin/true").exists());
    }
}
