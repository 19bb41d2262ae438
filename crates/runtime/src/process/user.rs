//! Identity of the container process: session keyring, supplementary groups, gid/uid, umask.
//!
//! Theory of operation: a fresh anonymous session keyring keeps the container from sharing the
//! caller's keys (a named one could be joined by another container of the same user, so none is
//! named). Groups are set before gid, gid before uid (after setuid the process can no longer
//! change them). In a user namespace whose `setgroups` file says `deny`, setgroups is skipped,
//! with a warning when the spec asked for additional gids. Without `user.umask`, 0022 is used,
//! as runc does. The switches are the raw syscalls of `pier_sys::clone::child`, not glibc's
//! wrappers: this runs in a child cloned from a possibly multi-threaded runtime, where glibc's
//! set*id broadcast to the parent's threads (which do not exist here) can hang.
//!
//! Privileges: CAP_SETGID/CAP_SETUID for the switches.
//! Tests: effects in `tests/priv_process.rs`.
use super::ProcessError;
use oci_spec::runtime::User;
use pier_sys::clone::child::{setgroups, setresgid, setresuid};

/// Joins a new anonymous session keyring; a kernel without keyctl is not an error.
pub(super) fn join_session_keyring() -> Result<(), ProcessError> {
    match pier_sys::process::join_session_keyring(None) {
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            log::debug!("keyctl is not available: keeping the caller's session keyring");
            Ok(())
        }
        other => other
            .map(drop)
            .map_err(|source| ProcessError::Keyring { source }),
    }
}

/// Rejects `user.username`: nothing inside the container resolves names for pier.
pub(super) fn check_username(user: &User) -> Result<(), ProcessError> {
    match user.username() {
        Some(name) if !name.is_empty() => Err(ProcessError::Username { name: name.clone() }),
        _ => Ok(()),
    }
}

/// True when the user namespace forbids setgroups (`/proc/self/setgroups` says `deny`).
fn setgroups_denied() -> bool {
    std::fs::read_to_string("/proc/self/setgroups").is_ok_and(|s| s.trim() == "deny")
}

/// Sets the supplementary groups, then gid and uid (real, effective and saved).
pub(super) fn switch(user: &User) -> Result<(), ProcessError> {
    let gids = user.additional_gids().clone().unwrap_or_default();
    if setgroups_denied() {
        if !gids.is_empty() {
            log::warn!("process.user.additionalGids {gids:?} ignored: setgroups is denied in this user namespace");
        }
    } else {
        setgroups(&gids).map_err(|source| ProcessError::Setgroups {
            gids: gids.clone(),
            source,
        })?;
    }
    setresgid(user.gid()).map_err(|source| ProcessError::Setgid {
        gid: user.gid(),
        source,
    })?;
    setresuid(user.uid()).map_err(|source| ProcessError::Setuid {
        uid: user.uid(),
        source,
    })
}

/// Sets the umask (`user.umask`, else 0022).
pub(super) fn set_umask(user: &User) {
    let mask = user.umask().unwrap_or(0o022);
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(mask));
}
