//! The rows of `pier bench start`: which programs are measured, how each is invoked, and how the
//! containers a row may leave behind are removed.
//!
//! Theory of operation: a row is a runtime × a seccomp mode. The runtimes are pier (this binary),
//! crun and runc from Debian, each started as `<runtime> --root <state dir> run -b <bundle> <id>`
//! with a state dir of its own under the benchmark's work dir and a fresh id per run, and the floor,
//! `unshare -nmiup -f true`: the same namespaces and a fork, without any runtime, which has no seccomp
//! variant. A runtime that is not installed is skipped, with the reason reported. `run` deletes the
//! container when it exits; whatever a failing run leaves is force-deleted by [`sweep`] with the same
//! runtime, and the work dir is removed.
//!
//! The engine rows (issue 4) run `pier run --rm --name ID --network none|bridge [-p 8080] host
//! /bin/true` (with `--security-opt seccomp=unconfined` in the no-seccomp mode): the engine's whole
//! path, in the engine's own state dir (PIER_STATE_DIR or its default) since the bridge it makes
//! belongs to that state. Their leftovers are found by name (`pier-bench-<pid>-…`) in `pier ps -a`.
//!
//! The docker and podman rows run `docker run --rm` and `podman run --rm` with the same networks
//! on the same busybox root; their daemon, network namespace and state live in the work dir's
//! `peers/` and are set up and torn down by peers_engine.rs, not swept here. Their ratio is taken
//! against the engine row of the same network ([`Runtime::baseline`]).
//!
//! Privileges: root. Exercised by the black-box test tests/bench_start.rs.
use super::bundle::{Bundles, Seccomp};
use super::peers_engine;
use super::runner::{CrunNamespace, Invocation};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A program measured by the benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    /// This pier binary.
    Pier,
    /// crun from Debian (in a private mount namespace without the cgroup2 mount).
    Crun,
    /// runc from Debian.
    Runc,
    /// `unshare -nmiup -f true`: the namespaces and a fork, no runtime.
    Floor,
    /// The engine: `pier run --rm --network none host /bin/true`.
    #[value(name = "pier-run-none")]
    #[serde(rename = "pier-run-none")]
    PierRunNone,
    /// The engine with a bridge network: `pier run --rm --network bridge host /bin/true`.
    #[value(name = "pier-run-bridge")]
    #[serde(rename = "pier-run-bridge")]
    PierRunBridge,
    /// The engine with a bridge network and a published port (`-p 8080`, host port picked).
    #[value(name = "pier-run-publish")]
    #[serde(rename = "pier-run-publish")]
    PierRunPublish,
    /// `docker run --rm --network none` on the benchmark's private dockerd.
    #[value(name = "docker-run-none")]
    #[serde(rename = "docker-run-none")]
    DockerRunNone,
    /// `docker run --rm --network bridge`.
    #[value(name = "docker-run-bridge")]
    #[serde(rename = "docker-run-bridge")]
    DockerRunBridge,
    /// `docker run --rm -p 8080:80` (bridge, one published port).
    #[value(name = "docker-run-publish")]
    #[serde(rename = "docker-run-publish")]
    DockerRunPublish,
    /// `podman run --rm --network none --rootfs DIR` with runc.
    #[value(name = "podman-run-none")]
    #[serde(rename = "podman-run-none")]
    PodmanRunNone,
    /// `podman run --rm` on a netavark bridge network.
    #[value(name = "podman-run-bridge")]
    #[serde(rename = "podman-run-bridge")]
    PodmanRunBridge,
    /// `podman run --rm -p 8080:80` on a netavark bridge network.
    #[value(name = "podman-run-publish")]
    #[serde(rename = "podman-run-publish")]
    PodmanRunPublish,
}

