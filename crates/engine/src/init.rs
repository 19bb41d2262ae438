//! pier's init for `--init`: pid 1 of the container, as tini is for Docker.
//!
//! Theory of operation: `spec.rs` binds pier's own binary at /dev/init and makes the process
//! `/dev/init -- COMMAND…`; the binary sees argv0 `/dev/init` and calls [`main`]. It blocks every
//! asynchronous signal and reads them from a signalfd, starts the command as its only child
//! (std's spawn gives the child an empty signal mask and default SIGPIPE), then loops: SIGCHLD
//! reaps every exited child (orphans are reparented to pid 1, or to this process when it is a
//! subreaper outside a container); any other signal is forwarded to the command, unless the
//! kernel sent it to the whole terminal process group (^C, ^Z, window change), which the
//! command, sharing that group, already received. When the command exits, init exits with its
//! status: the code, or 128 + the signal that killed it; the kernel then ends whatever is left
//! in the pid namespace. A command that cannot be started gives Docker's codes: 127 not found,
//! 126 not executable.
//! The pier binary is static in release builds, so this runs in any root.
//! Privileges: none. Tests: unit tests below; crates/engine/tests/priv_rootfs.rs runs it as a
//! container's pid 1 (exit codes, forwarded signals).
use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::process::Command;

/// Runs `/dev/init [--] COMMAND [ARG]…` and returns the exit code for the process.
pub fn main(args: &[String]) -> i32 {
    let command = match args.get(1).map(String::as_str) {
        Some("--") => &args[2..],
        _ => args.get(1..).unwrap_or_default(),
    };
    if command.is_empty() {
        eprintln!("pier init: no command given (usage: /dev/init -- COMMAND [ARG]...)");
        return 2;
    }
    match supervise(command) {
        Ok(code) => code,
        Err(InitError::Spawn { program, source }) => {
            eprintln!("pier init: starting {program}: {source}");
            spawn_failure_code(&source)
        }
        Err(e) => {
            eprintln!("pier init: {e}");
            1
        }
    }
}

/// What failed in the init.
#[derive(Debug, thiserror::Error)]
enum InitError {
    #[error("blocking signals (sigprocmask): {0}")]
    Mask(Errno),
    #[error("creating the signalfd: {0}")]
    SignalFd(Errno),
    #[error("reading the signalfd: {0}")]
    ReadSignal(Errno),
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
}

/// Signals that report a fault of this process itself: never blocked.
const SYNCHRONOUS: [Signal; 7] = [
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGTRAP,
    Signal::SIGABRT,
    Signal::SIGSYS,
];

/// `si_code` of a signal the kernel raised (a terminal's ^C goes to the whole process group).
const SI_KERNEL: i32 = 0x80;

fn supervise(command: &[String]) -> Result<i32, InitError> {
    let mut mask = SigSet::all();
    for sig in SYNCHRONOUS {
        mask.remove(sig);
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&mask), None)
        .map_err(InitError::Mask)?;
    let signals =
        SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC).map_err(InitError::SignalFd)?;
    if std::process::id() != 1 {
        // Outside a container, orphans come back to us instead of to the host's init.
        let _ = nix::sys::prctl::set_child_subreaper(true);
    }
    let child = Command::new(&command[0])
        .args(&command[1..])
        .spawn()
        .map_err(|source| InitError::Spawn {
            program: command[0].clone(),
            source,
        })?;
    let child = Pid::from_raw(child.id() as i32);
    loop {
        let Some(info) = signals.read_signal().map_err(InitError::ReadSignal)? else {
            continue;
        };
        let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else {
            continue;
        };
        if sig == Signal::SIGCHLD {
            if let Some(code) = reap(child) {
                return Ok(code);
            }
        } else if info.ssi_code != SI_KERNEL {
            // ESRCH: the command is gone; its SIGCHLD is next.
            let _ = kill(child, sig);
        }
    }
}

/// Reaps every exited child; the command's exit code once it is among them.
fn reap(command: Pid) -> Option<i32> {
    let mut code = None;
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return code,
            Ok(status) if status.pid() == Some(command) => code = exit_code(status).or(code),
            Ok(_) => {}
        }
    }
}

/// The shell's convention: the exit code, or 128 + the signal.
fn exit_code(status: WaitStatus) -> Option<i32> {
    match status {
        WaitStatus::Exited(_, code) => Some(code),
        WaitStatus::Signaled(_, sig, _) => Some(128 + sig as i32),
        _ => None,
    }
}

fn spawn_failure_code(err: &std::io::Error) -> i32 {
    match err.kind() {
        std::io::ErrorKind::NotFound => 127,
        _ => 126,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_the_shell() {
        let pid = Pid::from_raw(7);
        assert_eq!(exit_code(WaitStatus::Exited(pid, 3)), Some(3));
        assert_eq!(
            exit_code(WaitStatus::Signaled(pid, Signal::SIGTERM, false)),
            Some(143)
        );
        assert_eq!(exit_code(WaitStatus::Stopped(pid, Signal::SIGSTOP)), None);
    }

    #[test]
    fn start_failures_give_dockers_codes() {
        let missing = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(spawn_failure_code(&missing), 127);
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert_eq!(spawn_failure_code(&denied), 126);
    }

    #[test]
    fn no_command_is_a_usage_error() {
        assert_eq!(main(&["/dev/init".into()]), 2);
        assert_eq!(main(&["/dev/init".into(), "--".into()]), 2);
    }
}
