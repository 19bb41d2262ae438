//! Making a container's directories: `mkdir -p` per hierarchy, then what a new directory needs
//! before a task can join it (v1 cpuset: cpus and mems copied from the parent) or before a
//! controller can limit it (v2: the controller enabled in every ancestor's
//! cgroup.subtree_control).
//!
//! Theory: the topmost directory that was created is recorded so destroy() can remove empty
//! parents it made (and only those). `mkdir` retries on ENOENT: a concurrent destroy of another
//! container may remove a shared parent between our `exists` check and our `mkdir`.
//! subtree_control is written only for controllers not enabled yet: on a populated subtree the
//! write takes the cgroup threadgroup lock (an RCU grace period, milliseconds), so after the first
//! container under a parent, creating the next costs reads only.
//!
//! Privileges: root (or a delegated tree). Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::fsio::{read, write};
use crate::Error;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// v2 controllers a container may be limited by.
const V2_CONTROLLERS: &[&str] = &["cpu", "cpuset", "io", "memory", "pids", "hugetlb"];

/// Creates `dir` and missing parents below `mountpoint`; returns the topmost directory made
/// (`dir` itself when it existed already).
pub fn make_dir(mountpoint: &Path, dir: &Path) -> Result<PathBuf, Error> {
    let mut attempts = 0;
    loop {
        match make_dir_once(mountpoint, dir) {
            Err(Error::Mkdir { error, .. })
                if error.kind() == ErrorKind::NotFound && attempts < 3 =>
            {
                attempts += 1;
            }
            other => return other,
        }
    }
}

fn make_dir_once(mountpoint: &Path, dir: &Path) -> Result<PathBuf, Error> {
    let missing: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| p.starts_with(mountpoint) && *p != mountpoint && !p.exists())
        .collect();
    for path in missing.iter().rev() {
        match std::fs::create_dir(path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(error) => {
                return Err(Error::Mkdir {
                    path: path.to_path_buf(),
                    error,
                })
            }
        }
    }
    Ok(missing.last().map_or(dir, |p| p).to_path_buf())
}

/// v1 cpuset: a new directory has empty cpus and mems and refuses tasks until they are set;
/// fill each empty one below the mountpoint from its parent, top down.
pub fn init_cpuset(mountpoint: &Path, dir: &Path) -> Result<(), Error> {
    let mut chain: Vec<&Path> = dir
        .ancestors()
        .take_while(|p| p.starts_with(mountpoint) && *p != mountpoint)
        .collect();
    chain.reverse();
    for path in chain {
        let parent = path.parent().unwrap_or(mountpoint);
        for file in ["cpuset.cpus", "cpuset.mems"] {
            if read(path, file)?.is_empty() {
                write(path, file, &read(parent, file)?)?;
            }
        }
    }
    Ok(())
}

/// v2: enables `wanted` controllers (those available) in every ancestor of `dir` from the
/// mountpoint down, writing only the ones not enabled yet.
pub fn enable_v2(mountpoint: &Path, dir: &Path, wanted: &[&str]) -> Result<(), Error> {
    let mut chain: Vec<&Path> = dir
        .ancestors()
        .skip(1)
        .take_while(|p| p.starts_with(mountpoint))
        .collect();
    chain.reverse();
    for path in chain {
        let available = read(path, "cgroup.controllers")?;
        let enabled = read(path, "cgroup.subtree_control")?;
        let add: Vec<String> = wanted
            .iter()
            .filter(|c| has_word(&available, c) && !has_word(&enabled, c))
            .map(|c| format!("+{c}"))
            .collect();
        if !add.is_empty() {
            write(path, "cgroup.subtree_control", &add.join(" "))?;
        }
    }
    Ok(())
}

/// Every controller a pure-v2 container may use.
pub fn all_v2_controllers() -> &'static [&'static str] {
    V2_CONTROLLERS
}

/// True when the space-separated `list` holds `word`.
pub fn has_word(list: &str, word: &str) -> bool {
    list.split_whitespace().any(|w| w == word)
}
