//! Where a test's or example's ebpf engine keeps its programs: a bpffs of its own (so pins never
//! meet the host's /sys/fs/bpf) and a `pier-test-<name>-<pid>` cgroup2 directory to attach them
//! to. Dropping it unpins everything, unmounts the bpffs and removes the cgroup (which must be
//! empty by then: move any process back out first).
//!
//! Shared by priv_engines_support (the tests) and examples/publish_scale.rs (through `#[path]`).
//! Privileges: root (mount, cgroup2).
use std::path::{Path, PathBuf};

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use pier_publish::engine::Settings;

/// The cgroup2 mount of this machine (hybrid hierarchy).
pub const CGROUP2: &str = "/sys/fs/cgroup/unified";

/// A private bpffs and a test cgroup; both go on drop.
pub struct BpfHome {
    bpffs: tempfile::TempDir,
    pub cgroup: PathBuf,
}

impl BpfHome {
    /// Mounts a bpffs on a `pier-test-bpffs-` temp dir and creates the cgroup
    /// `pier-test-<name>-<pid>`.
    pub fn new(name: &str) -> BpfHome {
        let bpffs = tempfile::Builder::new()
            .prefix("pier-test-bpffs-")
            .tempdir()
            .unwrap();
        mount(
            Some("bpf"),
            bpffs.path(),
            Some("bpf"),
            MsFlags::empty(),
            None::<&str>,
        )
        .unwrap();
        let cgroup = Path::new(CGROUP2).join(format!("pier-test-{name}-{}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap();
        BpfHome { bpffs, cgroup }
    }

    /// Engine settings that pin under this bpffs and attach to this cgroup.
    pub fn settings(&self, proxy_binary: PathBuf) -> Settings {
        Settings {
            bpf_pin_dir: self.pin_dir(),
            bpf_cgroup: self.cgroup.clone(),
            proxy_binary,
            remote_tc: false,
        }
    }

    fn pin_dir(&self) -> PathBuf {
        self.bpffs.path().join("pier")
    }
}

impl Drop for BpfHome {
    fn drop(&mut self) {
        let _ = pier_bpf::unpin_all(&self.pin_dir());
        let _ = umount2(self.bpffs.path(), MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir(&self.cgroup);
    }
}
