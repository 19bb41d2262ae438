//! Joining v1 hierarchies without the cost of writing cgroup.procs.
//!
//! Theory: writing a pid to `cgroup.procs` (or another task's tid to `tasks`) takes the
//! write side of the global cgroup_threadgroup_rwsem, which waits for an RCU grace period:
//! 5–36 ms on this machine for the first write (later writes within a few ms are cheap). A
//! thread moving *itself* by writing `0` to `tasks` skips that lock (the kernel only locks the
//! threadgroup when a pid is given or a whole process moves) and costs ~0.05 ms per hierarchy.
//! A freshly cloned container init is single-threaded, so moving its only thread moves the
//! process. The parent opens the `tasks` files before clone (open is where the VFS checks
//! permission, and v1 checks migration rights against the opener's credentials), so the child
//! can join even after entering a user namespace, as long as it still has these fds.
//!
//! Use: `let join = cgroup.self_join()?;` before clone3, `join.join()` first thing in the
//! child (before any thread or child exists), then drop it (the fds are O_CLOEXEC anyway).
//! cgroup2 is joined by clone3(CLONE_INTO_CGROUP) with `Cgroup::clone_into_fd`.
//!
//! Privileges: the opener needs write access to the tasks files (root). Tests:
//! crates/cgroups/tests/priv_cgroups.rs; cost measured by examples/join_cost.rs.
use crate::Error;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;

/// Open `tasks` files of the container's v1 directories, for the child to join itself.
#[derive(Debug)]
pub struct SelfJoin {
    pub(crate) files: Vec<(String, PathBuf, File)>,
}

impl SelfJoin {
    /// Moves the calling thread into every v1 directory (all of the process when it is
    /// single-threaded). Does not allocate unless it fails.
    pub fn join(&self) -> Result<(), Error> {
        for (controllers, dir, file) in &self.files {
            let mut f = file;
            f.write_all(b"0").map_err(|error| Error::SelfJoin {
                controllers: controllers.clone(),
                dir: dir.clone(),
                error,
            })?;
        }
        Ok(())
    }

    /// How many hierarchies `join` writes to.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when there is no v1 hierarchy to join (pure cgroup2, or cgroups disabled).
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}
