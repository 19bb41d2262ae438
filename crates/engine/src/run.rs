//! `run`'s start path, its end (exit, teardown), and the views of a record (inspect, port, ps).
//!
//! Theory of operation: see `engine.rs` for the order of the steps and what each records. The
//! start path runs in the responsible process (the foreground `pier run`, or the monitor
//! forked by `monitor::detach`) and never sleeps, polls or starts a subprocess of its own; the
//! container's init is created with pier-runtime in-process (`Runtime::create_child`), so it
//! is this process's child and its stdio are what the caller chose: the terminal (foreground,
//! stdin /dev/null unless `-i`) or pipes the monitor logs (`-d`). The process must be
//! single-threaded when the init is forked: the network steps that use threads (pier-net runs
//! namespace work on its own thread and joins it) come after the fork. A bridged container's
//! netns cookie is recorded once attached and registered with the ebpf programs as a client
//! when they serve this namespace, so containers on one network reach each other's published
//! ports without NAT; a publish registers those that started before the pins existed, and a
//! `container:` joiner records the cookie of the namespace it joins (clients.rs).
//! Privileges: root. Tests: crates/engine/tests/priv_engine.rs.
use oci_spec::runtime::{Process, Spec, UserBuilder};
use std::fs::{self, File};
use std::net::IpAddr;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use crate::config::{NetworkMode, Rootfs, RunConfig};
use crate::crash;
use crate::engine::{io_error, Engine, EngineError, ExecArgs, RunOutcome};
use crate::logs::Logger;
use crate::monitor::{self, Pipes, Side};
use crate::network::{self, Driver, Network};
use crate::spec::{Context, NetNs};
use crate::store::{Proc, Record, Status};
use crate::tty::Console;
use pier_publish::engine::{Publish, Target};
use pier_runtime::{Child, CreateOptions, Stdio};

/// What the start path made that the caller keeps: the init (a child of this process) and,
/// with `-t`, the master of its terminal.
#[derive(Debug, Default)]
struct Made {
    child: Option<Child>,
    master: Option<OwnedFd>,
}

/// The publish engine and target the planned entries are applied with.
type Planned = Option<(Box<dyn Publish>, Target)>;

impl Engine {
    pub fn run(&self, config: RunConfig) -> Result<RunOutcome, EngineError> {
        if config.detach {
            return self.run_detached(config);
        }
        let mut record = self.store.register(&config)?;
        let mut made = Made::default();
        if let Err(e) = self.start(
            &mut record,
            foreground_stdio(config.interactive)?,
            &mut made,
        ) {
            self.abort(&mut record, made.child);
            return Err(e);
        }
        let child = made.child.expect("a started container has an init");
        let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
        let (mut io, _raw_mode) =
            foreground_io(made.master.as_ref(), config.interactive, &stdin, &stdout);
        let code = monitor::supervise(&child.pidfd, &mut io)?;
        self.finish(&mut record, code, &mut io)?;
        Ok(RunOutcome::Exited { code })
    }

    fn run_detached(&self, config: RunConfig) -> Result<RunOutcome, EngineError> {
        match monitor::detach()? {
            Side::Front(report) => {
                crash::point("run:front-forked");
                match monitor::read_report(report) {
                    Ok(id) => Ok(RunOutcome::Detached { id }),
                    Err(text) => Err(EngineError::Other(text)),
                }
            }
            Side::Monitor(reporter) => self.monitor(config, reporter),
        }
    }

    /// The monitor process: starts the container, reports, supervises, tears down; exits.
    fn monitor(&self, config: RunConfig, mut reporter: monitor::Reporter) -> ! {
        let mut record = match self.store.register(&config) {
            Ok(record) => record,
            Err(e) => {
                reporter.err(&e.to_string());
                std::process::exit(1)
            }
        };
        let mut made = Made::default();
        let started = self
            .detached_stdio(&mut record)
            .and_then(|(logger, pipes, stdio)| {
                self.start(&mut record, stdio, &mut made)?;
                Ok((logger, pipes))
            });
        let (mut logger, pipes) = match started {
            Ok(output) => output,
            Err(e) => {
                self.abort(&mut record, made.child);
                reporter.err(&e.to_string());
                std::process::exit(1)
            }
        };
        reporter.ok(&record.id);
        drop(reporter);
        crash::point("run:reported");
        let child = made.child.expect("a started container has an init");
        let mut io = monitor::Io::logged(&mut logger, &pipes);
        if let Some(master) = &made.master {
            io.routes.push(monitor::Route {
                from: master.as_fd(),
                to: monitor::Sink::Log(crate::logs::Stream::Stdout),
                output: true,
            });
        }
        // A failed wait leaves the init unreaped; its exit code is then unknown.
        let code = monitor::supervise(&child.pidfd, &mut io).unwrap_or(-1);
        let finished = self.finish(&mut record, code, &mut io);
        std::process::exit(i32::from(finished.is_err()))
    }

