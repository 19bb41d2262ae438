//! Network namespaces: run a closure inside one on a dedicated thread, and create anonymous ones.
//!
//! Theory of operation: a network namespace is a property of a thread (task), so
//! [`NetNs::run`] (or [`run_in`] for a borrowed fd) spawns a scoped thread, `setns(2)`s that thread into the namespace and runs
//! the closure there; the thread ends with the closure, so no `?` or panic can leave any thread
//! of pier in the wrong namespace (the caller's thread never changes). Sockets opened inside
//! (a [`crate::Netlink`], a `TcpListener`) stay bound to that namespace after the closure
//! returns, and a process spawned from inside (`std::process::Command`) inherits it.
//! [`NetNs::new_anonymous`] does `unshare(CLONE_NEWNET)` on a short-lived thread and keeps the
//! namespace alive by the fd of `/proc/thread-self/ns/net`; dropping the last fd (and the last
//! process in it) frees the namespace and every link in it, which is what tests rely on to
//! leave nothing behind.
//! Privileges: `CAP_SYS_ADMIN` for setns/unshare. Tests: crates/net/tests/priv_net.rs.
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::thread;

use nix::sched::{setns, unshare, CloneFlags};

use crate::NetError;

/// An open network namespace (its nsfs fd).
#[derive(Debug)]
pub struct NetNs {
    fd: OwnedFd,
    name: String,
}

fn netns_error(step: &'static str, target: &str) -> impl FnOnce(io::Error) -> NetError {
    let target = target.to_string();
    move |source| NetError::Netns {
        step,
        target,
        source,
    }
}

impl NetNs {
    /// Opens the namespace at `path` (`/proc/PID/ns/net`, `/run/netns/NAME`).
    pub fn open(path: &Path) -> Result<Self, NetError> {
        let name = path.display().to_string();
        let file = File::open(path).map_err(netns_error("open", &name))?;
        Ok(Self {
            fd: file.into(),
            name,
        })
    }

    /// Creates a new, empty network namespace (only `lo`, down) held by its fd alone.
    pub fn new_anonymous() -> Result<Self, NetError> {
        let name = "a new anonymous netns";
        let created = thread::scope(|scope| {
            scope
                .spawn(|| -> io::Result<OwnedFd> {
                    unshare(CloneFlags::CLONE_NEWNET)?;
                    Ok(File::open("/proc/thread-self/ns/net")?.into())
                })
                .join()
        });
        let fd = created
            .map_err(|_| NetError::NetnsThreadPanicked(name.to_string()))?
            .map_err(netns_error("unshare", name))?;
        let inode = nix::sys::stat::fstat(&fd)
            .map(|st| st.st_ino)
            .unwrap_or_default();
        Ok(Self {
            fd,
            name: format!("net:[{inode}]"),
        })
    }

    /// Runs `work` on a new thread that has entered this namespace, and returns its result.
    pub fn run<T, F>(&self, work: F) -> Result<T, NetError>
    where
        T: Send,
        F: FnOnce() -> T + Send,
    {
        run_in(self.fd.as_fd(), &self.name, work)
    }

    /// The namespace's fd, for moving links into it or creating a veth peer inside.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// What error messages call this namespace.
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// Runs `work` on a new thread that has entered the namespace `netns` (an nsfs fd the caller
/// holds, such as a container's), and returns its result; `name` is what errors call it.
pub fn run_in<T, F>(netns: BorrowedFd<'_>, name: &str, work: F) -> Result<T, NetError>
where
    T: Send,
    F: FnOnce() -> T + Send,
{
    let outcome = thread::scope(|scope| {
        scope
            .spawn(|| -> io::Result<T> {
                setns(netns, CloneFlags::CLONE_NEWNET)?;
                Ok(work())
            })
            .join()
    });
    outcome
        .map_err(|_| NetError::NetnsThreadPanicked(name.to_string()))?
        .map_err(netns_error("setns", name))
}
