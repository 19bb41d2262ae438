//! What `pier bench net` does to the host, and how it undoes it: commands it runs (`ip`,
//! `iptables`), processes it starts (each in its own process group), sysctls it changes, and the
//! cleanup stack that reverses all of it.
//!
//! Theory of operation: every change is pushed onto a [`Cleanup`] stack the moment it is made
//! (or just before, for processes), so whatever point a run stops at — a failed row, an error,
//! Ctrl-C — unwinding the stack in reverse leaves the host as it was. Unwinding keeps going past
//! failures and reports every one. Processes are killed with SIGKILL to their whole group (a
//! forwarder's workers included) and reaped: nothing the benchmark started holds state worth a
//! graceful stop.
//!
//! Privileges: root. Exercised by tests/bench_net.rs.
use anyhow::Context;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Runs `program args…`; fails with its stderr when it exits non-zero.
pub fn cmd(program: &str, args: &[&str]) -> anyhow::Result<()> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    anyhow::ensure!(
        output.status.success(),
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Feeds `rules` (iptables-restore syntax) to `iptables-restore --noflush`.
pub fn restore(rules: &str) -> anyhow::Result<()> {
    let mut child = Command::new("iptables-restore")
        .args(["-w", "--noflush"])
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run iptables-restore")?;
    if let Some(mut stdin) = child.stdin.take() {
        std::io::Write::write_all(&mut stdin, rules.as_bytes())
            .context("writing rules to iptables-restore")?;
    }
    let output = child
        .wait_with_output()
        .context("waiting for iptables-restore")?;
    anyhow::ensure!(
        output.status.success(),
        "iptables-restore: {}",
        String::from_utf8_lossy(&output.stderr).trim()
    );
    Ok(())
}

/// Spawns `command` in a process group of its own (so a Ctrl-C on the terminal reaches only the
/// benchmark, which then stops it), stdin on /dev/null.
pub fn spawn(mut command: Command, what: &str) -> anyhow::Result<Child> {
    command.stdin(Stdio::null()).process_group(0);
    command
        .spawn()
        .with_context(|| format!("cannot start {what}"))
}

/// Waits until a TCP connection to `addr` succeeds, or fails after `within`. When `child` exits
/// first, fails with its status.
pub fn wait_listening(
    addr: SocketAddr,
    mut child: Option<&mut Child>,
    within: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(Ok(Some(status))) = child.as_mut().map(|c| c.try_wait()) {
            anyhow::bail!("it exited ({status}) before listening on {addr}");
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "nothing listens on {addr} after {} s",
            within.as_secs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Fails when `port` is taken on the wildcard address of `v6`'s family (or on 0.0.0.0).
pub fn check_port_free(port: u16, v6: bool) -> anyhow::Result<()> {
    let wildcard: SocketAddr = if v6 {
        (std::net::Ipv6Addr::UNSPECIFIED, port).into()
    } else {
        (std::net::Ipv4Addr::UNSPECIFIED, port).into()
    };
    TcpListener::bind(wildcard)
        .map(drop)
        .map_err(|e| anyhow::anyhow!("port {port} is in use ({e}): pick free ports with --port"))
}

/// One change to undo.
#[derive(Debug)]
pub enum Undo {
    /// Kill the process group of this child and reap it.
    Process(String, Child),
    /// `ip netns del NAME`.
    Netns(String),
    /// `iptables -t TABLE -D ARGS…` (the rule was added with -A or -I and these arguments).
    Rule(String, Vec<String>),
    /// `iptables -t TABLE -F CHAIN; -X CHAIN`.
    Chain(String, String),
    /// Write the old value back to this /proc/sys file.
    Sysctl(String, String),
    /// Remove this directory tree (the run's work dir).
    Dir(std::path::PathBuf),
    /// Run this program with these arguments (`pier rm -f NAME`).
    Command(String, Vec<String>),
    /// Remove the run's private eBPF pin dir, if it was made (`pins.rs`).
    Pins(std::path::PathBuf),
}

/// The stack of changes made so far; unwound on [`Cleanup::run`] and on drop.
#[derive(Debug, Default)]
pub struct Cleanup {
    stack: Vec<Undo>,
}

impl Cleanup {
    pub fn push(&mut self, undo: Undo) {
        self.stack.push(undo);
    }

    /// Sets a sysctl (a /proc/sys path) and records its old value; no change, no record.
    pub fn sysctl(&mut self, path: &str, value: &str) -> anyhow::Result<()> {
        let old = std::fs::read_to_string(path).with_context(|| format!("reading {path}"))?;
        if old.trim() == value {
            return Ok(());
        }
        std::fs::write(path, value).with_context(|| format!("writing {value} to {path}"))?;
        self.push(Undo::Sysctl(path.to_string(), old.trim().to_string()));
        Ok(())
    }

    /// Adds an iptables rule (`-A`/`-I CHAIN …` in `table`) and records its removal.
    pub fn rule(&mut self, table: &str, op: &str, rule: &[&str]) -> anyhow::Result<()> {
        let mut args = vec!["-w", "-t", table, op];
        args.extend_from_slice(rule);
        cmd("iptables", &args)?;
        let rule = rule.iter().map(|s| s.to_string()).collect();
        self.push(Undo::Rule(table.to_string(), rule));
        Ok(())
    }

    /// Creates an iptables chain in `table` and records its removal.
    pub fn chain(&mut self, table: &str, chain: &str) -> anyhow::Result<()> {
        cmd("iptables", &["-w", "-t", table, "-N", chain])?;
        self.push(Undo::Chain(table.to_string(), chain.to_string()));
        Ok(())
    }

    /// Undoes everything, newest first; returns what could not be undone.
    pub fn run(&mut self) -> Vec<String> {
        let mut failures = Vec::new();
        while let Some(undo) = self.stack.pop() {
            if let Err(e) = undo_one(undo) {
                failures.push(format!("{e:#}"));
            }
        }
        failures
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for failure in self.run() {
            eprintln!("pier bench net: cleanup: {failure}");
        }
    }
}

fn undo_one(undo: Undo) -> anyhow::Result<()> {
    match undo {
        Undo::Process(what, mut child) => {
            let group = Pid::from_raw(child.id() as i32);
            match killpg(group, Signal::SIGKILL) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => anyhow::bail!("killing {what} (process group {group}): {e}"),
            }
            child.wait().with_context(|| format!("reaping {what}"))?;
            Ok(())
        }
        Undo::Netns(name) => cmd("ip", &["netns", "del", &name]),
        Undo::Rule(table, rule) => {
            let mut args = vec!["-w", "-t", &table, "-D"];
            args.extend(rule.iter().map(String::as_str));
            cmd("iptables", &args)
        }
        Undo::Chain(table, chain) => {
            cmd("iptables", &["-w", "-t", &table, "-F", &chain])?;
            cmd("iptables", &["-w", "-t", &table, "-X", &chain])
        }
        Undo::Dir(path) => {
            std::fs::remove_dir_all(&path).with_context(|| format!("removing {}", path.display()))
        }
        Undo::Command(program, args) => cmd_within(&program, &args, Duration::from_secs(60)),
        Undo::Pins(dir) => super::pins::remove(&dir)
            .with_context(|| format!("removing the eBPF pins in {}", dir.display())),
        Undo::Sysctl(path, old) => {
            std::fs::write(&path, &old).with_context(|| format!("restoring {path} to {old}"))
        }
    }
}

/// Runs `program args…` (output discarded), killing it when it takes longer than `within`.
fn cmd_within(program: &str, args: &[String], within: Duration) -> anyhow::Result<()> {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .with_context(|| format!("cannot run {program}"))?;
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait()? {
            anyhow::ensure!(status.success(), "{program} {}: {status}", args.join(" "));
            return Ok(());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!(
                "{program} {}: no exit after {} s; killed",
                args.join(" "),
                within.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The path of a program in PATH, if any.
pub fn which(program: &str) -> Option<std::path::PathBuf> {
    if program.contains('/') {
        let path = std::path::PathBuf::from(program);
        return path.is_file().then_some(path);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
