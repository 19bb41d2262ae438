//! The state directory of one container: `<root>/<id>/{state.json,exec.fifo}`.
//!
//! Theory of operation: `state.json` is the only record of what pier created for a container
//! (init pid and its start time, the cgroup, the poststart and poststop hooks); it is written
//! atomically
//! (write a temporary file, rename over) before or as each object is created, so `delete` and
//! crash recovery always find everything. Mutating verbs hold an exclusive `flock` on the
//! container's directory. The stored status is a hint: the live status is derived from the init
//! process (`/proc/<pid>/stat`: gone, zombie or a different start time means stopped), from
//! `exec.fifo` (present until `start`: created) and from the freezer (paused).
//!
//! Privileges: write access to the root directory. Tests: unit tests below, lifecycle in
//! crates/runtime/tests/priv_lifecycle.rs.
use crate::container::{Error, State};
use oci_spec::runtime::Hook;
use serde::{Deserialize, Serialize};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// Name of the fifo the held init waits on until `start`.
pub const FIFO: &str = "exec.fifo";
const STATE: &str = "state.json";

/// Lifecycle status of a container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Being created (the init exists but has not reported ready).
    Creating,
    /// Init held before the user program.
    Created,
    /// User program started.
    Running,
    /// Frozen.
    Paused,
    /// No process left.
    Stopped,
}

impl Status {
    /// The OCI spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Creating => "creating",
            Status::Created => "created",
            Status::Running => "running",
            Status::Paused => "paused",
            Status::Stopped => "stopped",
        }
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What `state.json` holds: the OCI state plus what teardown needs.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The OCI state as last written.
    #[serde(flatten)]
    pub state: State,
    /// Start time of the init (`/proc/<pid>/stat` field 22), to detect pid reuse.
    #[serde(default)]
    pub init_start_time: u64,
    /// The container's cgroup, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<pier_cgroups::Cgroup>,
    /// `hooks.poststart`, run by `start` (kept here so `start` does not re-read config.json).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststart: Vec<Hook>,
    /// `hooks.poststop`, run by `delete`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub poststop: Vec<Hook>,
}

impl Record {
    /// The OCI state JSON with `status`, as hooks receive it on stdin.
    pub fn state_json(&self, status: Status) -> Vec<u8> {
        let mut state = self.state.clone();
        state.status = status.as_str().to_owned();
        serde_json::to_vec(&state).unwrap_or_default()
    }
}

/// Checks an id like runc: `^[\w+\-\.]+$`, not `.` or `..`.
pub fn validate_id(id: &str) -> Result<(), Error> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '+' | '-' | '.');
    if id.is_empty()
        || id == "."
        || id == ".."
        || !id.chars().all(ok_char)
        || id == crate::spec::SECCOMP_CACHE
    {
        return Err(Error::InvalidId(id.to_owned()));
    }
    Ok(())
}

/// The directory of one container, locked for the lifetime of this value.
#[derive(Debug)]
pub struct Dir {
    /// `<root>/<id>`.
    pub path: PathBuf,
    /// The locked directory fd. Closing it (not an explicit unlock) releases the lock, so a
    /// forked child drops its copy without touching the parent's lock.
    lock: File,
}

impl Dir {
    /// Creates `<root>/<id>` (and the root) and locks it; "container with id exists" if present.
    pub fn create(root: &Path, id: &str) -> Result<Dir, Error> {
        let path = root.join(id);
        match fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(root)
                    .map_err(|e| Error::io("create root directory", root, e))?;
                fs::create_dir(&path).map_err(|e| Error::io("create state directory", &path, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                return Err(Error::Exists(id.to_owned()))
            }
            Err(e) => return Err(Error::io("create state directory", &path, e)),
        }
        Self::lock(path, id)
    }

    /// Opens and locks the directory of an existing container.
    pub fn open(root: &Path, id: &str) -> Result<Dir, Error> {
        validate_id(id)?;
        Self::lock(root.join(id), id)
    }

