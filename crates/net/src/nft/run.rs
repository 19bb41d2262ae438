//! Running the `nft` binary: one batch on stdin (`nft -f -` in native syntax, `nft -j -f -` in
//! JSON; either is one atomic transaction) or one JSON listing on stdout (`nft -j list ...`).
//! The child inherits the network namespace of the calling thread, which is how tests act
//! inside their own namespaces. Element updates made per container do not come here: they are
//! nfnetlink batches sent in-process (socket.rs).
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::{json, Value};

use super::NftError;

/// Whether an executable `nft` is on `PATH` (looked up, not run: a spawn costs milliseconds).
pub(crate) fn installed() -> bool {
    binary().is_some()
}

/// The `nft` on `PATH`, looked up once per process (spawning the bare name makes the child try
/// every `PATH` entry).
fn binary() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    let found = FOUND.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .map(|dir| dir.join("nft"))
            .find(|file| {
                std::fs::metadata(file)
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
    });
    found.as_deref()
}

/// `nft` by its found path (by name when none was found, so spawning reports it missing).
fn command() -> Command {
    Command::new(binary().unwrap_or(Path::new("nft")))
}

/// Applies `commands` (nft JSON command objects) as one transaction.
pub(crate) fn apply(
    step: &'static str,
    object: &str,
    commands: Vec<Value>,
) -> Result<(), NftError> {
    let batch = json!({ "nftables": commands }).to_string();
    feed(step, object, &["-j", "-f", "-"], &batch)
}

/// Applies `script` (nft native syntax, one command a line) as one transaction.
pub(crate) fn apply_text(step: &'static str, object: &str, script: &str) -> Result<(), NftError> {
    feed(step, object, &["-f", "-"], script)
}

fn spawn(args: &[&str]) -> std::io::Result<std::process::Child> {
    command()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

fn feed(step: &'static str, object: &str, args: &[&str], batch: &str) -> Result<(), NftError> {
    let spawn_error = |source| NftError::Spawn {
        step,
        object: object.to_string(),
        source,
    };
    let mut child = spawn(args).map_err(spawn_error)?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let written = stdin.write_all(batch.as_bytes());
    drop(stdin);
    let output = child.wait_with_output().map_err(spawn_error)?;
    written.map_err(spawn_error)?;
    if output.status.success() {
        return Ok(());
    }
    Err(NftError::Failed {
        step,
        object: object.to_string(),
        stderr: failure_text(&output),
    })
}

/// nft prints JSON-mode errors on stderr, sometimes on stdout: keep both.
fn failure_text(output: &std::process::Output) -> String {
    let text =
        [&output.stderr, &output.stdout].map(|b| String::from_utf8_lossy(b).trim().to_string());
    let text: Vec<String> = text.into_iter().filter(|t| !t.is_empty()).collect();
    match text.is_empty() {
        true => format!("exit {}", output.status),
        false => text.join("; "),
    }
}

/// Lists `what` (e.g. `["table", "ip", "filter"]`) as JSON; `Ok(None)` when nft reports that
/// the object does not exist.
pub(crate) fn list(step: &'static str, what: &[&str]) -> Result<Option<Value>, NftError> {
    let object = what.join(" ");
    let output = command()
        .args(["-j", "list"])
        .args(what)
        .output()
        .map_err(|source| NftError::Spawn {
            step,
            object: object.clone(),
            source,
        })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("No such file or directory") {
            return Ok(None);
        }
        return Err(NftError::Failed {
            step,
            object,
            stderr: stderr.trim().to_string(),
        });
    }
    serde_json::from_slice(&output.stdout)
        .map(Some)
        .map_err(|source| NftError::Parse {
            step,
            object,
            source,
        })
}

/// The objects of kind `kind` ("chain", "rule", ...) in an `nft -j list` answer.
pub(crate) fn objects<'a>(listing: &'a Value, kind: &'a str) -> impl Iterator<Item = &'a Value> {
    listing["nftables"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(move |entry| entry.get(kind))
}