    /// The log file and the pipes a detached container writes to.
    fn detached_stdio(&self, record: &mut Record) -> Result<(Logger, Pipes, Stdio), EngineError> {
        let logger = Logger::open(&self.store.dir(&record.id), crate::logs::max_size())?;
        record.logged = true;
        let (pipes, stdout, stderr) = monitor::pipes()?;
        let stdin = dev_null()?;
        let stdio = Stdio {
            stdin,
            stdout,
            stderr,
        };
        Ok((logger, pipes, stdio))
    }

    /// Every step from the registered record to the started program (see engine.rs).
    fn start(&self, record: &mut Record, stdio: Stdio, made: &mut Made) -> Result<(), EngineError> {
        crash::point("run:registered");
        let dir = self.store.dir(&record.id);
        let config = record.config.clone();
        let root = crate::rootfs::prepare(&self.paths, &config.rootfs, config.read_only, &dir)?;
        crash::point("run:rootfs-prepared");
        let (netns, network) = self.plan_network(record)?;
        crash::point("run:network-planned");
        let publish = self.plan_publish(record, network.as_ref())?;
        crash::point("run:publish-planned");
        let ctx = self.context(record, root, netns)?;
        let spec = crate::spec::build(&config, &ctx)?;
        write_spec(&spec, &dir)?;
        record.runtime_id = Some(record.id.clone());
        self.store.save(record)?;
        crash::point("run:spec-written");
        let console = match config.tty {
            true => Some(Console::listen(&record.id[..12])?),
            false => None,
        };
        let opts = CreateOptions {
            bundle: dir.clone(),
            console_socket: console.as_ref().map(|c| c.path().to_owned()),
            ..CreateOptions::default()
        };
        single_threaded()?;
        let created = self.runtime.create_child(&record.id, &opts, Some(stdio));
        let child = made
            .child
            .insert(created.map_err(|source| EngineError::Runtime {
                step: "create the container",
                source,
            })?);
        record.init = Proc::of(child.pid);
        self.store.save(record)?;
        crash::point("run:created");
        made.master = console.as_ref().map(Console::master).transpose()?;
        self.attach(record, child.pid)?;
        self.register_client(record, network.as_ref(), child.pid)?;
        crash::point("run:network-attached");
        if let Some((publisher, target)) = publish {
            let applied = publisher.apply(&target, &record.publish_entries);
            applied.map_err(|source| EngineError::Publish {
                step: "publish ports",
                source,
            })?;
        }
        crash::point("run:publish-applied");
        let started = self.runtime.start(&record.id);
        started.map_err(|source| EngineError::Runtime {
            step: "start the container",
            source,
        })?;
        record.status = Status::Running;
        self.store.save(record)?;
        crash::point("run:started");
        Ok(())
    }

    /// Resolves `--network`; for a named network, plans (and records) the attachment.
    fn plan_network(&self, record: &mut Record) -> Result<(NetNs, Option<Network>), EngineError> {
        let config = &record.config;
        match &config.network {
            NetworkMode::None => Ok((NetNs::New, None)),
            NetworkMode::Host => Ok((NetNs::Host, None)),
            NetworkMode::Container(other) => {
                let peer = self.store.load(&self.store.resolve(other)?)?;
                let Some(init) = peer.init.filter(|_| peer.running()) else {
                    return Err(EngineError::NotRunning(other.clone()));
                };
                // This joiner leaving must not take the namespace's client entry (clients.rs).
                if peer.client_cookie.is_some() {
                    self.note_joiner()?;
                }
                record.client_cookie = peer.client_cookie;
                Ok((
                    NetNs::Join(format!("/proc/{}/ns/net", init.pid).into()),
                    None,
                ))
            }
            NetworkMode::Named(name) => {
                let net_err = |step| move |source| EngineError::Network { step, source };
                let network = self.networks.get(name).map_err(net_err("network"))?;
                let attachment = self
                    .networks
                    .plan(&network, &record.id, config.ip, config.ip6)
                    .map_err(net_err("plan the network attachment"))?;
                record.attachments.push(attachment);
                self.store.save(record)?;
                Ok((NetNs::New, Some(network)))
            }
        }
    }