    fn lock(path: PathBuf, id: &str) -> Result<Dir, Error> {
        let file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotExist(id.to_owned()))
            }
            Err(e) => return Err(Error::io("open state directory", &path, e)),
        };
        file.lock()
            .map_err(|e| Error::io("lock state directory", &path, e))?;
        Ok(Dir { path, lock: file })
    }

    /// In a forked child: closes the child's copy of the lock fd (the parent keeps the lock).
    pub fn close_in_child(self) {
        drop(self.lock);
    }

    /// Path of the exec fifo.
    pub fn fifo(&self) -> PathBuf {
        self.path.join(FIFO)
    }

    /// Reads `state.json`.
    pub fn load(&self, id: &str) -> Result<Record, Error> {
        load(&self.path, id)
    }

    /// Writes `state.json` atomically.
    pub fn save(&self, record: &Record) -> Result<(), Error> {
        let json = serde_json::to_vec(record)
            .map_err(|e| Error::io("encode state", &self.path, e.into()))?;
        write_atomic(&self.path.join(STATE), &json)
            .map_err(|e| Error::io("write state", &self.path, e))
    }
}

/// Reads `<dir>/state.json` without locking (for `state`, `list`, `ps`, `kill`).
pub fn load(dir: &Path, id: &str) -> Result<Record, Error> {
    let path = dir.join(STATE);
    let bytes = match fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(Error::NotExist(id.to_owned()))
        }
        Err(e) => return Err(Error::io("read state", &path, e)),
    };
    serde_json::from_slice(&bytes).map_err(|e| Error::io("decode state", &path, e.into()))
}

/// Writes `data` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp)?;
    file.write_all(data)?;
    drop(file);
    fs::rename(&tmp, path)
}

/// Status of a process as `/proc/<pid>/stat` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// State letter (R, S, D, Z, T, ...).
    pub state: u8,
    /// Start time in clock ticks after boot.
    pub start_time: u64,
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

fn parse_stat(text: &str) -> Option<ProcStat> {
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let mut fields = rest.split(' ');
    let state = *fields.next()?.as_bytes().first()?;
    // After the state (field 3), field 22 is the 19th.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

/// True when the init recorded in `record` is still that process and has not exited.
pub fn init_alive(record: &Record) -> bool {
    let alive =
        |s: ProcStat| s.start_time == record.init_start_time && s.state != b'Z' && s.state != b'X';
    record.state.pid > 0 && proc_stat(record.state.pid).is_some_and(alive)
}

/// The live status of a container from its record and its directory.
pub fn live_status(dir: &Path, record: &Record) -> Status {
    if !init_alive(record) {
        return Status::Stopped;
    }
    if dir.join(FIFO).exists() {
        return Status::Created;
    }
    let frozen = record
        .cgroup
        .as_ref()
        .and_then(|cg| cg.is_frozen().ok())
        .unwrap_or(false);
    if frozen {
        Status::Paused
    } else {
        Status::Running
    }
}

/// RFC 3339 UTC timestamp with nanoseconds, as runc writes `created`.
pub fn rfc3339_now() -> String {
    rfc3339(std::time::SystemTime::now())
}

/// `time` as RFC 3339 in UTC with nanoseconds, e.g. `2026-11-21T05:33:45.123456789Z` (the form
/// of runc's `created` and of its log lines; pier's logger uses it too).
pub fn rfc3339(time: std::time::SystemTime) -> String {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = since.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:09}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        since.subsec_nanos()
    )
}

/// Days since 1970-01-01 to (year, month, day) in the proleptic Gregorian calendar (H. Hinnant).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_runc() {
        for ok in ["a", "abc-1.2_3+x", "..a"] {
            assert!(validate_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "a b", "ü"] {
            assert!(
                matches!(validate_id(bad), Err(Error::InvalidId(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn stat_with_odd_command_name() {
        let line = "42 (a) b) S 1 42 42 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 12345 1000 10";
        assert_eq!(
            parse_stat(line),
            Some(ProcStat {
                state: b'S',
                start_time: 12345
            })
        );
    }

    #[test]
    fn own_stat_is_readable() {
        let s = proc_stat(std::process::id() as i32).expect("own stat");
        assert!(s.start_time > 0);
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        use std::time::{Duration, UNIX_EPOCH};
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00.000000000Z");
        let leap_day = UNIX_EPOCH + Duration::new(951_827_696, 5);
        assert_eq!(rfc3339(leap_day), "2000-02-29T12:34:56.000000005Z");
        let end_of_year = UNIX_EPOCH + Duration::from_secs(1_798_761_599);
        assert_eq!(rfc3339(end_of_year), "2026-12-31T23:59:59.000000000Z");
    }

    #[test]
    fn calendar() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(19_723), (2024, 1, 1));
        assert_eq!(civil_from_days(20_513), (2026, 3, 1));
    }
}