impl Runtime {
    pub const ALL: [Runtime; 13] = [
        Runtime::Pier,
        Runtime::Crun,
        Runtime::Runc,
        Runtime::Floor,
        Runtime::PierRunNone,
        Runtime::PierRunBridge,
        Runtime::PierRunPublish,
        Runtime::DockerRunNone,
        Runtime::DockerRunBridge,
        Runtime::DockerRunPublish,
        Runtime::PodmanRunNone,
        Runtime::PodmanRunBridge,
        Runtime::PodmanRunPublish,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Runtime::Pier => "pier",
            Runtime::Crun => "crun",
            Runtime::Runc => "runc",
            Runtime::Floor => "floor",
            Runtime::PierRunNone => "pier run --network none",
            Runtime::PierRunBridge => "pier run --network bridge",
            Runtime::PierRunPublish => "pier run --network bridge -p 8080",
            Runtime::DockerRunNone => "docker run --network none",
            Runtime::DockerRunBridge => "docker run --network bridge",
            Runtime::DockerRunPublish => "docker run --network bridge -p 8080:80",
            Runtime::PodmanRunNone => "podman run --network none",
            Runtime::PodmanRunBridge => "podman run --network bridge",
            Runtime::PodmanRunPublish => "podman run --network bridge -p 8080:80",
        }
    }

    /// A name part without spaces (container names).
    fn tag(self) -> &'static str {
        match self {
            Runtime::PierRunNone => "run-none",
            Runtime::PierRunBridge => "run-bridge",
            Runtime::PierRunPublish => "run-publish",
            other => other.label(),
        }
    }

    /// True for the engine's rows (`pier run … host /bin/true`), which take no bundle.
    pub fn is_engine(self) -> bool {
        matches!(
            self,
            Runtime::PierRunNone | Runtime::PierRunBridge | Runtime::PierRunPublish
        )
    }

    /// True for the docker rows (a private dockerd, see peers_engine.rs).
    pub fn is_docker(self) -> bool {
        matches!(
            self,
            Runtime::DockerRunNone | Runtime::DockerRunBridge | Runtime::DockerRunPublish
        )
    }

    /// True for the podman rows (run inside the peers' network namespace).
    pub fn is_podman(self) -> bool {
        matches!(
            self,
            Runtime::PodmanRunNone | Runtime::PodmanRunBridge | Runtime::PodmanRunPublish
        )
    }

    /// The network a row's container gets (the bundle rows' is a new, empty namespace).
    fn network(self) -> Network {
        match self {
            Runtime::PierRunBridge | Runtime::DockerRunBridge | Runtime::PodmanRunBridge => {
                Network::Bridge
            }
            Runtime::PierRunPublish | Runtime::DockerRunPublish | Runtime::PodmanRunPublish => {
                Network::Publish
            }
            _ => Network::None,
        }
    }

    /// The row this row's ratio is taken against: the engine row of the same network for docker
    /// and podman, the bare runtime `pier` for every other row.
    pub fn baseline(self) -> Runtime {
        if !(self.is_docker() || self.is_podman()) {
            return Runtime::Pier;
        }
        match self.network() {
            Network::None => Runtime::PierRunNone,
            Network::Bridge => Runtime::PierRunBridge,
            Network::Publish => Runtime::PierRunPublish,
        }
    }

    /// The program of this row: this binary for pier, else found in PATH; Err(reason) when missing.
    pub fn program(self) -> Result<PathBuf, String> {
        let (name, package) = match self {
            Runtime::DockerRunNone | Runtime::DockerRunBridge | Runtime::DockerRunPublish => {
                return peers_engine::docker_program()
            }
            Runtime::PodmanRunNone | Runtime::PodmanRunBridge | Runtime::PodmanRunPublish => {
                return peers_engine::podman_program()
            }
            Runtime::Pier
            | Runtime::PierRunNone
            | Runtime::PierRunBridge
            | Runtime::PierRunPublish => {
                return std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))
            }
            Runtime::Crun => ("crun", "crun"),
            Runtime::Runc => ("runc", "runc"),
            Runtime::Floor => ("unshare", "util-linux"),
        };
        find_in_path(name)
            .ok_or_else(|| format!("{name} not found in PATH (apt-get install {package})"))
    }
}

/// The network of an engine row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    None,
    Bridge,
    /// A bridge and one published port.
    Publish,
}

/// Finds `name` in PATH.
pub fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// A measured row and what happened to it.
#[derive(Debug)]
pub struct Row {
    pub runtime: Runtime,
    pub seccomp: Seccomp,
    pub program: PathBuf,
    bundle: PathBuf,
    state: PathBuf,
    /// Measured samples (warm-up runs excluded).
    pub samples: Vec<Duration>,
    /// Why the row stopped being measured, if it did.
    pub failure: Option<String>,
}