    /// Plans (and records) the published ports; the engine and target to apply them with.
    fn plan_publish(
        &self,
        record: &mut Record,
        network: Option<&Network>,
    ) -> Result<Planned, EngineError> {
        if record.config.publish.is_empty() {
            return Ok(None);
        }
        let Some(network) = network else {
            if record.config.network == NetworkMode::Host {
                log::warn!("published ports are discarded when using host network mode");
                return Ok(None);
            }
            let text = "-p needs a network with addresses (not --network none or container:…)";
            return Err(EngineError::Usage(text.into()));
        };
        let target = Target {
            container_id: record.id.clone(),
            addresses: addresses(record),
            bridge: (network.driver == Driver::Bridge).then(|| network.interface.clone()),
        };
        let publish_err = |step| move |source| EngineError::Publish { step, source };
        let publisher = pier_publish::engine::select(record.config.publish_mode, &self.publish)
            .map_err(publish_err("select the publish engine"))?;
        self.register_recorded_clients();
        let (published, entries) = publisher
            .plan(&target, &record.config.publish)
            .map_err(publish_err("plan published ports"))?;
        record.published = published;
        record.publish_entries = entries;
        self.store.save(record)?;
        Ok(Some((publisher, target)))
    }

    /// The spec context; writes /etc/hostname, /etc/hosts and /etc/resolv.conf.
    fn context(
        &self,
        record: &Record,
        root: crate::rootfs::Prepared,
        netns: NetNs,
    ) -> Result<Context, EngineError> {
        let dir = self.store.dir(&record.id);
        let config = &record.config;
        let host = config.network == NetworkMode::Host;
        let hostname = match (&config.hostname, host) {
            (Some(name), _) => name.clone(),
            (None, true) => nix::unistd::gethostname()
                .map(|h| h.to_string_lossy().into_owned())
                .unwrap_or_else(|_| "localhost".into()),
            (None, false) => record.id[..12].to_owned(),
        };
        let hostname_file = write_etc(&dir, "hostname", &format!("{hostname}\n"))?;
        let (hosts, resolv_conf) = match host {
            true => (None, None),
            false => {
                let hosts = crate::dns::hosts(&hostname, Some(&record.name), &addresses(record));
                let host_resolv = fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
                let upstream = fs::read_to_string("/run/systemd/resolve/resolv.conf").ok();
                let resolv = crate::dns::resolv_conf(&host_resolv, upstream.as_deref());
                let hosts = write_etc(&dir, "hosts", &hosts)?;
                (Some(hosts), Some(write_etc(&dir, "resolv.conf", &resolv)?))
            }
        };
        let init_binary = match config.init {
            true => {
                Some(std::env::current_exe().map_err(|e| io_error("locate", "pier".as_ref(), e))?)
            }
            false => None,
        };
        Ok(Context {
            root,
            hostname,
            netns,
            hosts,
            hostname_file: Some(hostname_file),
            resolv_conf,
            // None given: the runtime's default, /pier/<id>, whose shared parent the runtime
            // removes with the last container under it (an explicit path would keep it).
            cgroups_path: String::new(),
            init_binary,
        })
    }

    /// Loopback up and the planned attachments, inside the init's new network namespace.
    fn attach(&self, record: &Record, pid: i32) -> Result<(), EngineError> {
        if !matches!(
            record.config.network,
            NetworkMode::None | NetworkMode::Named(_)
        ) {
            return Ok(());
        }
        let path = PathBuf::from(format!("/proc/{pid}/ns/net"));
        let netns = File::open(&path).map_err(|e| io_error("open", &path, e))?;
        let net_err = |step| move |source| EngineError::Network { step, source };
        network::loopback_up(netns.as_fd()).map_err(net_err("bring up loopback"))?;
        for attachment in &record.attachments {
            let attached = self.networks.attach(attachment, netns.as_fd());
            attached.map_err(net_err("attach to the network"))?;
        }
        Ok(())
    }

