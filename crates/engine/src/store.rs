//! The container store: one record per container, names, ids and their resolution.
//!
//! Theory of operation: a container is the directory `<state>/containers/<id>` (64 random hex
//! digits) holding `record.json`, written atomically (temporary file + rename) before each
//! object the engine creates, so whoever tears down (the monitor, `stop`, `rm`, `gc`) reads in
//! it everything that may exist. A name is the file `<state>/names/<name>` holding the id; the
//! global `flock` on `<state>/lock` is held only while a name is registered (together with the
//! container's directory and first record) or removed, so two `pier run --name x` cannot both
//! win, and a name whose container is gone (a crash between the two steps) is taken over.
//! Teardown of one container is serialised by an `flock` on its directory. Resolution follows
//! Docker: full id, then name, then a unique id prefix (an ambiguous one names the candidates).
//! Liveness of the processes named in a record (the init, the responsible front or monitor) is
//! pid + start time from `/proc`, so a recycled pid never counts as alive.
//! A removed container that had exited leaves its exit code in `<state>/exits/<minute>/<id>`
//! for about [`EXIT_KEPT`] (as Podman keeps exit codes), so a `pier wait` that began before a
//! `--rm` removal still reports the code. Codes are grouped by the minute of removal so that
//! the sweep at every command drops whole old minutes without looking at each file (a busy
//! host removes hundreds of containers in five minutes).
//! Privileges: write access to the state directory. Tests: unit tests below.
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use crate::config::RunConfig;
use crate::network::Attachment;
use crate::Paths;
use pier_publish::engine::{Entry, Published};

const RECORD: &str = "record.json";
/// How long the exit code of a removed container stays readable.
pub const EXIT_KEPT: std::time::Duration = std::time::Duration::from_secs(300);
const MINUTE: u64 = 60;

/// Where a container is in its life (the live state of its processes is checked apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Registered; objects are being made; the init may exist but the program has not started.
    Creating,
    /// The program was started.
    Running,
    /// The init exited (or was found dead) and the container was torn down.
    Exited,
}

/// A process named by pid and start time (`/proc/<pid>/stat` field 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proc {
    pub pid: i32,
    pub start_time: u64,
}

impl Proc {
    /// The calling process.
    pub fn current() -> Proc {
        let pid = std::process::id() as i32;
        Proc::of(pid).unwrap_or(Proc { pid, start_time: 0 })
    }

    /// The running process `pid`, if any.
    pub fn of(pid: i32) -> Option<Proc> {
        let stat = pier_runtime::state::proc_stat(pid)?;
        Some(Proc {
            pid,
            start_time: stat.start_time,
        })
    }

    /// True while this very process exists and has not exited (a zombie counts as exited).
    pub fn alive(&self) -> bool {
        pier_runtime::state::proc_stat(self.pid)
            .is_some_and(|s| s.start_time == self.start_time && s.state != b'Z' && s.state != b'X')
    }

    /// A pidfd of this process, checked after opening to be it (not a recycled pid).
    pub fn pidfd(&self) -> Option<OwnedFd> {
        let fd = pier_sys::pidfd::open(self.pid).ok()?;
        self.alive().then_some(fd)
    }
}

/// Everything known about one container (`record.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub id: String,
    pub name: String,
    /// RFC 3339.
    pub created: String,
    pub config: RunConfig,
    pub status: Status,
    /// The container's init once created.
    pub init: Option<Proc>,
    /// The process running the lifecycle: the foreground `pier run`, or the monitor.
    pub responsible: Option<Proc>,
    pub exit_code: Option<i32>,
    /// RFC 3339 time of the exit.
    pub finished: Option<String>,
    /// Network attachments (planned: links and leases may exist).
    pub attachments: Vec<Attachment>,
    /// Publish entries (planned: they may exist).
    pub publish_entries: Vec<Entry>,
    pub published: Vec<Published>,
    /// The pier-runtime container (may exist once set).
    pub runtime_id: Option<String>,
    /// The log file is written (detached containers).
    pub logged: bool,
    /// Every object was removed after the exit (else `gc` retries).
    pub torn_down: bool,
    /// The netns cookie of a bridged container (recorded at start, registered with the ebpf
    /// programs as a client when they serve this namespace), or of the namespace a
    /// `container:` joiner joined (clients.rs); absent from records of older piers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_cookie: Option<u64>,
}