impl Row {
    /// The command of one run; `run` numbers the runs of the row.
    pub fn invocation(&self, run: usize) -> Invocation {
        if self.runtime == Runtime::Floor {
            let args = ["-nmiup", "-f", "true"].map(Into::into).to_vec();
            return Invocation {
                program: self.program.clone(),
                args,
            };
        }
        let id = format!(
            "pier-bench-{}-{}-{}-{run}",
            std::process::id(),
            self.runtime.label(),
            self.seccomp.label()
        );
        if self.runtime.is_engine() {
            return self.engine_invocation(id.replace(self.runtime.label(), self.runtime.tag()));
        }
        let unconfined = self.seccomp == Seccomp::None;
        let network = self.runtime.network();
        if self.runtime.is_docker() {
            let args = peers_engine::docker_run_args(&self.state, network, unconfined);
            return Invocation {
                program: self.program.clone(),
                args,
            };
        }
        if self.runtime.is_podman() {
            let args = peers_engine::podman_run_args(&self.state, network, unconfined);
            return Invocation {
                program: self.program.clone(),
                args,
            };
        }
        let args = vec![
            "--root".into(),
            self.state.clone().into(),
            "run".into(),
            "-b".into(),
            self.bundle.clone().into(),
            id.into(),
        ];
        Invocation {
            program: self.program.clone(),
            args,
        }
    }

    /// `pier run --rm --name ID --network … [-p 8080] [--security-opt seccomp=unconfined] host
    /// /bin/true`: the engine's whole path, in the engine's own state dir (PIER_STATE_DIR or its
    /// default), since the bridge it makes belongs to that state and must not outlive it.
    fn engine_invocation(&self, id: String) -> Invocation {
        let mut args: Vec<std::ffi::OsString> = vec!["run".into(), "--rm".into()];
        args.extend(["--name".into(), id.into()]);
        let network = match self.runtime {
            Runtime::PierRunNone => "none",
            _ => "bridge",
        };
        args.extend(["--network".into(), network.into()]);
        if self.runtime == Runtime::PierRunPublish {
            args.extend(["-p".into(), "8080".into()]);
        }
        if self.seccomp == Seccomp::None {
            args.extend(["--security-opt".into(), "seccomp=unconfined".into()]);
        }
        args.extend(["host".into(), "/bin/true".into()]);
        Invocation {
            program: self.program.clone(),
            args,
        }
    }
}

/// A row that is not measured, and why.
#[derive(Debug, serde::Serialize)]
pub struct Skipped {
    pub runtime: Runtime,
    pub seccomp: Option<Seccomp>,
    pub reason: String,
}

/// The rows to measure, in table order (mode by mode, runtimes in the order asked), and the skipped
/// ones.
pub fn plan(
    runtimes: &[Runtime],
    modes: &[Seccomp],
    work: &Path,
    bundles: &Bundles,
) -> (Vec<Row>, Vec<Skipped>) {
    let mut rows = Vec::new();
    let mut skipped = Vec::new();
    for &runtime in runtimes {
        let program = match runtime.program() {
            Ok(program) => program,
            Err(reason) => {
                skipped.push(Skipped {
                    runtime,
                    seccomp: None,
                    reason,
                });
                continue;
            }
        };
        for &seccomp in modes {
            if runtime == Runtime::Floor && seccomp != Seccomp::None {
                continue;
            }
            let state = if runtime.is_docker() || runtime.is_podman() {
                peers_engine::dir(work)
            } else {
                work.join(format!("state-{}", runtime.label()))
            };
            let bundle = bundles.path(seccomp);
            rows.push(Row {
                runtime,
                seccomp,
                program: program.clone(),
                bundle,
                state,
                samples: Vec::new(),
                failure: None,
            });
        }
    }
    rows.sort_by_key(|row| modes.iter().position(|m| *m == row.seccomp));
    (rows, skipped)
}

/// Force-deletes every container that a runtime of `rows` still lists in its state dir (crun's
/// inside its namespace); returns one note per container found. Asking the runtime (`list -q`)
/// rather than reading the directory keeps its own non-container entries (pier's seccomp
/// cache) out of the sweep.
pub fn sweep(rows: &[Row], crun_ns: Option<&CrunNamespace>) -> Vec<String> {
    let mut notes = Vec::new();
    let mut seen = Vec::new();
    let swept_elsewhere = |r: Runtime| r == Runtime::Floor || r.is_docker() || r.is_podman();
    for row in rows.iter().filter(|r| !swept_elsewhere(r.runtime)) {
        if row.runtime.is_engine() && !seen.contains(&row.runtime) {
            seen.extend([
                Runtime::PierRunNone,
                Runtime::PierRunBridge,
                Runtime::PierRunPublish,
            ]);
            notes.extend(sweep_engine(row));
            continue;
        }
        if seen.contains(&row.runtime) || !row.state.is_dir() {
            continue;
        }
        seen.push(row.runtime);
        let in_ns = |mut cmd: Command| match (row.runtime, crun_ns) {
            (Runtime::Crun, Some(ns)) => ns.run(|| cmd.output()).ok().and_then(Result::ok),
            _ => cmd.output().ok(),
        };
        let listed = in_ns(runtime_command(row, &["list", "-q"]))
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_default();
        for id in listed.split_whitespace() {
            let deleted = in_ns(runtime_command(row, &["delete", "--force", id]));
            let outcome = if deleted.is_some_and(|out| out.status.success()) {
                "deleted"
            } else {
                "could not delete"
            };
            notes.push(format!(
                "{} left container {id} behind ({outcome} it)",
                row.runtime.label()
            ));
        }
    }
    notes
}