    /// After a failed start: removes everything (the record too), reaps the init.
    fn abort(&self, record: &mut Record, init: Option<Child>) {
        let errors = crate::gc::teardown(self, record);
        if let Some(child) = init {
            // `delete --force` killed it; it is our child, so reap it.
            let _ = monitor::reap(&child.pidfd);
        }
        match errors.is_empty() {
            true => {
                if let Err(e) = self.store.remove(&record.id, &record.name) {
                    log::warn!("remove container {}: {e}", record.id);
                }
            }
            false => log::warn!("cleanup of container {}: {}", record.id, errors.join("; ")),
        }
    }

    /// After the exit: records it, tears down, logs the rest, removes with `--rm`.
    fn finish(
        &self,
        record: &mut Record,
        code: i32,
        io: &mut monitor::Io,
    ) -> Result<(), EngineError> {
        record.status = Status::Exited;
        record.exit_code = Some(code);
        record.finished = Some(pier_runtime::state::rfc3339_now());
        self.store.save(record)?;
        crash::point("monitor:exited");
        let lock = self.store.lock_container(&record.id, true);
        let errors = crate::gc::teardown(self, record);
        monitor::drain(io)?;
        crash::point("monitor:torn-down");
        record.torn_down = errors.is_empty();
        let saved = match record.torn_down && record.config.rm {
            true => self.store.remove(&record.id, &record.name),
            false => self.store.save(record),
        };
        drop(lock);
        saved?;
        match errors.is_empty() {
            true => Ok(()),
            false => Err(EngineError::Teardown {
                id: record.id.clone(),
                errors: errors.join("; "),
            }),
        }
    }
}

/// Refuses to fork the init from a multi-threaded process: the child would inherit locks
/// (the allocator's) held by threads that do not exist in it. pier's own steps that use a
/// thread join it; a library caller with threads of its own must start containers elsewhere.
fn single_threaded() -> Result<(), EngineError> {
    let path = Path::new("/proc/self/status");
    let status = fs::read_to_string(path).map_err(|e| io_error("read", path, e))?;
    let threads = status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse::<u32>().ok());
    match threads {
        Some(1) | None => Ok(()),
        Some(n) => Err(EngineError::Usage(format!(
            "cannot create a container from a process with {n} threads (clone3 needs one)"
        ))),
    }
}

/// A foreground container's relays: with a terminal, its master to our stdout and, with `-i`,
/// our stdin (in raw mode, when a terminal) to the master, window size included.
fn foreground_io<'a>(
    master: Option<&'a OwnedFd>,
    interactive: bool,
    stdin: &'a std::io::Stdin,
    stdout: &'a std::io::Stdout,
) -> (monitor::Io<'a>, Option<crate::tty::RawMode>) {
    let mut io = monitor::Io::default();
    let Some(master) = master else {
        return (io, None);
    };
    io.routes.push(monitor::Route {
        from: master.as_fd(),
        to: monitor::Sink::Fd(stdout.as_fd()),
        output: true,
    });
    // Harmless when stdin is no terminal: the size query fails and nothing is copied.
    crate::tty::copy_size(stdin.as_fd(), master.as_fd());
    io.resize = Some((stdin.as_fd(), master.as_fd()));
    if !interactive {
        return (io, None);
    }
    let raw = crate::tty::RawMode::enter();
    io.routes.push(monitor::Route {
        from: stdin.as_fd(),
        to: monitor::Sink::Fd(master.as_fd()),
        output: false,
    });
    (io, raw)
}

/// Foreground stdio: the caller's stdout and stderr; stdin only with `-i`.
fn foreground_stdio(interactive: bool) -> Result<Stdio, EngineError> {
    let dup = |fd: std::os::fd::BorrowedFd<'_>| {
        fd.try_clone_to_owned()
            .map_err(|e| io_error("dup", "stdio".as_ref(), e))
    };
    let stdin = match interactive {
        true => dup(std::io::stdin().as_fd())?,
        false => dev_null()?,
    };
    Ok(Stdio {
        stdin,
        stdout: dup(std::io::stdout().as_fd())?,
        stderr: dup(std::io::stderr().as_fd())?,
    })
}

