//! Tests of `hooks::run` with real hook programs (busybox applets chosen by argv[0]): state on
//! stdin, env and argv handling, failure text, timeout kill, a hook that ignores its stdin.
//!
//! Needs /bin/busybox (skips with a reason outside CI, fails under CI=true); no root. Every file
//! a hook writes is in a `pier-test-` temp dir; the timeout case checks its hook was reaped.
use oci_spec::runtime::Hook;
use pier_runtime::hooks::{self, HookError, Phase};
use serde_json::json;
use std::path::Path;

const BUSYBOX: &str = "/bin/busybox";

fn have_busybox() -> bool {
    if Path::new(BUSYBOX).exists() {
        return true;
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "CI=true: these tests need {BUSYBOX}"
    );
    eprintln!("skipped: needs {BUSYBOX}");
    false
}

fn sh_hook(script: &str, extra: &[&str], env: Option<&[&str]>, timeout: Option<i64>) -> Hook {
    let mut args = vec!["sh", "-c", script, "sh"];
    args.extend_from_slice(extra);
    let mut hook = json!({"path": BUSYBOX, "args": args});
    if let Some(env) = env {
        hook["env"] = json!(env);
    }
    if let Some(t) = timeout {
        hook["timeout"] = json!(t);
    }
    serde_json::from_value(hook).unwrap()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap()
}

#[test]
fn hook_gets_state_on_stdin_argv0_and_only_its_env() {
    if !have_busybox() {
        return;
    }
    let dir = temp_dir();
    let out = dir.path().join("state");
    let env_out = dir.path().join("env");
    let state =
        br#"{"ociVersion":"1.0.2","id":"pier-test","status":"creating","pid":1,"bundle":"/b"}"#;
    let hooks = [
        sh_hook("cat > \"$1\"", &[out.to_str().unwrap()], None, Some(10)),
        sh_hook(
            "echo \"$FOO|${HOME:-unset}\" > \"$1\"",
            &[env_out.to_str().unwrap()],
            Some(&["FOO=bar"]),
            None,
        ),
    ];
    hooks::run(Phase::CreateRuntime, &hooks, state).unwrap();
    assert_eq!(std::fs::read(&out).unwrap(), state);
    assert_eq!(std::fs::read_to_string(&env_out).unwrap(), "bar|unset\n");
}

#[test]
fn failing_hook_names_path_phase_status_and_stderr_and_stops_the_list() {
    if !have_busybox() {
        return;
    }
    let dir = temp_dir();
    let after = dir.path().join("after");
    let hooks = [
        sh_hook(
            "echo progress; echo 'pier-test: no network' >&2; exit 3",
            &[],
            None,
            None,
        ),
        sh_hook("touch \"$1\"", &[after.to_str().unwrap()], None, None),
    ];
    let err = hooks::run(Phase::Poststart, &hooks, b"{}").unwrap_err();
    assert!(matches!(err, HookError::Failed { .. }), "{err:?}");
    let text = err.to_string();
    for part in [
        "poststart hook /bin/busybox",
        "exit status: 3",
        "stderr: pier-test: no network",
        "stdout: progress",
    ] {
        assert!(text.contains(part), "{part:?} missing from {text:?}");
    }
    assert!(!after.exists(), "the list must stop at the first failure");
}

#[test]
fn hook_past_its_timeout_is_killed_and_reaped() {
    if !have_busybox() {
        return;
    }
    let dir = temp_dir();
    let pid_file = dir.path().join("pid");
    let hook = sh_hook(
        "echo $$ > \"$1\"; exec sleep 600",
        &[pid_file.to_str().unwrap()],
        None,
        Some(1),
    );
    let err = hooks::run(Phase::StartContainer, &[hook], b"{}").unwrap_err();
    assert_eq!(
        err.to_string(),
        "startContainer hook /bin/busybox timed out after 1 s"
    );
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    assert!(
        !Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "hook {pid} still exists"
    );
}

#[test]
fn hook_that_ignores_a_large_state_does_not_block() {
    if !have_busybox() {
        return;
    }
    let state = vec![b' '; 4 << 20];
    hooks::run(
        Phase::Poststop,
        &[sh_hook("exit 0", &[], None, None)],
        &state,
    )
    .unwrap();
}

#[test]
fn missing_hook_program_is_a_spawn_error() {
    let hook: Hook = serde_json::from_value(json!({"path": "/pier-test-no-such-hook"})).unwrap();
    let err = hooks::run(Phase::CreateContainer, &[hook], b"{}").unwrap_err();
    assert!(matches!(err, HookError::Spawn { .. }), "{err:?}");
    let text = err.to_string();
    let expected = "createContainer hook /pier-test-no-such-hook: start: No such file";
    assert!(text.starts_with(expected), "{text}");
}
