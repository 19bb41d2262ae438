//! File descriptors the container process keeps: stdio, `--preserve-fds N` and the
//! `LISTEN_FDS` of socket activation; every other fd is closed by the execve.
//!
//! Theory of operation: the runtime has placed the fds to keep at 3.. (preserved, then listen
//! fds); their close-on-exec flag is cleared (a kept fd that is not open is an error), and
//! everything from 3 + preserve + listen upwards is marked close-on-exec with one
//! `close_range(CLOSE_RANGE_CLOEXEC)` instead of being closed now, so pier's own fds (the sync
//! pipe, the seccomp listener being handed over) stay usable until the very execve.
//!
//! Privileges: none.
//! Tests: `tests/priv_process.rs` checks which fds the exec'd program sees.
use super::ProcessError;

/// The first fd that must not survive execve.
pub(super) fn first_closed(preserve_fds: u32, listen_fds: u32) -> u32 {
    3u32.saturating_add(preserve_fds).saturating_add(listen_fds)
}

/// Lets fds 3..`first` survive execve.
pub(super) fn keep_below(first: u32) -> Result<(), ProcessError> {
    for fd in 3..first.min(i32::MAX as u32) as i32 {
        pier_sys::process::clear_cloexec(fd)
            .map_err(|source| ProcessError::KeptFd { fd, source })?;
    }
    Ok(())
}

/// Marks every fd from `first` upwards close-on-exec.
pub(super) fn close_on_exec_from(first: u32) -> Result<(), ProcessError> {
    pier_sys::process::cloexec_from(first)
        .map_err(|source| ProcessError::CloseFds { first, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_fds_follow_stdio() {
        assert_eq!(first_closed(0, 0), 3);
        assert_eq!(first_closed(2, 1), 6);
        assert_eq!(first_closed(u32::MAX, 1), u32::MAX);
    }
}