fn dev_null() -> Result<OwnedFd, EngineError> {
    let path = Path::new("/dev/null");
    File::open(path)
        .map(OwnedFd::from)
        .map_err(|e| io_error("open", path, e))
}

fn write_etc(dir: &Path, name: &str, text: &str) -> Result<PathBuf, EngineError> {
    let path = dir.join(name);
    fs::write(&path, text).map_err(|e| io_error("write", &path, e))?;
    Ok(path)
}

fn write_spec(spec: &Spec, dir: &Path) -> Result<(), EngineError> {
    let path = dir.join("config.json");
    let text = serde_json::to_vec(spec).map_err(|e| io_error("encode", &path, e.into()))?;
    fs::write(&path, text).map_err(|e| io_error("write", &path, e))
}

/// The container's addresses, IPv4 first (as the attachments list them).
fn addresses(record: &Record) -> Vec<IpAddr> {
    record
        .attachments
        .iter()
        .flat_map(|a| a.addresses.iter().map(|(ip, _)| *ip))
        .collect()
}

/// `ps`'s status column.
pub(crate) fn status_text(record: &Record) -> String {
    match record.status {
        Status::Creating => "created".into(),
        Status::Running if record.running() => "running".into(),
        Status::Running => "exited".into(),
        Status::Exited => match record.exit_code {
            Some(code) => format!("exited ({code})"),
            None => "exited".into(),
        },
    }
}

