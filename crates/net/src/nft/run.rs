//! Running the `nft` binary: one batch on stdin (`nft -f -` in native syntax, `nft -j -f -` in
//! JSON; either is one atomic transaction) or one JSON listing on stdout (`nft -j list ...`).
//! The child inherits the network namespace of the calling thread, which is how tests act
//! inside their own namespaces.
//! A batch that deletes elements is fed with [`apply_text_committed`]: the kernel frees deleted
//! objects after an RCU grace period, and the release of any nftables netlink socket while such
//! frees are pending waits for them (`nft_rcv_nl_event` flushes the destroy work), so `nft`'s
//! exit lags its commit by 10-20 ms here. With `-e` nft prints `# new generation N ...` once
//! the kernel has committed; that line is the success, and a thread reaps the child.
use std::io::{BufRead, BufReader, Read, Write};
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

/// Like [`apply_text`], but successful once the kernel reports the commit, without waiting
/// for `nft` to exit (see the header).
pub(crate) fn apply_text_committed(
    step: &'static str,
    object: &str,
    script: &str,
) -> Result<(), NftError> {
    let spawn_error = |source| NftError::Spawn {
        step,
        object: object.to_string(),
        source,
    };
    let mut child = spawn(&["-e", "-f", "-"]).map_err(spawn_error)?;
    let mut stdin = child.stdin.take().expect("stdin was piped");
    let written = stdin.write_all(script.as_bytes());
    drop(stdin);
    // stderr is drained meanwhile: an error quoting a 1,000-element line fills a pipe.
    let mut stderr_pipe = child.stderr.take().expect("stderr was piped");
    let stderr_reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr_pipe.read_to_string(&mut text);
        text
    });
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout was piped"));
    let mut echoed = String::new();
    let mut line = String::new();
    while stdout.read_line(&mut line).is_ok_and(|n| n > 0) {
        if line.starts_with("# new generation ") && written.is_ok() {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut stdout, &mut std::io::sink());
                child.wait()
            });
            return Ok(());
        }
        echoed += &line;
        line.clear();
    }
    let stderr = stderr_reader.join().unwrap_or_default();
    let status = child.wait().map_err(spawn_error)?;
    written.map_err(spawn_error)?;
    let text: Vec<&str> = [stderr.trim(), echoed.trim()]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect();
    Err(NftError::Failed {
        step,
        object: object.to_string(),
        stderr: match text.is_empty() {
            true => format!("exit {status} without reporting a commit"),
            false => text.join("; "),
        },
    })
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
