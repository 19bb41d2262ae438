//! Shared helpers of the `pier proxy` black-box tests: a guard over a running proxy with its
//! status pipe (fd 3) redirected to a file, free loopback ports and a checksum.
#![allow(dead_code)] // each test binary uses a different subset

use std::net::{Ipv4Addr, SocketAddr, TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long any single wait in these tests may last.
pub const WAIT: Duration = Duration::from_secs(5);

/// A `pier proxy` child; killed and reaped on drop.
#[derive(Debug)]
pub struct Proxy {
    child: Child,
    status: PathBuf,
    _dir: tempfile::TempDir,
}

impl Proxy {
    /// Starts `pier proxy ARGS` as dockerd does, with fd 3 open (here on a file).
    pub fn spawn(args: &[&str]) -> Proxy {
        let dir = tempfile::Builder::new()
            .prefix("pier-test-proxy")
            .tempdir()
            .unwrap();
        let status = dir.path().join("status");
        let child = Command::new("sh")
            .arg("-c")
            .arg("status=$1; shift; exec \"$0\" proxy \"$@\" 3>\"$status\"")
            .arg(env!("CARGO_BIN_EXE_pier"))
            .arg(&status)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning sh for pier proxy");
        Proxy {
            child,
            status,
            _dir: dir,
        }
    }

    /// Starts `pier proxy -use-listen-fd ARGS` with a TCP listener on 127.0.0.1 passed as fd 4,
    /// made by python3 as dockerd makes it; returns the proxy and the listener's port, or `None`
    /// without python3.
    pub fn spawn_with_listener(args: &[&str]) -> Option<(Proxy, u16)> {
        Proxy::spawn_with_listener_sndbuf(args, 0)
    }

    /// As [`Proxy::spawn_with_listener`], with SO_SNDBUF set to `sndbuf` bytes on the listener
    /// (0: the default), which the sockets accepted from it inherit, fixed (no autotuning).
    pub fn spawn_with_listener_sndbuf(args: &[&str], sndbuf: u32) -> Option<(Proxy, u16)> {
        const PASS: &str = "import os, socket, sys\n\
s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n\
b = int(os.environ['SNDBUF'])\n\
b and s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, b)\n\
os.dup2(s.fileno(), 4); os.set_inheritable(4, True); print(s.getsockname()[1], flush=True)\n\
os.execv(sys.argv[1], sys.argv[1:])";
        let dir = tempfile::Builder::new()
            .prefix("pier-test-proxy")
            .tempdir()
            .unwrap();
        let status = dir.path().join("status");
        let spawned = Command::new("sh")
            .arg("-c")
            .arg("status=$1; shift; exec python3 -c \"$0\" \"$@\" 3>\"$status\"")
            .arg(PASS)
            .arg(&status)
            .arg(env!("CARGO_BIN_EXE_pier"))
            .args(["proxy", "-use-listen-fd"])
            .args(args)
            .env("SNDBUF", sndbuf.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = spawned.expect("spawning sh for python3 and pier proxy");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let proxy = Proxy {
            child,
            status,
            _dir: dir,
        };
        Some((proxy, line.trim().parse().ok()?))
    }

    /// Starts a TCP or UDP proxy from 127.0.0.1:`host_port` to `container` and waits for "0\n".
    pub fn ready(proto: &str, host_port: u16, container: SocketAddr) -> Proxy {
        let mut proxy = Proxy::spawn(&[
            "-proto",
            proto,
            "-host-ip",
            "127.0.0.1",
            "-host-port",
            &host_port.to_string(),
            "-container-ip",
            &container.ip().to_string(),
            "-container-port",
            &container.port().to_string(),
        ]);
        let status = proxy.status();
        assert_eq!(status, "0\n", "status of the proxy: {status:?}");
        proxy
    }

    /// The status text, once the proxy has written it (or exited); bounded by [`WAIT`].
    pub fn status(&mut self) -> String {
        let start = Instant::now();
        loop {
            let exited = self.child.try_wait().unwrap().is_some();
            let text = std::fs::read_to_string(&self.status).unwrap_or_default();
            if text.starts_with("0\n") || exited {
                return text;
            }
            assert!(start.elapsed() < WAIT, "no status after {WAIT:?}: {text:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The proxy's pid (`sh` execs it, so it is the child's).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// How many pipes the proxy has open now (fd 2 is one: its stderr comes here).
    pub fn pipes(&self) -> usize {
        let fds = std::fs::read_dir(format!("/proc/{}/fd", self.pid())).unwrap();
        fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("pipe:"))
            .count()
    }

    /// The names of the proxy's threads.
    pub fn threads(&self) -> Vec<String> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).unwrap();
        tasks
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|name| name.trim().to_string())
            .collect()
    }

    /// Each thread's name and the CPUs it may run on (`Cpus_allowed_list`).
    pub fn thread_cpus(&self) -> Vec<(String, String)> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", self.pid())).unwrap();
        let read = |task: std::path::PathBuf| {
            let name = std::fs::read_to_string(task.join("comm")).ok()?;
            let status = std::fs::read_to_string(task.join("status")).ok()?;
            let cpus = status
                .lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
            Some((name.trim().to_string(), cpus.trim().to_string()))
        };
        tasks.filter_map(|t| read(t.ok()?.path())).collect()
    }

    /// Waits (bounded) for the proxy to exit on its own; its exit status and stderr.
    pub fn exit(mut self) -> (ExitStatus, String) {
        let start = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(start.elapsed() < WAIT, "the proxy did not exit");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stderr = String::new();
        use std::io::Read;
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        (status, stderr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago.
pub fn free_tcp_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A UDP port on 127.0.0.1 that was free a moment ago.
pub fn free_udp_port() -> u16 {
    UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// FNV-1a over `data`.
pub fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// `len` pseudo-random bytes (xorshift64), so a misplaced block changes the checksum.
pub fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