/// `0.0.0.0:8080->80/tcp, …`
pub(crate) fn ports_text(record: &Record) -> String {
    port_pairs(record)
        .map(|(container, proto, host_ip, host)| format!("{host_ip}:{host}->{container}/{proto}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `80/tcp -> 0.0.0.0:32768`
pub(crate) fn port_lines(record: &Record) -> Vec<String> {
    port_pairs(record)
        .map(|(container, proto, host_ip, host)| format!("{container}/{proto} -> {host_ip}:{host}"))
        .collect()
}

fn port_pairs(record: &Record) -> impl Iterator<Item = (u16, String, String, u16)> + '_ {
    record.published.iter().flat_map(|p| {
        let host_ip = match p.mapping.host_ip {
            Some(IpAddr::V6(ip)) => format!("[{ip}]"),
            Some(ip) => ip.to_string(),
            None => "0.0.0.0".into(),
        };
        let proto = p.mapping.protocol.to_string();
        p.mapping
            .container_ports
            .iter()
            .zip(p.host_ports.clone())
            .map(move |(c, h)| (c, proto.clone(), host_ip.clone(), h))
    })
}

/// `pier inspect`: the record with the live state, addresses and ports.
pub(crate) fn inspect(record: &Record, dir: &Path) -> serde_json::Value {
    serde_json::json!({
        "Id": record.id,
        "Name": record.name,
        "Created": record.created,
        "State": {
            "Status": status_text(record),
            "Running": record.running(),
            "Pid": record.init.filter(|_| record.running()).map_or(0, |p| p.pid),
            "ExitCode": record.exit_code,
            "FinishedAt": record.finished,
        },
        "Addresses": addresses(record),
        "Ports": port_lines(record),
        "LogPath": record.logged.then(|| dir.join(crate::logs::FILE)),
        "Record": record,
    })
}

/// `pier exec`: the container's process settings with the given command, env, user, workdir;
/// with `-t` a terminal relayed like `run`'s.
pub(crate) fn exec(engine: &Engine, record: &Record, args: &ExecArgs) -> Result<i32, EngineError> {
    if args.command.is_empty() {
        return Err(EngineError::Usage("exec needs a command".into()));
    }
    if args.tty && args.detach {
        return Err(EngineError::Usage(
            "exec -d -t: a detached exec has no terminal to relay".into(),
        ));
    }
    let dir = engine.store.dir(&record.id);
    let console = match args.tty {
        true => {
            let name = format!("{}-exec-{}", &record.id[..12], std::process::id());
            Some(Console::listen(&name)?)
        }
        false => None,
    };
    let opts = pier_runtime::ExecOptions {
        process: exec_process(record, &dir, args)?,
        detach: args.detach,
        pid_file: None,
        console_socket: console.as_ref().map(|c| c.path().to_owned()),
        preserve_fds: 0,
    };
    let runtime_id = record.runtime_id.as_deref().unwrap_or(&record.id);
    let runtime_err = |source| EngineError::Runtime {
        step: "exec",
        source,
    };
    let stdio = match args.detach {
        true => Stdio {
            stdin: dev_null()?,
            stdout: dev_null()?,
            stderr: dev_null()?,
        },
        false => foreground_stdio(args.interactive)?,
    };
    let child = engine
        .runtime
        .exec_child(runtime_id, &opts, Some(stdio))
        .map_err(runtime_err)?;
    if args.detach {
        return Ok(0);
    }
    let master = console.as_ref().map(Console::master).transpose()?;
    let (stdin, stdout) = (std::io::stdin(), std::io::stdout());
    let (mut io, raw_mode) = foreground_io(master.as_ref(), args.interactive, &stdin, &stdout);
    let code = monitor::supervise(&child.pidfd, &mut io)?;
    monitor::drain(&mut io)?;
    drop(raw_mode);
    Ok(code)
}

/// The process of an exec: the container's own, with the command and flags applied.
fn exec_process(record: &Record, dir: &Path, args: &ExecArgs) -> Result<Process, EngineError> {
    let path = dir.join("config.json");
    let spec =
        Spec::load(&path).map_err(|e| EngineError::Other(format!("{}: {e}", path.display())))?;
    let mut process = spec.process().clone().unwrap_or_default();
    process.set_args(Some(args.command.clone()));
    process.set_terminal(Some(args.tty));
    let env = process.env().clone().unwrap_or_default();
    process.set_env(Some(merge_env(env, &args.env)));
    if let Some(dir) = &args.workdir {
        process.set_cwd(dir.into());
    }
    if let Some(user) = &args.user {
        set_user(&mut process, user, &record.config.rootfs)?;
    }
    Ok(process)
}

/// `KEY=VALUE` entries of `extra` replace those of `base` with the same key.
fn merge_env(mut base: Vec<String>, extra: &[String]) -> Vec<String> {
    for entry in extra {
        let key = entry.split('=').next().unwrap_or(entry);
        base.retain(|e| e.split('=').next() != Some(key));
        base.push(entry.clone());
    }
    base
}

/// `-u uid[:gid]` or `-u name[:group]`, names looked up in the root's /etc/passwd and group.
fn set_user(process: &mut Process, user: &str, rootfs: &Rootfs) -> Result<(), EngineError> {
    let etc = match rootfs {
        Rootfs::Host => PathBuf::from("/etc"),
        Rootfs::Dir(dir) => dir.join("etc"),
    };
    let (name, group) = user
        .split_once(':')
        .map_or((user, None), |(u, g)| (u, Some(g)));
    let unknown = || EngineError::Usage(format!("-u {user:?}: no such user or group"));
    let (uid, primary) = lookup(&etc.join("passwd"), name, 3).ok_or_else(unknown)?;
    let gid = match group {
        Some(g) => lookup(&etc.join("group"), g, 2).ok_or_else(unknown)?.0,
        None => primary,
    };
    let built = UserBuilder::default().uid(uid).gid(gid).build();
    process.set_user(built.map_err(|e| EngineError::Usage(e.to_string()))?);
    Ok(())
}

/// A numeric id as is (gid 0 when no entry names it), or the entry of `name` in `file`:
/// (its id, the field `extra` — the primary gid for passwd).
fn lookup(file: &Path, name: &str, extra: usize) -> Option<(u32, u32)> {
    let text = fs::read_to_string(file).unwrap_or_default();
    let entries = text.lines().map(|l| l.split(':').collect::<Vec<_>>());
    let by_id = |f: &Vec<&str>| f.get(2).is_some_and(|id| *id == name);
    if let Ok(id) = name.parse::<u32>() {
        let primary = entries.clone().find(by_id);
        let gid = primary
            .and_then(|f| f.get(extra)?.parse().ok())
            .unwrap_or(0);
        return Some((id, gid));
    }
    let fields = entries.clone().find(|f| f.first() == Some(&name))?;
    Some((
        fields.get(2)?.parse().ok()?,
        fields.get(extra)?.parse().unwrap_or(0),
    ))
}
