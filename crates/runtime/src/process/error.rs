//! `ProcessError`: one variant per step of the container process's last mile, each naming the
//! step and carrying the value (rlimit, uid, capability, path) that failed.
//!
//! Each message ends with the kernel's answer (`source`), so `to_string()` is the whole story: the
//! init sends it to the runtime as one line of text, as runc does. Do not print the chain too.
//! [`ProcessError::NotFound`] and [`ProcessError::Exec`] use runc's texts (`exec: "X": executable
//! file not found in $PATH`, `exec /X: no such file or directory`): Docker and containerd match
//! them to choose exit codes 127 and 126.
use std::io;
use std::path::PathBuf;

/// What failed while finishing the container process.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// `process.args` is missing or empty.
    #[error("process.args is empty: give the program to run")]
    NoArgs,
    /// An argument or environment entry cannot be passed to execve.
    #[error("process.{field} contains a NUL byte: {value:?}")]
    Nul { field: &'static str, value: String },
    /// `keyctl(KEYCTL_JOIN_SESSION_KEYRING)` failed.
    #[error("join a new session keyring (use --no-new-keyring to keep the caller's): {source}")]
    Keyring { source: io::Error },
    /// Writing `/proc/self/oom_score_adj` failed.
    #[error("set process.oomScoreAdj {value} in /proc/self/oom_score_adj: {source}")]
    OomScoreAdj { value: i32, source: io::Error },
    /// `setrlimit` failed.
    #[error("set {name} soft={soft} hard={hard}: {source}")]
    Rlimit {
        name: &'static str,
        soft: u64,
        hard: u64,
        source: io::Error,
    },
    /// The spec asks for a hard limit above the current one, which the kernel refused.
    #[error(
        "set {name}: the requested hard limit {requested} is above the current hard limit {current} \
         and the kernel refused to raise it: ask for at most {current}"
    )]
    RlimitHardRaise {
        name: &'static str,
        requested: u64,
        current: u64,
        source: io::Error,
    },
    /// `sched_setattr` failed.
    #[error("set process.scheduler policy {policy}: {source}")]
    Scheduler { policy: String, source: io::Error },
    /// `ioPriority.priority` is outside 0..=7.
    #[error(
        "process.ioPriority priority {priority} is out of range: use 0 (highest) to 7 (lowest)"
    )]
    IoPriorityRange { priority: i64 },
    /// `ioprio_set` failed.
    #[error("set process.ioPriority {class} priority {priority}: {source}")]
    IoPriority {
        class: String,
        priority: i64,
        source: io::Error,
    },
    /// `personality(2)` failed.
    #[error("set linux.personality domain {domain}: {source}")]
    Personality { domain: String, source: io::Error },
    /// `prctl(PR_SET_KEEPCAPS)` failed.
    #[error("set keep-capabilities before changing user: {source}")]
    KeepCaps { source: io::Error },
    /// `process.user.username` is given; pier resolves no names inside the container.
    #[error(
        "process.user.username {name:?} is not supported: give process.user.uid and gid instead"
    )]
    Username { name: String },
    /// `setgroups` failed.
    #[error("set process.user.additionalGids {gids:?}: {source}")]
    Setgroups { gids: Vec<u32>, source: io::Error },
    /// `setgid` (setresgid) failed.
    #[error("set process.user.gid {gid}: {source}")]
    Setgid { gid: u32, source: io::Error },
    /// `setuid` (setresuid) failed.
    #[error("set process.user.uid {uid}: {source}")]
    Setuid { uid: u32, source: io::Error },
    /// Reading the kernel's capability facts failed.
    #[error("read {what}: {source}")]
    CapRead {
        what: &'static str,
        source: io::Error,
    },
    /// `prctl(PR_CAPBSET_DROP)` failed.
    #[error("drop {cap} from the bounding capability set: {source}")]
    Bounding {
        cap: &'static str,
        source: io::Error,
    },
    /// `capset` failed.
    #[error(
        "set capabilities effective={effective:#x} permitted={permitted:#x} inheritable={inheritable:#x}: {source}"
    )]
    Capset {
        effective: u64,
        permitted: u64,
        inheritable: u64,
        source: io::Error,
    },
    /// `prctl(PR_CAP_AMBIENT_RAISE)` failed.
    #[error(
        "raise ambient capability {cap} (it must also be permitted and inheritable): {source}"
    )]
    Ambient {
        cap: &'static str,
        source: io::Error,
    },
    /// `prctl(PR_SET_NO_NEW_PRIVS)` failed.
    #[error("set process.noNewPrivileges: {source}")]
    NoNewPrivileges { source: io::Error },
    /// An AppArmor profile is requested on a host without AppArmor.
    #[error(
        "process.apparmorProfile {profile:?} was requested but AppArmor is not enabled on this host: \
         remove the profile or enable AppArmor"
    )]
    AppArmorDisabled { profile: String },
    /// Writing the AppArmor exec attribute failed.
    #[error("apply process.apparmorProfile {profile:?} via {}: {source}", path.display())]
    AppArmor {
        profile: String,
        path: PathBuf,
        source: io::Error,
    },
    /// An SELinux label is requested on a host without SELinux.
    #[error(
        "process.selinuxLabel {label:?} was requested but SELinux is not enabled on this host: \
         remove the label or enable SELinux"
    )]
    SelinuxDisabled { label: String },
    /// Writing `/proc/self/attr/exec` failed.
    #[error("apply process.selinuxLabel {label:?} via /proc/self/attr/exec: {source}")]
    Selinux { label: String, source: io::Error },
    /// `chdir(process.cwd)` failed.
    #[error("chdir to process.cwd {}: {source}", path.display())]
    Cwd { path: PathBuf, source: io::Error },
    /// `args[0]` has no slash and is in none of the directories of the container's PATH.
    #[error("exec: \"{name}\": executable file not found in $PATH")]
    NotFound { name: String },
    /// `execve` failed.
    #[error("exec {path}: {}", errno_text(errno))]
    Exec { path: String, errno: io::Error },
    /// A preserved or listen fd is not open (or its flags cannot be changed).
    #[error("keep fd {fd} open across exec (--preserve-fds / LISTEN_FDS): {source}")]
    KeptFd { fd: i32, source: io::Error },
    /// `close_range(CLOSE_RANGE_CLOEXEC)` failed.
    #[error("mark fds from {first} close-on-exec: {source}")]
    CloseFds { first: u32, source: io::Error },
    /// Installing the seccomp filter failed.
    #[error("install the seccomp filter: {source}")]
    Seccomp { source: pier_seccomp::Error },
    /// The NOTIFY listener fd could not be handed to the runtime.
    #[error("hand the seccomp listener fd to the runtime: {reason}")]
    ListenerFd { reason: String },
    /// Connecting to `--console-socket` failed.
    #[error("connect to --console-socket {}: {source}", path.display())]
    ConsoleConnect { path: PathBuf, source: io::Error },
    /// A step of the terminal setup in the container failed.
    #[error("console: {step}: {source}")]
    Console {
        step: &'static str,
        source: io::Error,
    },
    /// A step of the terminal setup that involves a path failed.
    #[error("console: {step} {}: {source}", path.display())]
    ConsolePath {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
}

/// Go-style errno text (`no such file or directory`), as runc prints it.
fn errno_text(e: &io::Error) -> String {
    let text = match e.raw_os_error() {
        Some(n) => nix::errno::Errno::from_raw(n).desc().to_string(),
        None => e.to_string(),
    };
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_text_matches_runc() {
        let e = ProcessError::Exec {
            path: "/bin/nope".into(),
            errno: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(e.to_string(), "exec /bin/nope: no such file or directory");
        let e = ProcessError::Exec {
            path: "/etc".into(),
            errno: io::Error::from_raw_os_error(libc::EACCES),
        };
        assert_eq!(e.to_string(), "exec /etc: permission denied");
    }

    #[test]
    fn not_found_text_matches_runc() {
        let e = ProcessError::NotFound {
            name: "nope".into(),
        };
        assert_eq!(
            e.to_string(),
            "exec: \"nope\": executable file not found in $PATH"
        );
    }
}
