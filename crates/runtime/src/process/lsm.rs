//! Linux security module labels for the coming execve: `process.apparmorProfile` and
//! `process.selinuxLabel`.
//!
//! Theory of operation: both LSMs take the label of the next exec from a procfs attribute
//! (`/proc/self/attr/apparmor/exec` with "exec <profile>", falling back to the legacy
//! `/proc/self/attr/exec`; SELinux's `/proc/self/attr/exec` with the bare context), so the
//! transition happens atomically at execve. A label requested on a host where the LSM is not
//! active is refused with an error saying so, never silently dropped.
//!
//! Privileges: the LSM's policy decides; pier needs only to own /proc/self.
//! Tests: the not-enabled refusals in `tests/priv_process.rs` (this host runs neither LSM).
use super::ProcessError;
use std::path::{Path, PathBuf};

const APPARMOR_ENABLED: &str = "/sys/module/apparmor/parameters/enabled";
const APPARMOR_EXEC: &str = "/proc/self/attr/apparmor/exec";
const LEGACY_EXEC: &str = "/proc/self/attr/exec";
const SELINUX_ENFORCE: &str = "/sys/fs/selinux/enforce";

fn apparmor_enabled() -> bool {
    std::fs::read_to_string(APPARMOR_ENABLED).is_ok_and(|s| s.trim() == "Y")
}

/// SELinux is active when selinuxfs is mounted and reports enforcing (1) or permissive (0).
fn selinux_enabled() -> bool {
    std::fs::read_to_string(SELINUX_ENFORCE).is_ok_and(|s| matches!(s.trim(), "0" | "1"))
}

/// Sets the AppArmor profile for the next exec.
pub(super) fn apply_apparmor(profile: &str) -> Result<(), ProcessError> {
    if !apparmor_enabled() {
        return Err(ProcessError::AppArmorDisabled {
            profile: profile.to_string(),
        });
    }
    let path = if Path::new(APPARMOR_EXEC).exists() {
        APPARMOR_EXEC
    } else {
        LEGACY_EXEC
    };
    std::fs::write(path, format!("exec {profile}")).map_err(|source| ProcessError::AppArmor {
        profile: profile.to_string(),
        path: PathBuf::from(path),
        source,
    })
}

/// Sets the SELinux context for the next exec.
pub(super) fn apply_selinux(label: &str) -> Result<(), ProcessError> {
    if !selinux_enabled() {
        return Err(ProcessError::SelinuxDisabled {
            label: label.to_string(),
        });
    }
    std::fs::write(LEGACY_EXEC, label).map_err(|source| ProcessError::Selinux {
        label: label.to_string(),
        source,
    })
}
