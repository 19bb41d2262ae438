//! proxy_cpu: forwarder CPU per request, pier's proxy against docker-proxy, nginx `stream` and
//! haproxy (`mode tcp`), on the seed's workload (wrk, small HTTP request and "pong" reply).
//!
//!   cargo run --release -p pier-publish --example proxy_cpu -- [--rounds 3] [--duration 5]
//!       [--conns 1,2,4,8] [--only pier,docker-proxy,nginx,haproxy,direct] [--pier-binary PATH]
//!
//! Theory of operation: a "pong" HTTP server (this example, re-executed as `pong ADDR`; one
//! thread per connection) runs in a network namespace of its own behind a veth pair, like a
//! container (as root; otherwise on 127.0.0.1). Every forwarder listens on its own 127.0.0.1
//! port and forwards to it: pier's (this example re-executed as `forward HOST CONTAINER`, the
//! library `pier proxy` runs, or `--pier-binary`'s `proxy` verb), /usr/sbin/docker-proxy
//! started as dockerd starts it (docker's flags, fd 3 open), nginx with a `stream` server and
//! haproxy in `mode tcp`, each with one worker per core. All run for the whole benchmark; wrk
//! runs are interleaved (round -> concurrency -> forwarder) so that drift hits all alike. A
//! forwarder's CPU is utime+stime (+cutime+cstime) from /proc/PID/stat summed over the process
//! and its descendants, read before and after each run; divided by wrk's request count it is
//! the CPU per request. Medians over rounds are printed with the ratios to docker-proxy and
//! nginx measured in the same run. "direct" is wrk straight to the server (req/s only).
//!
//! Needs wrk; the peers it finds (docker-proxy, nginx with ngx_stream_module, haproxy); root
//! for the namespace. Leaves nothing behind: children are killed, the namespace (and with it
//! the veth pair) and the temporary directory removed on drop.
use pier_publish::proxy::{Config, Proxy};
use pier_publish::Protocol;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const PONG: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4\r\n\r\npong";
/// Host and namespace side of the veth pair (inside 198.18.0.0/15, the benchmark range).
const HOST_SIDE: &str = "198.19.250.1";
const NS_SIDE: &str = "198.19.250.2";
const SERVER_PORT: u16 = 8000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("pong") => pong(args[1].parse().expect("pong ADDR")),
        Some("forward") => forward(&args[1], &args[2]),
        _ => bench(Options::parse(&args)),
    }
}

/// Command-line options of the benchmark.
#[derive(Debug)]
struct Options {
    rounds: usize,
    duration: u32,
    conns: Vec<u32>,
    only: Vec<String>,
    pier_binary: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> Options {
        let mut o = Options {
            rounds: 3,
            duration: 5,
            conns: vec![1, 2, 4, 8],
            only: ["pier", "docker-proxy", "nginx", "haproxy", "direct"]
                .map(String::from)
                .to_vec(),
            pier_binary: None,
        };
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
            match flag.as_str() {
                "--rounds" => o.rounds = value.parse().expect("--rounds N"),
                "--duration" => o.duration = value.parse().expect("--duration SECONDS"),
                "--conns" => o.conns = value.split(',').map(|c| c.parse().unwrap()).collect(),
                "--only" => o.only = value.split(',').map(String::from).collect(),
                "--pier-binary" => o.pier_binary = Some(PathBuf::from(value)),
                _ => panic!("unknown flag {flag}"),
            }
        }
        o
    }
}

/// The pong server: one thread per connection, one reply per request head.
fn pong(addr: SocketAddr) {
    let listener = TcpListener::bind(addr).expect("binding the pong server");
    for conn in listener.incoming().flatten() {
        std::thread::spawn(move || serve_pong(conn));
    }
}

