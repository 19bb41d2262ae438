//! Handing a seccomp user-notification listener to the agent at `linux.seccomp.listenerPath`.
//!
//! Theory of operation: the listener fd exists only once the filter is installed, in the
//! container process right before `execve`, after the pivot: the agent's socket, a path in the
//! runtime's mount namespace, is out of reach by name. So the runtime opens the socket's
//! directory (`O_PATH`, close-on-exec) before the fork, and the container process connects to
//! `/proc/self/fd/<dir>/<socket>` through the container's procfs. The message is the OCI
//! `ContainerProcessState` (fds `["seccompFd"]`, the pid as the runtime sees it, the profile's
//! `listenerMetadata`, the container state) with the fd attached (pier-seccomp sends it).
//!
//! Privileges: access to the socket. Tests: none with a real agent yet (needs a NOTIFY agent).
use crate::container::Error;
use oci_spec::runtime::LinuxSeccomp;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

/// The agent's socket, reachable from inside the container.
#[derive(Debug)]
pub struct Listener {
    dir: OwnedFd,
    name: OsString,
    metadata: Option<String>,
}

impl Listener {
    /// In the runtime, before the fork: `None` when the profile names no `listenerPath`.
    pub fn open(profile: &LinuxSeccomp) -> Result<Option<Listener>, Error> {
        let Some(path) = profile.listener_path() else {
            return Ok(None);
        };
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(Error::io(
                "seccomp listenerPath",
                path,
                std::io::ErrorKind::InvalidInput.into(),
            ));
        };
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(dir)
            .map_err(|e| Error::io("open the directory of seccomp listenerPath", path, e))?;
        let metadata = profile.listener_metadata().clone();
        Ok(Some(Listener {
            dir: dir.into(),
            name: name.to_owned(),
            metadata,
        }))
    }

    /// In the container process: sends `fd` with the process state built from the container's
    /// OCI state JSON.
    pub fn send(&self, fd: OwnedFd, state_json: &[u8]) -> Result<(), String> {
        let state: serde_json::Value = serde_json::from_slice(state_json).unwrap_or_default();
        let message = serde_json::json!({
            "ociVersion": state.get("ociVersion").cloned().unwrap_or_default(),
            "fds": [oci_spec::runtime::SECCOMP_FD_NAME],
            "pid": state.get("pid").cloned().unwrap_or_default(),
            "metadata": self.metadata,
            "state": state,
        });
        let mut path = PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd()));
        path.push(&self.name);
        let bytes = message.to_string().into_bytes();
        pier_seccomp::send_to_listener(&path, fd.as_fd(), &bytes).map_err(|e| e.to_string())
    }
}
