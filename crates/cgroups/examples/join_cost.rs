//! What joining a container's cgroups costs on this host (root; run with
//! `cargo run --release -p pier-cgroups --example join_cost [ROUNDS]`).
//!
//! Measures, as medians over ROUNDS (default 15) with 300 ms of idle time before each round so
//! the kernel's rcu_sync state is back to idle, as it is at a real container start:
//! - `Cgroup::create` (mkdir in every hierarchy + cpuset init) and mkdir alone per hierarchy;
//! - the parent writing a child's pid to cgroup.procs: the first write, and the next writes of
//!   a back-to-back burst (one per remaining hierarchy);
//! - a child moving itself with `SelfJoin::join` (writes `0` to each v1 `tasks` file), and the
//!   parent's `add_process` afterwards (reads /proc/<pid>/cgroup, writes nothing);
//! - `destroy`.
//!
//! With JOIN_COST_USERNS=1 the child enters a new user namespace between opening the `tasks`
//! files and joining, as a container init with a user namespace would.
//! Everything it makes is named `pier-test-bench-*` and removed before it exits.
use pier_cgroups::{Cgroup, Hierarchies, ManagerKind};
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        child(&args[2]);
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("join_cost needs root");
        std::process::exit(1);
    }
    let rounds: usize = args.get(1).and_then(|r| r.parse().ok()).unwrap_or(15);
    let found = Hierarchies::detect().expect("detect hierarchies");
    println!(
        "hierarchies: v1 [{}], cgroup2 {}",
        found
            .v1
            .iter()
            .map(|h| h.label())
            .collect::<Vec<_>>()
            .join(" "),
        found
            .v2
            .as_ref()
            .map_or("none".into(), |h| h.mountpoint.display().to_string())
    );
    mkdir_per_hierarchy(&found, rounds);
    let mut r = Results::default();
    for i in 0..rounds {
        round(
            &mut r,
            &format!("pier-test-bench-{}-{i}", std::process::id()),
        );
    }
    r.print();
}

#[derive(Default)]
struct Results {
    create: Vec<f64>,
    first_procs: Vec<f64>,
    burst_rest: Vec<f64>,
    open_tasks: Vec<f64>,
    self_join: Vec<f64>,
    add_after_join: Vec<f64>,
    destroy: Vec<f64>,
    hierarchies: usize,
}

impl Results {
    fn print(&mut self) {
        let n = self.hierarchies;
        println!(
            "Cgroup::create ({n} dirs)            {:8.3} ms",
            median(&mut self.create)
        );
        println!(
            "cgroup.procs, first write           {:8.3} ms",
            median(&mut self.first_procs)
        );
        println!(
            "cgroup.procs, next {} writes (burst) {:8.3} ms total",
            n - 1,
            median(&mut self.burst_rest)
        );
        println!(
            "self_join(): open {} tasks files    {:8.3} ms",
            n - 1,
            median(&mut self.open_tasks)
        );
        println!(
            "self-join, {} v1 tasks writes        {:8.3} ms total",
            n - 1,
            median(&mut self.self_join)
        );
        println!(
            "add_process after self-join         {:8.3} ms",
            median(&mut self.add_after_join)
        );
        println!(
            "destroy                             {:8.3} ms",
            median(&mut self.destroy)
        );
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn settle() {
    std::thread::sleep(Duration::from_millis(300));
}

/// mkdir + rmdir of a leaf in each hierarchy, one at a time, each after 50 ms idle.
fn mkdir_per_hierarchy(found: &Hierarchies, rounds: usize) {
    for h in found.v1.iter().chain(found.v2.iter()) {
        let dir: PathBuf = h
            .mountpoint
            .join(format!("pier-test-bench-mkdir-{}", std::process::id()));
        let mut times = Vec::new();
        for _ in 0..rounds {
            std::thread::sleep(Duration::from_millis(50));
            let t = Instant::now();
            std::fs::create_dir(&dir).expect("mkdir");
            times.push(ms(t));
            std::fs::remove_dir(&dir).expect("rmdir");
        }
        println!("mkdir {:<14} {:8.3} ms", h.label(), median(&mut times));
    }
}

fn create(name: &str) -> Cgroup {
    let path = PathBuf::from(format!("/{name}"));
    Cgroup::create(name, Some(&path), ManagerKind::Cgroupfs, None).expect("create")
}

/// One round: parent-side cgroup.procs writes, then a self-joining child.
fn round(r: &mut Results, name: &str) {
    settle();
    let t = Instant::now();
    let cg = create(name);
    r.create.push(ms(t));
    r.hierarchies = cg.dirs.len();

    let mut sleeper = Command::new("sleep")
        .arg("100")
        .spawn()
        .expect("spawn sleep");
    let pid = sleeper.id().to_string();
    settle();
    let mut dirs = cg.dirs.iter();
    let first = dirs.next().expect("a hierarchy");
    let t = Instant::now();
    std::fs::write(first.path.join("cgroup.procs"), &pid).expect("write cgroup.procs");
    r.first_procs.push(ms(t));
    let t = Instant::now();
    for d in dirs {
        std::fs::write(d.path.join("cgroup.procs"), &pid).expect("write cgroup.procs");
    }
    r.burst_rest.push(ms(t));
    sleeper.kill().expect("kill");
    sleeper.wait().expect("wait");

    settle();
    let exe = std::env::current_exe().expect("current exe");
    let mut child = Command::new(exe)
        .args(["--child", name])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn child");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .expect("child report");
    let mut figures = line
        .split_whitespace()
        .map(|f| f.parse::<f64>().expect("child timing"));
    r.open_tasks.push(figures.next().expect("open time"));
    r.self_join.push(figures.next().expect("join time"));
    let t = Instant::now();
    cg.add_process(child.id() as i32, true)
        .expect("add_process");
    r.add_after_join.push(ms(t));
    drop(child.stdin.take());
    child.wait().expect("wait child");

    let t = Instant::now();
    cg.destroy().expect("destroy");
    r.destroy.push(ms(t));
}

/// Child mode: join the v1 hierarchies of `name` itself and report the times (open, join)
/// in ms, then
/// wait for the parent (stdin closed) before exiting.
fn child(name: &str) {
    let cg = create(name);
    let t = Instant::now();
    let join = cg.self_join().expect("open tasks files");
    let opened = ms(t);
    if std::env::var_os("JOIN_COST_USERNS").is_some() {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).expect("unshare user ns");
    }
    let t = Instant::now();
    join.join().expect("self-join");
    let took = ms(t);
    println!("{opened} {took}");
    std::io::stdout().flush().expect("flush");
    let mut rest = String::new();
    let _ = std::io::stdin().read_line(&mut rest);
}
