//! The engine's verbs: run, ps, inspect, logs, stop, kill, rm, exec, wait, port, gc.
//!
//! Theory of operation: (engine-core helper writes this header: the order of `run`'s steps, what is
//! recorded before each, who tears down, the locks.)
use std::io::Write;
use std::time::Duration;

use crate::config::RunConfig;
use crate::network::Networks;
use crate::Paths;

/// What `run` ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// `-d`: the container runs under its monitor; its full id.
    Detached { id: String },
    /// Foreground: the container's exit code (128+signal when killed).
    Exited { code: i32 },
}

/// One line of `pier ps` (also its `--format json` object).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Summary {
    pub id: String,
    pub name: String,
    pub rootfs: String,
    pub command: String,
    pub created: String,
    /// `running`, `exited (CODE)`, `created`.
    pub status: String,
    /// `0.0.0.0:8080->80/tcp, …`
    pub ports: String,
    pub networks: String,
}

/// `pier exec` flags.
#[derive(Debug, Clone, Default)]
pub struct ExecArgs {
    pub interactive: bool,
    pub tty: bool,
    pub env: Vec<String>,
    pub user: Option<String>,
    pub workdir: Option<String>,
    pub detach: bool,
    pub command: Vec<String>,
}

/// `pier gc`'s report: what was found left behind and removed.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GcReport {
    pub removed: Vec<String>,
}

/// Why an engine verb failed; variants name the step and the culprit.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("no such container: {0}")]
    NoSuchContainer(String),
    #[error("{0}")]
    Other(String),
}

/// The engine over one state directory.
#[derive(Debug)]
pub struct Engine {
    paths: Paths,
    networks: Networks,
}

impl Engine {
    /// Opens the state directory (creating it) and removes what crashed commands left behind.
    pub fn open(paths: Paths) -> Result<Engine, EngineError> {
        let networks = Networks::new(&paths);
        let _ = (&paths, &networks);
        todo!("engine-core helper")
    }

    pub fn networks(&self) -> &Networks {
        &self.networks
    }

    pub fn run(&self, config: RunConfig) -> Result<RunOutcome, EngineError> {
        let _ = (config, &self.paths);
        todo!("engine-core helper")
    }

    pub fn ps(&self, all: bool) -> Result<Vec<Summary>, EngineError> {
        let _ = all;
        todo!("engine-core helper")
    }

    pub fn inspect(&self, container: &str) -> Result<serde_json::Value, EngineError> {
        let _ = container;
        todo!("engine-core helper")
    }

    pub fn logs(
        &self,
        container: &str,
        follow: bool,
        tail: Option<usize>,
        stdout: &mut dyn Write,
        stderr: &mut dyn Write,
    ) -> Result<(), EngineError> {
        let _ = (container, follow, tail, stdout, stderr);
        todo!("engine-core helper")
    }

    /// Returns the container's full id.
    pub fn stop(&self, container: &str, timeout: Duration) -> Result<String, EngineError> {
        let _ = (container, timeout);
        todo!("engine-core helper")
    }

    pub fn kill(&self, container: &str, signal: i32) -> Result<String, EngineError> {
        let _ = (container, signal);
        todo!("engine-core helper")
    }

    pub fn rm(&self, container: &str, force: bool) -> Result<String, EngineError> {
        let _ = (container, force);
        todo!("engine-core helper")
    }

    /// Returns the exit code of the process (0 with `detach`).
    pub fn exec(&self, container: &str, args: &ExecArgs) -> Result<i32, EngineError> {
        let _ = (container, args);
        todo!("engine-core helper")
    }

    /// Blocks until the container exits; its exit code.
    pub fn wait(&self, container: &str) -> Result<i32, EngineError> {
        let _ = container;
        todo!("engine-core helper")
    }

    /// `pier port`: `80/tcp -> 0.0.0.0:32768` lines.
    pub fn port(&self, container: &str) -> Result<Vec<String>, EngineError> {
        let _ = container;
        todo!("engine-core helper")
    }

    pub fn gc(&self) -> Result<GcReport, EngineError> {
        todo!("engine-core helper")
    }
}
