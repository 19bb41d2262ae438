//! The on-disk cache of compiled filters.
//!
//! Theory of operation:
//! - Key: SHA-256 over a canonical binary encoding of everything that can change the program
//!   or its use: every field of the profile (per-rule `errnoRet`, the listener fields, arg
//!   `valueTwo` included; options and lists tagged so no two profiles encode alike), the
//!   compiler version, the host arch and the kernel's seccomp actions (`actions_avail`).
//!   Encoding the parsed struct directly costs a few µs; no JSON is re-serialized.
//! - Entry `<dir>/<hex key>.bpf`: magic, key, flags, notify, instruction count, instructions,
//!   then SHA-256 of all that. A read checks length, key and checksum; anything else (torn
//!   write, corruption, other version) is a miss, recompiled and rewritten, never loaded.
//! - Writes go to a unique temporary file in the same directory, are fsynced, then renamed
//!   over the entry, so concurrent starts of one profile each see a whole entry or none.
//! - LRU: a hit refreshes the entry's mtime (at most once a minute); after a write, entries
//!   beyond the size bound are removed oldest mtime first, with stale temporary files.
//!
//! A cache that cannot be written only costs the compile: errors are logged, not returned.
//! Privileges: write access to the directory. Tests: unit tests below.
use crate::bpf::Insn;
use crate::{compile, Error, Program};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction, LinuxSeccompFilterFlag, LinuxSyscall};
use sha2::{Digest, Sha256};
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

/// Version of the compiler's output; part of every cache key.
pub const COMPILER_VERSION: &str = concat!("pier-seccomp ", env!("CARGO_PKG_VERSION"), " bpf-1");
/// Default bound on the cache's size.
pub const DEFAULT_MAX_BYTES: u64 = 16 << 20;

const MAGIC: &[u8; 8] = b"PIERBPF1";
const HEADER: usize = 8 + 32 + 4 + 4 + 4;
const TOUCH_AFTER: Duration = Duration::from_secs(60);

/// The on-disk cache of compiled filters under the runtime root.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
    max_bytes: u64,
}

impl Cache {
    /// A cache stored in `dir` (created on first write), bounded to [`DEFAULT_MAX_BYTES`].
    pub fn new(dir: PathBuf) -> Self {
        Self::with_limit(dir, DEFAULT_MAX_BYTES)
    }

    /// A cache stored in `dir` holding at most about `max_bytes`.
    pub fn with_limit(dir: PathBuf, max_bytes: u64) -> Self {
        Self { dir, max_bytes }
    }

    /// Returns the cached program for `profile` or compiles and stores it.
    pub fn get_or_compile(&self, profile: &LinuxSeccomp) -> Result<Program, Error> {
        let key = profile_key(profile);
        let path = self.dir.join(format!("{}.bpf", hex(&key)));
        if let Some(program) = load(&path, &key) {
            return Ok(program);
        }
        let program = compile(profile)?;
        if let Err(e) = self.store(&path, &key, &program) {
            log::warn!("seccomp cache: writing {}: {e}", path.display());
        }
        Ok(program)
    }

    fn store(&self, path: &Path, key: &[u8; 32], program: &Program) -> std::io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let nanos = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        let tmp = self.dir.join(format!(
            ".tmp-{}-{}-{nanos}",
            &hex(key)[..16],
            std::process::id()
        ));
        let written =
            write_synced(&tmp, &encode(key, program)).and_then(|()| fs::rename(&tmp, path));
        if written.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        written?;
        self.evict()
    }

    /// Removes the least recently used entries beyond the bound, and stale temporary files.
    fn evict(&self) -> std::io::Result<()> {
        let now = SystemTime::now();
        let mut entries = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            let mtime = meta.modified()?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".tmp-")
                && now.duration_since(mtime).unwrap_or_default() > TOUCH_AFTER
            {
                let _ = fs::remove_file(entry.path());
            } else if name.ends_with(".bpf") {
                entries.push((mtime, meta.len(), entry.path()));
            }
        }
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            match fs::remove_file(&path) {
                Ok(()) => total -= len,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => total -= len,
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

fn write_synced(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn encode(key: &[u8; 32], program: &Program) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + program.insns.len() * 8 + 32);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(key);
    out.extend_from_slice(&program.flags.to_le_bytes());
    out.extend_from_slice(&u32::from(program.notify).to_le_bytes());
    out.extend_from_slice(&(program.insns.len() as u32).to_le_bytes());
    for i in &program.insns {
        out.extend_from_slice(&i.code.to_le_bytes());
        out.extend_from_slice(&[i.jt, i.jf]);
        out.extend_from_slice(&i.k.to_le_bytes());
    }
    let sum = Sha256::digest(&out);
    out.extend_from_slice(&sum);
    out
}