/// Removes every container of this benchmark (named `pier-bench-<pid>-…`) the engine rows left.
fn sweep_engine(row: &Row) -> Vec<String> {
    let engine = |args: &[&str]| {
        let mut cmd = Command::new(&row.program);
        cmd.args(args).stdin(Stdio::null());
        cmd.output().ok().filter(|out| out.status.success())
    };
    let listed: serde_json::Value = engine(&["ps", "-a", "--format", "json"])
        .and_then(|out| serde_json::from_slice(&out.stdout).ok())
        .unwrap_or_default();
    let prefix = format!("pier-bench-{}-", std::process::id());
    let names = listed
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["name"].as_str());
    names
        .filter(|name| name.starts_with(&prefix))
        .map(|id| {
            let outcome = if engine(&["rm", "-f", id]).is_some() {
                "removed"
            } else {
                "could not remove"
            };
            format!("pier run left container {id} behind ({outcome} it)")
        })
        .collect()
}

/// `PROGRAM --root STATE ARGS...` with no stdin.
fn runtime_command(row: &Row, args: &[&str]) -> Command {
    let mut cmd = Command::new(&row.program);
    cmd.arg("--root")
        .arg(&row.state)
        .args(args)
        .stdin(Stdio::null());
    cmd
}

#[cfg(test)]
impl Row {
    /// A row with given samples, for the report's unit tests.
    pub fn for_test(
        runtime: Runtime,
        seccomp: Seccomp,
        samples: Vec<Duration>,
        failure: Option<&str>,
    ) -> Row {
        let (bundle, state) = (PathBuf::from("/bundle"), PathBuf::from("/state"));
        let program = PathBuf::from(runtime.label());
        Row {
            runtime,
            seccomp,
            program,
            bundle,
            state,
            samples,
            failure: failure.map(String::from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_rows_get_a_fresh_id_per_run_and_their_own_root() {
        let row = Row::for_test(Runtime::Runc, Seccomp::Docker, vec![], None);
        let first = row.invocation(1).display();
        let second = row.invocation(2).display();
        assert_ne!(first, second);
        assert!(
            first.starts_with("runc --root /state run -b /bundle pier-bench-"),
            "{first}"
        );
        assert!(first.ends_with("-runc-docker-1"), "{first}");
    }

    #[test]
    fn docker_and_podman_rows_compare_with_the_engine_row_of_their_network() {
        assert_eq!(Runtime::DockerRunNone.baseline(), Runtime::PierRunNone);
        assert_eq!(Runtime::PodmanRunBridge.baseline(), Runtime::PierRunBridge);
        assert_eq!(
            Runtime::DockerRunPublish.baseline(),
            Runtime::PierRunPublish
        );
        assert_eq!(Runtime::PierRunPublish.baseline(), Runtime::Pier);
        assert_eq!(Runtime::Runc.baseline(), Runtime::Pier);
    }

    #[test]
    fn podman_rows_run_on_the_peers_rootfs() {
        let row = Row::for_test(Runtime::PodmanRunNone, Seccomp::Docker, vec![], None);
        let line = row.invocation(0).display();
        assert!(line.contains(" run --rm --network none --ulimit"), "{line}");
        assert!(line.ends_with("--rootfs /state/rootfs /bin/true"), "{line}");
        assert!(!line.contains("seccomp=unconfined"), "{line}");
    }

    #[test]
    fn floor_is_unshare_true() {
        let row = Row::for_test(Runtime::Floor, Seccomp::None, vec![], None);
        assert_eq!(row.invocation(0).display(), "floor -nmiup -f true");
    }
}