impl Record {
    /// True when the container's program runs (its init is alive and it was started).
    pub fn running(&self) -> bool {
        self.status == Status::Running && self.init.is_some_and(|p| p.alive())
    }

    /// True while the process running the lifecycle lives.
    pub fn responsible_alive(&self) -> bool {
        self.responsible.is_some_and(|p| p.alive())
    }
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{step} {path}: {source}")]
    Io {
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("decode {path}: {source}")]
    Decode {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("the container name {name:?} is already in use by container {id}: remove it or choose another name")]
    NameInUse { name: String, id: String },
    #[error("invalid container name {0:?}: only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed")]
    InvalidName(String),
    #[error("no such container: {0}")]
    NoSuchContainer(String),
    #[error("multiple containers match {prefix:?}: {candidates}")]
    Ambiguous { prefix: String, candidates: String },
}

fn io_err<'a>(step: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> StoreError + 'a {
    move |source| StoreError::Io {
        step,
        path: path.to_owned(),
        source,
    }
}

/// The store over a state directory.
#[derive(Debug, Clone)]
pub struct Store {
    paths: Paths,
}

impl Store {
    /// The store; creates its directories.
    pub fn open(paths: &Paths) -> Result<Store, StoreError> {
        let store = Store {
            paths: paths.clone(),
        };
        for dir in [paths.containers(), store.names()] {
            fs::create_dir_all(&dir).map_err(io_err("create directory", &dir))?;
        }
        Ok(store)
    }

    fn names(&self) -> PathBuf {
        self.paths.state_dir.join("names")
    }

    fn exits(&self) -> PathBuf {
        self.paths.state_dir.join("exits")
    }

    /// The exit code container `id` left when it was removed (within [`EXIT_KEPT`]).
    pub fn exit_code(&self, id: &str) -> Option<i32> {
        let minutes = fs::read_dir(self.exits()).ok()?.flatten();
        let mut found = minutes.filter_map(|m| fs::read_to_string(m.path().join(id)).ok());
        found.next()?.trim().parse().ok()
    }

    /// Removes the minutes of exit codes older than [`EXIT_KEPT`].
    fn sweep_exits(&self) {
        let oldest = minute_now().saturating_sub(EXIT_KEPT.as_secs() / MINUTE);
        for entry in fs::read_dir(self.exits()).into_iter().flatten().flatten() {
            let minute = entry.file_name().to_string_lossy().parse::<u64>();
            if minute.map_or(true, |m| m < oldest) {
                let _ = fs::remove_dir_all(entry.path());
            }
        }
    }

    /// The directory of container `id`.
    pub fn dir(&self, id: &str) -> PathBuf {
        self.paths.containers().join(id)
    }