fn serve_pong(mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let mut buf = [0u8; 4096];
    let mut held = 0;
    loop {
        let n = match conn.read(&mut buf[held..]) {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        held += n;
        while let Some(end) = buf[..held].windows(4).position(|w| w == b"\r\n\r\n") {
            if conn.write_all(PONG).is_err() {
                return;
            }
            buf.copy_within(end + 4..held, 0);
            held -= end + 4;
        }
        if held == buf.len() {
            return;
        }
    }
}

/// pier's forwarder in this process, as `pier proxy` runs it (one event loop per core).
fn forward(host: &str, container: &str) {
    let config = Config {
        protocol: Protocol::Tcp,
        host: host.parse().expect("forward HOST"),
        container: container.parse().expect("forward CONTAINER"),
        listen_fd: None,
        udp_idle: Duration::from_secs(90),
        threads: 0,
    };
    Proxy::bind(config).expect("binding").run().expect("forwarding");
}

/// A child process stopped and reaped on drop: SIGTERM first, so that nginx's master stops
/// its workers, then SIGKILL after a second.
#[derive(Debug)]
struct Guarded(Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(1) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The server's namespace and veth pair, removed on drop (deleting the namespace deletes both
/// ends of the pair).
#[derive(Debug)]
struct Netns(String);

impl Netns {
    fn create() -> Netns {
        let name = format!("pier-bench-proxy-{}", std::process::id());
        let veth = format!("pbp{}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns(name);
        let n = ns.0.as_str();
        ip(&["link", "add", &veth, "type", "veth", "peer", "name", "eth0", "netns", n]);
        ip(&["addr", "add", &format!("{HOST_SIDE}/30"), "dev", &veth]);
        ip(&["link", "set", &veth, "up"]);
        ip(&["-n", n, "addr", "add", &format!("{NS_SIDE}/30"), "dev", "eth0"]);
        ip(&["-n", n, "link", "set", "eth0", "up"]);
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ns
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn ip(args: &[&str]) {
    let status = Command::new("ip").args(args).status().expect("running ip");
    assert!(status.success(), "ip {args:?} failed");
}

/// A temporary directory removed on drop.
#[derive(Debug)]
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One forwarder under test.
#[derive(Debug)]
struct Forwarder {
    name: String,
    /// Where wrk connects.
    addr: SocketAddr,
    /// None for "direct" (wrk straight to the server).
    child: Option<Guarded>,
}

fn bench(o: Options) {
    let root = nix::unistd::Uid::effective().is_root();
    let netns = root.then(Netns::create);
    let me = std::env::current_exe().expect("finding this program");
    let server: SocketAddr = match root {
        true => SocketAddr::new(NS_SIDE.parse().unwrap(), SERVER_PORT),
        false => SocketAddr::new([127, 0, 0, 1].into(), free_port()),
    };
    let mut pong = match &netns {
        Some(ns) => {
            let mut cmd = Command::new("ip");
            cmd.args(["netns", "exec", &ns.0]).arg(&me);
            cmd
        }
        None => Command::new(&me),
    };
    let _server = Guarded(pong.arg("pong").arg(server.to_string()).spawn().unwrap());
    wait_listening(server);
    let dir = TempDir(std::env::temp_dir().join(format!("pier-bench-proxy-{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let forwarders: Vec<Forwarder> = o
        .only
        .iter()
        .filter_map(|name| start(name, server, &me, &o, &dir.0))
        .collect();
    let tck = clk_tck();
    for f in &forwarders {
        wrk(f.addr, 2, 1);
    }
    // (conns, name) -> (req/s samples, µs per request samples)
    let mut results: BTreeMap<(u32, String), (Vec<f64>, Vec<f64>)> = BTreeMap::new();
    for round in 0..o.rounds {
        for &c in &o.conns {
            for f in &forwarders {
                let pid = f.child.as_ref().map(|g| g.0.id());
                let before = pid.map(tree_cpu_ticks);
                let (requests, rate) = wrk(f.addr, c, o.duration);
                let used = pid.map(tree_cpu_ticks).zip(before).map(|(a, b)| a - b);
                let us = used.map_or(f64::NAN, |t| t as f64 * 1e6 / tck / requests as f64);
                eprintln!("round {round} c{c} {:>12}: {rate:>8.0} req/s {us:>6.1} µs/req", f.name);
                let entry = results.entry((c, f.name.clone())).or_default();
                entry.0.push(rate);
                entry.1.push(us);
            }
        }
    }
    let place = if root { "in a netns behind veth" } else { "on loopback" };
    println!("\nmedians of {} rounds x {} s, wrk -t1..2, server {place}", o.rounds, o.duration);
    report(&o.conns, &forwarders, &results);
}

type Results = BTreeMap<(u32, String), (Vec<f64>, Vec<f64>)>;

fn report(conns: &[u32], forwarders: &[Forwarder], results: &Results) {
    println!("conns  forwarder        req/s  µs CPU/req  vs docker-proxy  vs nginx");
    for &c in conns {
        let med = |name: &str| {
            let r = results.get(&(c, name.to_string()))?;
            Some((median(&r.0), median(&r.1)))
        };
        for f in forwarders {
            let (rate, us) = med(&f.name).unwrap();
            let ratio = |peer: &str| match med(peer) {
                Some((_, p)) if f.child.is_some() => format!("{:.2}x", us / p),
                _ => "-".to_string(),
            };
            let (dp, ng) = (ratio("docker-proxy"), ratio("nginx"));
            println!("c{c:<5} {:<14} {rate:>8.0}  {us:>10.1}  {dp:>15}  {ng:>8}", f.name);
        }
    }
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Starts forwarder `name` on a free 127.0.0.1 port; None (with a line saying why) when the
/// peer is missing or does not start.
fn start(name: &str, server: SocketAddr, me: &Path, o: &Options, dir: &Path) -> Option<Forwarder> {
    if name == "direct" {
        let name = name.into();
        return Some(Forwarder { name, addr: server, child: None });
    }
    let addr = SocketAddr::new([127, 0, 0, 1].into(), free_port());
    let docker_flags = [
        "-proto".to_string(),
        "tcp".into(),
        "-host-ip".into(),
        addr.ip().to_string(),
        "-host-port".into(),
        addr.port().to_string(),
        "-container-ip".into(),
        server.ip().to_string(),
        "-container-port".into(),
        server.port().to_string(),
    ];
    let cmd = match name {
        "pier" => match &o.pier_binary {
            Some(bin) => with_status_fd(bin, Some("proxy"), &docker_flags, dir),
            None => {
                let mut cmd = Command::new(me);
                cmd.args(["forward", &addr.to_string(), &server.to_string()]);
                cmd
            }
        },
        "docker-proxy" => {
            with_status_fd(Path::new("/usr/sbin/docker-proxy"), None, &docker_flags, dir)
        }
        "nginx" => nginx(addr, server, dir),
        "haproxy" => haproxy(addr, server, dir),
        other => panic!("unknown forwarder {other}"),
    };
    let child = match spawn(cmd) {
        Ok(child) => child,
        Err(e) => {
            eprintln!("skipping {name}: {e}");
            return None;
        }
    };
    if !wait_listening(addr) {
        eprintln!("skipping {name}: it does not listen on {addr}");
        return None;
    }
    Some(Forwarder { name: name.into(), addr, child: Some(child) })
}

fn spawn(mut cmd: Command) -> std::io::Result<Guarded> {
    cmd.stdin(Stdio::null()).stdout(Stdio::null());
    cmd.spawn().map(Guarded)
}

/// `bin [verb] flags…` started as dockerd starts docker-proxy: fd 3 open (here on a file),
/// through `sh -c 'exec …'` so that the pid is the forwarder's.
fn with_status_fd(bin: &Path, verb: Option<&str>, flags: &[String], dir: &Path) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("status=$1; shift; exec \"$0\" \"$@\" 3>\"$status\"")
        .arg(bin)
        .arg(dir.join(format!("status-{}", flags[5])))
        .args(verb)
        .args(flags);
    cmd
}

/// nginx with one `stream` server, a worker per core, in the foreground.
fn nginx(addr: SocketAddr, server: SocketAddr, dir: &Path) -> Command {
    let conf = dir.join("nginx.conf");
    let text = format!(
        "load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n\
         worker_processes auto;\ndaemon off;\npid {pid};\nerror_log {dir}/nginx-error.log;\n\
         events {{ worker_connections 1024; }}\n\
         stream {{ server {{ listen {addr}; proxy_pass {server}; }} }}\n",
        pid = dir.join("nginx.pid").display(),
        dir = dir.display(),
    );
    std::fs::write(&conf, text).unwrap();
    let mut cmd = Command::new("nginx");
    cmd.arg("-p").arg(dir).arg("-e").arg(dir.join("nginx-error.log"));
    cmd.arg("-c").arg(conf);
    cmd
}

/// haproxy in `mode tcp`, a thread per core, in the foreground.
fn haproxy(addr: SocketAddr, server: SocketAddr, dir: &Path) -> Command {
    let conf = dir.join("haproxy.cfg");
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let text = format!(
        "global\n  nbthread {threads}\n\
         defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\n\
         frontend f\n  bind {addr}\n  default_backend b\n\
         backend b\n  server s {server}\n"
    );
    std::fs::write(&conf, text).unwrap();
    let mut cmd = Command::new("haproxy");
    cmd.arg("-db").arg("-f").arg(conf);
    cmd
}

/// Runs wrk against `addr`; (requests, requests per second).
fn wrk(addr: SocketAddr, conns: u32, seconds: u32) -> (u64, f64) {
    let out = Command::new("wrk")
        .args(["-t", &conns.min(2).to_string(), "-c", &conns.to_string()])
        .args(["-d", &format!("{seconds}s"), &format!("http://{addr}/")])
        .output()
        .expect("running wrk (is it installed?)");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = |line: &str, at: usize| -> Option<f64> {
        text.lines()
            .find(|l| l.contains(line))?
            .split_whitespace()
            .nth(at)?
            .parse()
            .ok()
    };
    let requests = field("requests in", 0).unwrap_or_else(|| panic!("wrk said: {text}"));
    let rate = field("Requests/sec:", 1).unwrap_or(f64::NAN);
    (requests as u64, rate)
}

/// utime+stime+cutime+cstime of `pid` and all its descendants, in clock ticks.
fn tree_cpu_ticks(pid: u32) -> u64 {
    let stats: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            // Fields after the command name, which is in parentheses and may hold spaces.
            let rest: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ppid = rest[1].parse().ok()?;
            let ticks = rest[11..15].iter().map(|f| f.parse::<u64>().unwrap_or(0)).sum();
            Some((p, ppid, ticks))
        })
        .collect();
    let mut tree = vec![pid];
    let mut total = 0;
    while let Some(p) = tree.pop() {
        for &(child, ppid, ticks) in &stats {
            if child == p {
                total += ticks;
            }
            if ppid == p {
                tree.push(child);
            }
        }
    }
    total
}

fn clk_tck() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().expect("running getconf");
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("CLK_TCK")
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Waits (up to 5 s) until `addr` accepts connections.
fn wait_listening(addr: SocketAddr) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        if TcpStream::connect(addr).is_ok() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}