/// Reads and verifies an entry; `None` on any mismatch (a miss).
fn load(path: &Path, key: &[u8; 32]) -> Option<Program> {
    let mut file = File::open(path).ok()?;
    let meta = file.metadata().ok()?;
    let len = usize::try_from(meta.len()).ok()?;
    if len < HEADER + 32 || !(len - HEADER - 32).is_multiple_of(8) {
        return discard(path, "length");
    }
    let mut bytes = vec![0u8; len];
    file.read_exact(&mut bytes).ok()?;
    let program = match decode(&bytes, key) {
        Ok(program) => program,
        Err(what) => return discard(path, what),
    };
    if meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_none_or(|age| age > TOUCH_AFTER)
    {
        let _ = file.set_modified(SystemTime::now());
    }
    Some(program)
}

fn discard(path: &Path, what: &str) -> Option<Program> {
    log::warn!(
        "seccomp cache: {} has a bad {what}; recompiling",
        path.display()
    );
    None
}

fn decode(bytes: &[u8], key: &[u8; 32]) -> Result<Program, &'static str> {
    let (body, sum) = bytes.split_at(bytes.len() - 32);
    let word = |at: usize| u32::from_le_bytes([body[at], body[at + 1], body[at + 2], body[at + 3]]);
    if &body[..8] != MAGIC || body[8..40] != key[..] {
        return Err("header");
    }
    let count = word(48) as usize;
    if body.len() != HEADER + count * 8 {
        return Err("length");
    }
    if Sha256::digest(body)[..] != sum[..] {
        return Err("checksum");
    }
    let insns = body[HEADER..]
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_le_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: word_at(c, 4),
        })
        .collect();
    Ok(Program::from_parts(insns, word(40), word(44) != 0))
}

fn word_at(c: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]])
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The cache key of `profile` on this host with this compiler.
pub fn profile_key(profile: &LinuxSeccomp) -> [u8; 32] {
    let mut c = Canon(Vec::with_capacity(16 << 10));
    c.str(COMPILER_VERSION);
    c.str(std::env::consts::ARCH);
    c.str(kernel_actions());
    c.u64(action_code(profile.default_action()));
    c.opt(profile.default_errno_ret(), |c, e| c.u64(e.into()));
    c.opt(profile.architectures().as_ref(), |c, v| {
        c.list(v, |c, a| c.u64(*a as u64))
    });
    c.opt(profile.flags().as_ref(), |c, v| {
        c.list(v, |c, f| c.u64(flag_code(*f)))
    });
    c.opt(profile.listener_path().as_ref(), |c, p| {
        c.bytes(p.as_os_str().as_encoded_bytes())
    });
    c.opt(profile.listener_metadata().as_ref(), |c, m| c.str(m));
    c.opt(profile.syscalls().as_ref(), |c, v| c.list(v, Canon::rule));
    Sha256::digest(&c.0).into()
}

/// `/proc/sys/kernel/seccomp/actions_avail`, read once per process.
fn kernel_actions() -> &'static str {
    static ACTIONS: OnceLock<String> = OnceLock::new();
    ACTIONS.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default()
    })
}

fn action_code(a: LinuxSeccompAction) -> u64 {
    use LinuxSeccompAction as A;
    match a {
        A::ScmpActKill => 1,
        A::ScmpActKillThread => 2,
        A::ScmpActKillProcess => 3,
        A::ScmpActTrap => 4,
        A::ScmpActErrno => 5,
        A::ScmpActNotify => 6,
        A::ScmpActTrace => 7,
        A::ScmpActLog => 8,
        A::ScmpActAllow => 9,
    }
}

fn flag_code(f: LinuxSeccompFilterFlag) -> u64 {
    use LinuxSeccompFilterFlag as F;
    match f {
        F::SeccompFilterFlagLog => 1,
        F::SeccompFilterFlagTsync => 2,
        F::SeccompFilterFlagSpecAllow => 3,
        F::SeccompFilterFlagWaitKillableRecv => 4,
    }
}

/// Canonical, unambiguous encoding: fixed-width integers, length-prefixed strings and lists,
/// options tagged.
struct Canon(Vec<u8>);