    /// Holds the global lock (names) until dropped.
    pub fn lock(&self) -> Result<Flock<File>, StoreError> {
        let path = self.paths.state_dir.join("lock");
        let file = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(io_err("open lock", &path))?;
        Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| io_err("lock", &path)(e.into()))
    }

    /// Locks the container's directory for a teardown; `None` when `wait` is false and another
    /// process holds it, or when the directory is gone.
    pub fn lock_container(&self, id: &str, wait: bool) -> Option<Flock<File>> {
        let file = File::open(self.dir(id)).ok()?;
        let arg = match wait {
            true => FlockArg::LockExclusive,
            false => FlockArg::LockExclusiveNonblock,
        };
        Flock::lock(file, arg).ok()
    }

    /// Registers a new container: a fresh id, its name (generated when `None`), its directory
    /// and first record (status creating, the caller responsible).
    pub fn register(&self, config: &RunConfig) -> Result<Record, StoreError> {
        let _lock = self.lock()?;
        let id = random_id()?;
        let name = match &config.name {
            Some(name) => {
                check_name(name)?;
                if let Some(other) = self.name_owner(name) {
                    return Err(StoreError::NameInUse {
                        name: name.clone(),
                        id: other,
                    });
                }
                name.clone()
            }
            None => self.generate_name()?,
        };
        let dir = self.dir(&id);
        fs::create_dir(&dir).map_err(io_err("create container directory", &dir))?;
        let record = Record {
            id: id.clone(),
            name: name.clone(),
            created: pier_runtime::state::rfc3339_now(),
            config: config.clone(),
            status: Status::Creating,
            init: None,
            responsible: Some(Proc::current()),
            exit_code: None,
            finished: None,
            attachments: Vec::new(),
            publish_entries: Vec::new(),
            published: Vec::new(),
            runtime_id: None,
            logged: false,
            torn_down: false,
            client_cookie: None,
        };
        self.save(&record)?;
        let path = self.names().join(&name);
        pier_runtime::state::write_atomic(&path, id.as_bytes())
            .map_err(io_err("write name", &path))?;
        Ok(record)
    }

    /// The id of the live container holding `name`, if any (a stale name file is ignored).
    fn name_owner(&self, name: &str) -> Option<String> {
        let id = fs::read_to_string(self.names().join(name)).ok()?;
        self.dir(&id).join(RECORD).exists().then_some(id)
    }

    fn generate_name(&self) -> Result<String, StoreError> {
        let mut bytes = [0u8; 4];
        for attempt in 0u32.. {
            read_random(&mut bytes)?;
            let adjective = ADJECTIVES[bytes[0] as usize % ADJECTIVES.len()];
            let surname = SURNAMES[bytes[1] as usize % SURNAMES.len()];
            let name = match attempt {
                0..=3 => format!("{adjective}_{surname}"),
                _ => format!("{adjective}_{surname}{}", bytes[2] % 100),
            };
            if self.name_owner(&name).is_none() {
                return Ok(name);
            }
        }
        unreachable!("the name loop only ends by returning")
    }

    /// Writes the record atomically.
    pub fn save(&self, record: &Record) -> Result<(), StoreError> {
        let path = self.dir(&record.id).join(RECORD);
        let data = serde_json::to_vec_pretty(record).map_err(|source| StoreError::Decode {
            path: path.clone(),
            source,
        })?;
        pier_runtime::state::write_atomic(&path, &data).map_err(io_err("write record", &path))
    }

    /// The record of container `id`.
    pub fn load(&self, id: &str) -> Result<Record, StoreError> {
        let path = self.dir(id).join(RECORD);
        let data = match fs::read(&path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(StoreError::NoSuchContainer(id.to_owned()))
            }
            other => other.map_err(io_err("read record", &path))?,
        };
        serde_json::from_slice(&data).map_err(|source| StoreError::Decode { path, source })
    }

    /// The ids of every container directory (with or without a record).
    pub fn ids(&self) -> Result<Vec<String>, StoreError> {
        let dir = self.paths.containers();
        let entries = fs::read_dir(&dir).map_err(io_err("read directory", &dir))?;
        let mut ids: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        ids.sort();
        Ok(ids)
    }

    /// Every readable record, oldest first.
    pub fn list(&self) -> Result<Vec<Record>, StoreError> {
        let mut records: Vec<Record> = self
            .ids()?
            .iter()
            .filter_map(|id| self.load(id).ok())
            .collect();
        records.sort_by(|a, b| a.created.cmp(&b.created));
        Ok(records)
    }

    /// Full id, then name, then unique id prefix.
    pub fn resolve(&self, query: &str) -> Result<String, StoreError> {
        let valid = !query.is_empty() && !query.contains('/') && !query.starts_with('.');
        if !valid {
            return Err(StoreError::NoSuchContainer(query.to_owned()));
        }
        if query.len() == 64 && self.dir(query).join(RECORD).exists() {
            return Ok(query.to_owned());
        }
        if let Some(id) = self.name_owner(query) {
            return Ok(id);
        }
        let matches: Vec<String> = self
            .ids()?
            .into_iter()
            .filter(|id| id.starts_with(query) && self.dir(id).join(RECORD).exists())
            .collect();
        match matches.len() {
            0 => Err(StoreError::NoSuchContainer(query.to_owned())),
            1 => Ok(matches.into_iter().next().expect("one match")),
            _ => Err(StoreError::Ambiguous {
                prefix: query.to_owned(),
                candidates: matches.join(", "),
            }),
        }
    }

    /// Removes the container entirely: its name (if still its own) and its directory.
    pub fn remove(&self, id: &str, name: &str) -> Result<(), StoreError> {
        let _lock = self.lock()?;
        let name_path = self.names().join(name);
        if fs::read_to_string(&name_path).is_ok_and(|owner| owner == id) {
            fs::remove_file(&name_path).map_err(io_err("remove name", &name_path))?;
        }
        if let Ok(Record {
            exit_code: Some(code),
            ..
        }) = self.load(id)
        {
            let minute = self.exits().join(minute_now().to_string());
            fs::create_dir_all(&minute).map_err(io_err("create directory", &minute))?;
            let path = minute.join(id);
            pier_runtime::state::write_atomic(&path, code.to_string().as_bytes())
                .map_err(io_err("write exit code", &path))?;
        }
        let dir = self.dir(id);
        match fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                Err(io_err("remove container directory", &dir)(e))
            }
            _ => Ok(()),
        }
    }

    /// Removes directories without a record and names without a container (left by a crash
    /// inside `register` or `remove`); returns what was removed.
    pub fn sweep(&self) -> Result<Vec<String>, StoreError> {
        let _lock = self.lock()?;
        let mut removed = Vec::new();
        for id in self.ids()? {
            let dir = self.dir(&id);
            if !dir.join(RECORD).exists() && fs::remove_dir_all(&dir).is_ok() {
                removed.push(format!("container directory {id} without a record"));
            }
        }
        let names = self.names();
        for entry in fs::read_dir(&names).map_err(io_err("read directory", &names))? {
            let Ok(entry) = entry else { continue };
            let name = entry.file_name().to_string_lossy().into_owned();
            if self.name_owner(&name).is_none() && fs::remove_file(entry.path()).is_ok() {
                removed.push(format!("name {name} without a container"));
            }
        }
        self.sweep_exits();
        Ok(removed)
    }
}

