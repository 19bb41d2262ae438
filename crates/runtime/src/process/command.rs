//! The program to exec: argv and environment from the spec, `args[0]` resolved against the
//! container's own PATH, and the final execve (with an empty signal mask).
//!
//! Theory of operation: the environment is exactly `process.env` (plus LISTEN_FDS/LISTEN_PID
//! when fds are passed), never pier's. Like runc, an `args[0]` without a slash is looked up in
//! the PATH of that environment (the last `PATH=` entry wins, as with successive setenv; a
//! default PATH when none is given); relative PATH entries are skipped, as Go's LookPath does.
//! Everything is turned into C strings before the first privilege-changing step runs, so the
//! late steps (after seccomp is installed) allocate nothing and fail only in execve itself.
//!
//! Privileges: none beyond search/exec permission of the resolved program.
//! Tests: unit tests below; the exec'd program in `tests/priv_process.rs`.
use super::ProcessError;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

/// PATH used when the spec's environment has none (runc's and Docker's default).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// argv and envp as C strings, ready for execve.
#[derive(Debug)]
pub(super) struct Command {
    argv: Vec<CString>,
    envp: Vec<CString>,
}

/// `process.env`, with LISTEN_FDS/LISTEN_PID set when `listen_fds` > 0.
pub(super) fn environment(env: &[String], listen_fds: u32) -> Vec<String> {
    if listen_fds == 0 {
        return env.to_vec();
    }
    let mut out: Vec<String> = env
        .iter()
        .filter(|e| !e.starts_with("LISTEN_FDS=") && !e.starts_with("LISTEN_PID="))
        .cloned()
        .collect();
    out.push(format!("LISTEN_FDS={listen_fds}"));
    out.push(format!("LISTEN_PID={}", std::process::id()));
    out
}

/// Converts args and environment to C strings.
pub(super) fn prepare(args: &[String], env: &[String]) -> Result<Command, ProcessError> {
    if args.is_empty() {
        return Err(ProcessError::NoArgs);
    }
    let c = |field: &'static str, s: &String| {
        CString::new(s.as_bytes()).map_err(|_| ProcessError::Nul {
            field,
            value: s.clone(),
        })
    };
    Ok(Command {
        argv: args
            .iter()
            .map(|a| c("args", a))
            .collect::<Result<_, _>>()?,
        envp: env.iter().map(|e| c("env", e)).collect::<Result<_, _>>()?,
    })
}

/// The PATH of `env` (last entry wins) or the default.
fn search_path(env: &[String]) -> &str {
    env.iter()
        .rev()
        .find_map(|e| e.strip_prefix("PATH="))
        .unwrap_or(DEFAULT_PATH)
}

fn is_executable(path: &Path) -> bool {
    path.is_file() && nix::unistd::access(path, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// Resolves `name` like runc: a name with a slash is used as given, others are searched in PATH.
pub(super) fn resolve(name: &str, env: &[String]) -> Result<PathBuf, ProcessError> {
    if name.contains('/') {
        return Ok(PathBuf::from(name));
    }
    search_path(env)
        .split(':')
        .map(Path::new)
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| ProcessError::NotFound {
            name: name.to_string(),
        })
}

impl Command {
    /// Execs `path` with this argv and environment; returns only on failure. The signal mask is
    /// emptied first: a mask survives execve, and the container's program must not inherit
    /// whatever its starter (a shell, a benchmark, pier's own monitor) had blocked.
    pub(super) fn exec(&self, path: &CStr) -> ProcessError {
        let empty = nix::sys::signal::SigSet::empty();
        if let Err(errno) = nix::sys::signal::sigprocmask(
            nix::sys::signal::SigmaskHow::SIG_SETMASK,
            Some(&empty),
            None,
        ) {
            return ProcessError::Exec {
                path: path.to_string_lossy().into_owned(),
                errno: errno.into(),
            };
        }
        match nix::unistd::execve(path, &self.argv, &self.envp) {
            Err(errno) => ProcessError::Exec {
                path: path.to_string_lossy().into_owned(),
                errno: errno.into(),
            },
            Ok(never) => match never {},
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_fds_replace_existing_entries() {
        let env = vec!["A=1".to_string(), "LISTEN_FDS=9".to_string()];
        let out = environment(&env, 2);
        assert_eq!(out[0], "A=1");
        assert_eq!(out[1], "LISTEN_FDS=2");
        assert_eq!(out[2], format!("LISTEN_PID={}", std::process::id()));
        assert_eq!(out.len(), 3);
        assert_eq!(environment(&env, 0), env);
    }

    #[test]
    fn resolve_uses_the_container_path() {
        let dir = tempfile::tempdir().unwrap();
        let env = vec![format!("PATH=relative:{}", dir.path().display())];
        assert!(matches!(
            resolve("busybox", &env),
            Err(ProcessError::NotFound { .. })
        ));
        let prog = dir.path().join("prog");
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        assert!(
            matches!(resolve("prog", &env), Err(ProcessError::NotFound { .. })),
            "not executable yet"
        );
        std::fs::set_permissions(&prog, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        assert_eq!(resolve("prog", &env).unwrap(), prog);
        assert_eq!(resolve("./x/y", &env).unwrap(), PathBuf::from("./x/y"));
    }

    #[test]
    fn last_path_entry_wins_and_default_applies() {
        let env = vec!["PATH=/a".to_string(), "PATH=/b".to_string()];
        assert_eq!(search_path(&env), "/b");
        assert_eq!(search_path(&[]), DEFAULT_PATH);
    }

    #[test]
    fn nul_bytes_and_empty_args_are_refused() {
        assert!(matches!(prepare(&[], &[]), Err(ProcessError::NoArgs)));
        let err = prepare(&["a\0b".to_string()], &[]).unwrap_err();
        assert!(
            matches!(err, ProcessError::Nul { field: "args", .. }),
            "{err}"
        );
    }
}
