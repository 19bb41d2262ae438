//! docker-proxy's protocol with dockerd: the status pipe on fd 3 and the passed listener on fd 4.
//!
//! Theory of operation (from moby's cmd/docker-proxy/main_linux.go): dockerd starts the proxy
//! with a pipe as fd 3 and reads it until EOF; the proxy writes "0\n" once it listens, or "1\n"
//! followed by the error text, then closes it. With `-use-listen-fd`, dockerd has made the
//! listening (TCP) or bound (UDP) socket itself and passes it as fd 4.
//!
//! Privileges: none. Tests: `crates/pier/tests/proxy_status.rs`.
use super::ProxyError;
use std::fmt::Display;
use std::fs::File;
use std::io::Write;
use std::os::fd::{OwnedFd, RawFd};

/// The status pipe's fd number.
pub const STATUS_FD: RawFd = 3;
/// The passed listener's fd number.
pub const LISTEN_FD: RawFd = 4;

/// The status pipe, when the parent passed one.
pub fn take_status_pipe() -> Option<File> {
    pier_sys::net::take_inherited(STATUS_FD)
        .ok()
        .map(File::from)
}

/// The listening socket passed as fd 4.
pub fn take_listen_fd() -> Result<OwnedFd, ProxyError> {
    pier_sys::net::take_inherited(LISTEN_FD).map_err(|source| ProxyError::NoListenFd { source })
}

/// Writes the outcome to the status pipe (when there is one) and closes it.
pub fn report(pipe: Option<File>, outcome: Result<(), &dyn Display>) {
    let Some(mut pipe) = pipe else {
        return;
    };
    let text = match outcome {
        Ok(()) => "0\n".to_string(),
        Err(e) => format!("1\n{e}"),
    };
    if let Err(e) = pipe.write_all(text.as_bytes()) {
        log::warn!("writing the status to fd {STATUS_FD}: {e}");
    }
}
