//! The network records: one JSON file per network under `<state>/networks/`, and the lock that
//! serialises creating and removing networks.
//!
//! Theory of operation: a record is written to `<name>.json.tmp` and renamed over `<name>.json`,
//! so a reader (every `pier run` looking its network up, without the lock) sees the old record or
//! the new one, never half of one. `create`, `rm` and the first-use creation of the default
//! network take an exclusive `flock(2)` on `<state>/networks/.lock`, so two concurrent
//! `pier run`s cannot both create `bridge`, and a check ("name free", "no overlap") still holds
//! when the record is written.
//! Privileges: write access to the state directory. Tests: below.
use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};

use super::{Network, NetworkError};

/// The records of one state directory.
#[derive(Debug, Clone)]
pub(super) struct Store {
    dir: PathBuf,
}

fn store_error(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> NetworkError {
    let path = path.to_path_buf();
    move |source| NetworkError::Store { step, path, source }
}

impl Store {
    pub(super) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.json"))
    }

    /// Takes the exclusive lock of the store (released when the guard drops).
    pub(super) fn lock(&self) -> Result<Flock<File>, NetworkError> {
        fs::create_dir_all(&self.dir).map_err(store_error("create directory", &self.dir))?;
        let path = self.dir.join(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(store_error("open lock", &path))?;
        Flock::lock(file, FlockArg::LockExclusive)
            .map_err(|(_, errno)| store_error("flock", &path)(errno.into()))
    }

    /// The record of `name`, `None` when there is none (or the name could not be a file name).
    pub(super) fn load(&self, name: &str) -> Result<Option<Network>, NetworkError> {
        if pier_net::ipam::check_name(name).is_err() {
            return Ok(None);
        }
        read(&self.path(name))
    }

    /// Writes `network`'s record atomically.
    pub(super) fn save(&self, network: &Network) -> Result<(), NetworkError> {
        fs::create_dir_all(&self.dir).map_err(store_error("create directory", &self.dir))?;
        let path = self.path(&network.name);
        let tmp = self.dir.join(format!("{}.json.tmp", network.name));
        let bytes = serde_json::to_vec_pretty(network).expect("a network record serialises");
        fs::write(&tmp, bytes).map_err(store_error("write", &tmp))?;
        fs::rename(&tmp, &path).map_err(store_error("rename into place", &path))
    }

    /// Deletes `name`'s record (no error when it is already gone).
    pub(super) fn delete(&self, name: &str) -> Result<(), NetworkError> {
        let path = self.path(name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != ErrorKind::NotFound => Err(store_error("remove", &path)(e)),
            _ => Ok(()),
        }
    }

    /// Every record, sorted by name.
    pub(super) fn list(&self) -> Result<Vec<Network>, NetworkError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(store_error("list", &self.dir)(e)),
        };
        let mut networks = Vec::new();
        for entry in entries {
            let path = entry.map_err(store_error("list", &self.dir))?.path();
            if path.extension().is_some_and(|e| e == "json") {
                networks.extend(read(&path)?);
            }
        }
        networks.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(networks)
    }
}

fn read(path: &Path) -> Result<Option<Network>, NetworkError> {
    match fs::read(path) {
        Ok(bytes) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|source| NetworkError::Record {
                    path: path.to_path_buf(),
                    source,
                })
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(store_error("read", path)(e)),
    }
}

/// A new network id: 64 hex digits from the kernel's random pool.
pub(super) fn new_id() -> Result<String, NetworkError> {
    let mut bytes = [0u8; 32];
    let path = Path::new("/dev/urandom");
    let mut file = File::open(path).map_err(store_error("open", path))?;
    std::io::Read::read_exact(&mut file, &mut bytes).map_err(store_error("read", path))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Now as RFC 3339 UTC with seconds (`2026-11-21T08:00:30Z`).
pub(super) fn now_rfc3339() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    rfc3339(secs)
}

/// Seconds since the epoch as RFC 3339 UTC (civil-from-days, H. Hinnant's algorithm).
fn rfc3339(secs: u64) -> String {
    let (days, rest) = ((secs / 86_400) as i64, secs % 86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s) = (rest / 3_600, rest / 60 % 60, rest % 60);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::Driver;

    fn record(name: &str) -> Network {
        Network {
            name: name.to_string(),
            id: new_id().unwrap(),
            driver: Driver::Bridge,
            interface: "pier-test0".to_string(),
            subnet: "198.18.0.0/24".parse().unwrap(),
            gateway: "198.18.0.1".parse().unwrap(),
            subnet6: None,
            gateway6: None,
            host_shim: None,
            created: now_rfc3339(),
            ipvlan_mode: None,
            options: Default::default(),
        }
    }

    #[test]
    fn records_round_trip_list_sorted_and_delete_idempotently() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().join("networks"));
        assert!(store.list().unwrap().is_empty());
        assert_eq!(store.load("n1").unwrap(), None);
        let (b, a) = (record("n2"), record("n1"));
        store.save(&b).unwrap();
        store.save(&a).unwrap();
        assert_eq!(store.load("n1").unwrap(), Some(a.clone()));
        assert_eq!(store.list().unwrap(), [a, b.clone()]);
        store.delete("n1").unwrap();
        store.delete("n1").unwrap();
        assert_eq!(store.list().unwrap(), [b]);
        assert_eq!(store.load("../n2").unwrap(), None);
    }

    #[test]
    fn gateway_modes_keep_dockers_keys_and_old_records_read_as_nat() {
        use crate::network::{GatewayMode, GATEWAY_MODE_IPV4, GATEWAY_MODE_IPV6};
        let mut routed = record("r");
        routed.options.gateway_mode_ipv4 = GatewayMode::Routed;
        let json = serde_json::to_value(&routed).unwrap();
        assert_eq!(json["options"][GATEWAY_MODE_IPV4], "routed", "{json}");
        assert!(json["options"].get(GATEWAY_MODE_IPV6).is_none(), "{json}");
        let back: Network = serde_json::from_value(json).unwrap();
        assert_eq!(back, routed);
        assert_eq!(
            back.routed_subnets(),
            [("198.18.0.0/24".parse().unwrap(), true)]
        );
        let plain = serde_json::to_value(record("n")).unwrap();
        assert!(plain.get("options").is_none(), "{plain}");
        let old: Network = serde_json::from_value(plain).unwrap();
        assert_eq!(old.options.gateway_mode_ipv4, GatewayMode::Nat);
    }

    #[test]
    fn a_corrupt_record_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path().to_path_buf());
        fs::write(dir.path().join("n1.json"), "{").unwrap();
        let e = store.load("n1").unwrap_err();
        assert!(e.to_string().contains("n1.json"), "{e}");
    }

    #[test]
    fn ids_are_64_hex_digits_and_differ() {
        let (a, b) = (new_id().unwrap(), new_id().unwrap());
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn timestamps_are_rfc3339_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_248_030), "2026-11-21T08:00:30Z");
    }
}