/// Minutes since the epoch (the name of a directory of exit codes).
fn minute_now() -> u64 {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(0, |d| d.as_secs() / MINUTE)
}

fn check_name(name: &str) -> Result<(), StoreError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    match first_ok && rest_ok && name.len() <= 128 {
        true => Ok(()),
        false => Err(StoreError::InvalidName(name.to_owned())),
    }
}

fn read_random(buf: &mut [u8]) -> Result<(), StoreError> {
    let path = Path::new("/dev/urandom");
    File::open(path)
        .and_then(|mut f| f.read_exact(buf))
        .map_err(io_err("read", path))
}

/// 64 random hex digits.
fn random_id() -> Result<String, StoreError> {
    let mut bytes = [0u8; 32];
    read_random(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

const ADJECTIVES: &[&str] = &[
    "admiring",
    "brave",
    "clever",
    "dazzling",
    "eager",
    "focused",
    "gallant",
    "happy",
    "inspiring",
    "jolly",
    "keen",
    "lucid",
    "modest",
    "nifty",
    "optimistic",
    "pedantic",
    "quirky",
    "relaxed",
    "serene",
    "tender",
    "upbeat",
    "vibrant",
    "wizardly",
    "zealous",
];

const SURNAMES: &[&str] = &[
    "babbage",
    "curie",
    "darwin",
    "euler",
    "feynman",
    "galois",
    "hopper",
    "hypatia",
    "johnson",
    "kepler",
    "lovelace",
    "meitner",
    "noether",
    "pasteur",
    "ramanujan",
    "shannon",
    "tesla",
    "turing",
    "volta",
    "wozniak",
    "yalow",
    "zuse",
    "bohr",
    "dijkstra",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: Option<&str>) -> RunConfig {
        let json = serde_json::json!({
            "detach": true, "rm": false, "name": name, "publish": [], "publish_mode": "auto",
            "network": "None", "ip": null, "ip6": null, "hostname": null, "env": [],
            "workdir": null, "user": null, "entrypoint": null, "volumes": [], "tmpfs": [],
            "read_only": false, "cpus_milli": null, "memory_bytes": null, "pids_limit": null,
            "cap_add": [], "cap_drop": [], "seccomp": "Default", "no_new_privileges": false,
            "ulimits": [], "init": false, "tty": false, "interactive": false,
            "rootfs": "Host", "args": ["true"]
        });
        serde_json::from_value(json).expect("config")
    }

    fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = Paths {
            state_dir: dir.path().to_owned(),
        };
        let store = Store::open(&paths).expect("open");
        (dir, store)
    }

    #[test]
    fn duplicate_name_is_refused_naming_the_owner() {
        let (_dir, store) = store();
        let first = store.register(&config(Some("web"))).expect("first");
        assert_eq!(first.id.len(), 64);
        match store.register(&config(Some("web"))) {
            Err(StoreError::NameInUse { id, .. }) => assert_eq!(id, first.id),
            other => panic!("expected NameInUse, got {other:?}"),
        }
        store.remove(&first.id, "web").expect("remove");
        store
            .register(&config(Some("web")))
            .expect("name free again");
    }

    #[test]
    fn client_cookie_round_trips_and_older_records_have_none() {
        let (_dir, store) = store();
        let mut record = store.register(&config(Some("c"))).expect("register");
        let path = store.dir(&record.id).join(RECORD);
        let text = fs::read_to_string(&path).expect("record");
        assert!(
            !text.contains("client_cookie"),
            "an older pier's record: {text}"
        );
        assert_eq!(store.load(&record.id).expect("load").client_cookie, None);
        record.client_cookie = Some(4097);
        store.save(&record).expect("save");
        assert_eq!(
            store.load(&record.id).expect("load").client_cookie,
            Some(4097)
        );
    }

    #[test]
    fn a_removed_containers_exit_code_is_kept_and_old_minutes_are_swept() {
        let (_dir, store) = store();
        let mut record = store.register(&config(Some("gone"))).expect("register");
        record.exit_code = Some(3);
        store.save(&record).expect("save");
        store.remove(&record.id, "gone").expect("remove");
        assert_eq!(store.exit_code(&record.id), Some(3));
        let never = store.register(&config(None)).expect("register");
        store.remove(&never.id, "").expect("remove");
        assert_eq!(store.exit_code(&never.id), None, "no exit, no code");
        let old = store.exits().join((minute_now() - 6).to_string());
        fs::create_dir_all(&old).expect("old minute");
        fs::write(old.join("x"), "1").expect("old code");
        store.sweep().expect("sweep");
        assert!(!old.exists(), "an old minute is swept");
        assert_eq!(store.exit_code(&record.id), Some(3), "a recent one stays");
    }

    #[test]
    fn resolves_by_id_name_and_prefix() {
        let (_dir, store) = store();
        let a = store.register(&config(Some("a"))).expect("a");
        let b = store.register(&config(None)).expect("b");
        assert!(b.name.contains('_'));
        assert_eq!(store.resolve(&a.id).expect("id"), a.id);
        assert_eq!(store.resolve("a").expect("name"), a.id);
        assert_eq!(store.resolve(&b.id[..12]).expect("prefix"), b.id);
        assert!(matches!(
            store.resolve("zz-nothing"),
            Err(StoreError::NoSuchContainer(_))
        ));
        assert!(matches!(
            store.resolve("../x"),
            Err(StoreError::NoSuchContainer(_))
        ));
    }

    #[test]
    fn ambiguous_prefix_names_the_candidates() {
        let (_dir, store) = store();
        let mut seen: Vec<Record> = Vec::new();
        // 17 ids: two share a first hex digit (pigeonhole).
        for _ in 0..17 {
            seen.push(store.register(&config(None)).expect("register"));
        }
        let (a, b) = seen
            .iter()
            .flat_map(|a| seen.iter().map(move |b| (a, b)))
            .find(|(a, b)| a.id != b.id && a.id[..1] == b.id[..1])
            .expect("shared first digit");
        match store.resolve(&a.id[..1]) {
            Err(StoreError::Ambiguous { candidates, .. }) => {
                assert!(candidates.contains(&a.id) && candidates.contains(&b.id))
            }
            other => panic!("expected Ambiguous, got {other:?}"),
        }
    }

    #[test]
    fn bad_names_are_refused() {
        for bad in ["-x", "a/b", "", "a b", ".x"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        check_name("web-1.a_b").expect("good name");
    }

    #[test]
    fn sweep_removes_stale_names_and_empty_dirs() {
        let (_dir, store) = store();
        let rec = store.register(&config(Some("gone"))).expect("register");
        fs::remove_file(store.dir(&rec.id).join(RECORD)).expect("drop record");
        let removed = store.sweep().expect("sweep");
        assert_eq!(removed.len(), 2, "{removed:?}");
        assert!(!store.dir(&rec.id).exists());
        assert!(store.name_owner("gone").is_none());
    }

    #[test]
    fn own_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = Proc::current();
        assert!(me.alive());
        assert!(me.pidfd().is_some());
        let other = Proc {
            pid: me.pid,
            start_time: me.start_time + 1,
        };
        assert!(!other.alive());
    }
}
