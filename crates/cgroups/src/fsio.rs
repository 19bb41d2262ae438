//! Reading and writing cgroup files, with errors that name file, value and directory.
//!
//! Each value goes to the kernel in one write(2): cgroup files parse one value (or one rule)
//! per write, so a value is never split. Files are opened without O_CREAT: a missing file means
//! the kernel lacks that knob, and the error says which.
//!
//! Privileges: write access to the cgroup directory (root, or a delegated tree).
//! Tests: crates/cgroups/tests/priv_cgroups.rs.
use crate::Error;
use std::io::Write;
use std::path::Path;

/// Writes `value` to `dir/file` in one write(2).
pub fn write(dir: &Path, file: &str, value: &str) -> Result<(), Error> {
    let fail = |error| Error::Write {
        file: file.to_string(),
        value: value.to_string(),
        dir: dir.to_path_buf(),
        error,
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(file))
        .map_err(fail)?;
    f.write_all(value.as_bytes()).map_err(fail)
}

/// Reads `dir/file`, trimmed.
pub fn read(dir: &Path, file: &str) -> Result<String, Error> {
    std::fs::read_to_string(dir.join(file))
        .map(|s| s.trim().to_string())
        .map_err(|error| Error::Read {
            file: file.to_string(),
            dir: dir.to_path_buf(),
            error,
        })
}

/// True when `dir/file` exists (the kernel offers that knob).
pub fn has(dir: &Path, file: &str) -> bool {
    dir.join(file).exists()
}

/// Reads a list of pids (cgroup.procs, tasks).
pub fn read_pids(dir: &Path, file: &str) -> Result<Vec<i32>, Error> {
    let text = read(dir, file)?;
    text.lines()
        .map(|l| {
            l.trim().parse().map_err(|_| Error::Parse {
                file: file.to_string(),
                dir: dir.to_path_buf(),
                content: l.to_string(),
            })
        })
        .collect()
}