impl Canon {
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, b: &[u8]) {
        self.u64(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }

    fn opt<T>(&mut self, v: Option<T>, f: impl FnOnce(&mut Self, T)) {
        match v {
            None => self.0.push(0),
            Some(v) => {
                self.0.push(1);
                f(self, v);
            }
        }
    }

    fn list<T>(&mut self, v: &[T], mut f: impl FnMut(&mut Self, &T)) {
        self.u64(v.len() as u64);
        for item in v {
            f(self, item);
        }
    }

    fn rule(&mut self, r: &LinuxSyscall) {
        self.list(r.names(), |c, n| c.str(n));
        self.u64(action_code(r.action()));
        self.opt(r.errno_ret(), |c, e| c.u64(e.into()));
        self.opt(r.args().as_ref(), |c, args| {
            c.list(args, |c, a| {
                c.u64(a.index() as u64);
                c.u64(a.value());
                c.opt(a.value_two(), Canon::u64);
                c.u64(a.op() as u64);
            })
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> serde_json::Value {
        json!({"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"architectures":["SCMP_ARCH_X86_64"],
            "flags":["SECCOMP_FILTER_FLAG_LOG"],"listenerPath":"/run/a.sock","listenerMetadata":"m",
            "syscalls":[{"names":["read","write"],"action":"SCMP_ACT_NOTIFY","errnoRet":5,
              "args":[{"index":1,"value":2,"valueTwo":3,"op":"SCMP_CMP_MASKED_EQ"}]}]})
    }

    fn key_of(v: &serde_json::Value) -> [u8; 32] {
        profile_key(&serde_json::from_value(v.clone()).unwrap())
    }

    #[test]
    fn changing_any_single_field_changes_the_key() {
        let edits: Vec<(&str, serde_json::Value)> = vec![
            ("/defaultAction", json!("SCMP_ACT_KILL")),
            ("/defaultErrnoRet", json!(2)),
            ("/architectures", json!(["SCMP_ARCH_X86"])),
            ("/flags", json!(["SECCOMP_FILTER_FLAG_TSYNC"])),
            ("/listenerPath", json!("/run/b.sock")),
            ("/listenerMetadata", json!("n")),
            ("/syscalls/0/names", json!(["read", "writev"])),
            ("/syscalls/0/action", json!("SCMP_ACT_ERRNO")),
            ("/syscalls/0/errnoRet", json!(6)),
            ("/syscalls/0/args/0/index", json!(2)),
            ("/syscalls/0/args/0/value", json!(3)),
            ("/syscalls/0/args/0/valueTwo", json!(4)),
            ("/syscalls/0/args/0/op", json!("SCMP_CMP_EQ")),
        ];
        let mut keys = vec![key_of(&base())];
        for (ptr, value) in edits {
            let mut v = base();
            *v.pointer_mut(ptr).unwrap() = value;
            let key = key_of(&v);
            assert!(!keys.contains(&key), "editing {ptr} left the key unchanged");
            keys.push(key);
        }
    }

    fn entry_path(dir: &Path, profile: &LinuxSeccomp) -> PathBuf {
        dir.join(format!("{}.bpf", hex(&profile_key(profile))))
    }

    #[test]
    fn hit_returns_the_stored_program_and_corruption_recompiles() {
        let dir = tempfile::Builder::new()
            .prefix("pier-test-")
            .tempdir()
            .unwrap();
        let cache = Cache::new(dir.path().join("seccomp"));
        let profile: LinuxSeccomp = serde_json::from_value(base()).unwrap();
        let first = cache.get_or_compile(&profile).unwrap();
        assert_eq!(first, compile(&profile).unwrap());
        let path = entry_path(&dir.path().join("seccomp"), &profile);
        assert_eq!(load(&path, &profile_key(&profile)), Some(first.clone()));
        let mut bytes = fs::read(&path).unwrap();
        bytes[HEADER + 3] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        assert_eq!(load(&path, &profile_key(&profile)), None);
        assert_eq!(cache.get_or_compile(&profile).unwrap(), first);
        fs::write(&path, &bytes[..bytes.len() - 9]).unwrap();
        assert_eq!(load(&path, &profile_key(&profile)), None);
        assert_eq!(cache.get_or_compile(&profile).unwrap(), first);
        assert!(load(&path, &profile_key(&profile)).is_some());
    }

    #[test]
    fn eviction_keeps_the_cache_bounded_and_removes_oldest() {
        let dir = tempfile::Builder::new()
            .prefix("pier-test-")
            .tempdir()
            .unwrap();
        let first: LinuxSeccomp = serde_json::from_value(base()).unwrap();
        let entry_len = encode(&profile_key(&first), &compile(&first).unwrap()).len() as u64;
        let limit = entry_len * 5 / 2;
        let cache = Cache::with_limit(dir.path().to_owned(), limit);
        let mut paths = Vec::new();
        for errno in 1..6 {
            let mut v = base();
            v["defaultErrnoRet"] = json!(errno);
            let profile: LinuxSeccomp = serde_json::from_value(v).unwrap();
            cache.get_or_compile(&profile).unwrap();
            let path = entry_path(dir.path(), &profile);
            let age = Duration::from_secs(600 - errno * 10);
            File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(SystemTime::now() - age)
                .unwrap();
            paths.push(path);
        }
        let total: u64 = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(total <= limit, "{total} > {limit}");
        assert!(!paths[0].exists());
        assert!(paths[4].exists());
    }

    #[test]
    fn concurrent_starts_of_one_profile_agree() {
        let dir = tempfile::Builder::new()
            .prefix("pier-test-")
            .tempdir()
            .unwrap();
        let profile: LinuxSeccomp = serde_json::from_value(base()).unwrap();
        let expected = compile(&profile).unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                s.spawn(|| {
                    let cache = Cache::new(dir.path().to_owned());
                    for _ in 0..20 {
                        assert_eq!(cache.get_or_compile(&profile).unwrap(), expected);
                    }
                });
            }
        });
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
    }
}
