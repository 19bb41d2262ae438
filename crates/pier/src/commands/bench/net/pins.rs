//! The benchmarks' private eBPF pin dir: `pier bench net|scale|start` run `pier run` containers
//! whose publish engines pin programs, links and maps in PIER_BPF_PIN_DIR (default
//! /sys/fs/bpf/pier). Left there, a benchmark's pins would stay behind bound to the benchmark's
//! network namespace (wrong when it ran in a private one) and shape every later `pier run`.
//!
//! Theory of operation: unless the user set PIER_BPF_PIN_DIR, [`use_private`] sets it, in this
//! process's environment, to /sys/fs/bpf/pier-bench-<pid>, so every pier process the benchmark
//! spawns (`pier run`, the proxies it starts, `pier rm -f` in the cleanup) inherits it. It is
//! called first thing in a benchmark's `run`, before any thread exists, so no thread reads the
//! environment while it changes. The dir is removed at the end by the benchmark's cleanup
//! ([`remove`]): unlinking the pinned links detaches the programs from the cgroup (nothing else
//! holds them), and the maps go with their last reference. A benchmark that was killed outright
//! leaves its dir; [`sweep_stale`] removes `pier-bench-<pid>` dirs whose pid is gone at the next
//! start, as stale namespaces are swept. A pin dir the user named is theirs: never removed.
//!
//! The engine's state dir is NOT made private: the benchmark's networks and containers share the
//! host's nftables table `inet pier`, bridges and subnets with the user's, and an engine over a
//! state of its own would not see the user's networks (removing "its" last bridge network could
//! tear the shared table down, and its subnet pool could hand out a subnet already in use). The benchmark removes every
//! container and network it made in the user's state instead (`engine.rs`).
//!
//! Privileges: root (bpffs). Black-box test: tests/bench_net.rs; the name filter has unit tests.
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The environment variable pier's engine reads its pin dir from.
pub const ENV: &str = "PIER_BPF_PIN_DIR";
/// Where bpffs is mounted; the private dirs live right under it.
const BPFFS: &str = "/sys/fs/bpf";

/// Points PIER_BPF_PIN_DIR at this run's private dir unless the user set it; returns the private
/// dir (to remove at the end), or None when the user's setting stands. Call before any thread
/// is started.
pub fn use_private() -> Option<PathBuf> {
    if std::env::var_os(ENV).is_some() {
        return None;
    }
    let dir = Path::new(BPFFS).join(format!("pier-bench-{}", std::process::id()));
    std::env::set_var(ENV, &dir);
    Some(dir)
}

/// Removes a private pin dir with everything pinned in it; a dir never made is fine.
pub fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// Removes the private pin dirs of benchmarks whose process is gone.
pub fn sweep_stale() {
    let Ok(entries) = std::fs::read_dir(BPFFS) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = bench_pid(&name) else {
            continue;
        };
        if Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        match remove(&entry.path()) {
            Ok(()) => {
                eprintln!("pier bench: removed eBPF pins {BPFFS}/{name} left by a killed run")
            }
            Err(e) => eprintln!("pier bench: cannot remove stale eBPF pins {BPFFS}/{name}: {e}"),
        }
    }
}

/// The pid in a private pin dir's name `pier-bench-<pid>`; None for any other name.
fn bench_pid(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("pier-bench-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_bench_dirs_with_a_pid_are_swept() {
        assert_eq!(bench_pid("pier-bench-1234"), Some(1234));
        assert_eq!(bench_pid("pier"), None);
        assert_eq!(bench_pid("pier-bench-"), None);
        assert_eq!(bench_pid("pier-bench-12-c"), None);
        assert_eq!(bench_pid("pier-test-bench-1-0"), None);
        assert_eq!(bench_pid("pier-bench-+12"), None);
    }

    #[test]
    fn removing_a_missing_dir_is_fine() {
        let dir = tempfile::tempdir().expect("tempdir");
        let gone = dir.path().join("pier-bench-1");
        assert!(remove(&gone).is_ok());
        std::fs::create_dir_all(gone.join("links")).expect("mkdir");
        std::fs::write(gone.join("links/x"), "").expect("write");
        remove(&gone).expect("remove");
        assert!(!gone.exists());
    }
}
