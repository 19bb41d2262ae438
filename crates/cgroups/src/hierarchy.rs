//! Which cgroup hierarchies this host has, read from /proc/self/mountinfo, and where a process
//! sits in each, read from /proc/<pid>/cgroup.
//!
//! Theory: a `cgroup` mount is one v1 hierarchy; its controllers are the super options that name
//! a controller (`cpu,cpuacct`, `name=systemd`). A `cgroup2` mount is the unified hierarchy. A
//! host with only cgroup2 is "v2", with only v1 mounts "v1", with both "hybrid" (this machine:
//! v1 controllers plus /sys/fs/cgroup/unified). The same hierarchy mounted twice (bind mounts)
//! is kept once, first mount wins. A mount's root field is the cgroup it shows (not `/` inside
//! a cgroup namespace mounted from outside), so a cgroup path maps to
//! `mountpoint + (path - root)`.
//!
//! Privileges: none. Tests: unit tests below (parsing of real-looking samples).
use crate::Error;
use std::path::{Path, PathBuf};

/// v1 controller names the kernel knows (super options that are not controllers are skipped).
const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "blkio",
    "perf_event",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
];

/// One mounted hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchy {
    /// v1 controllers (`["cpu", "cpuacct"]`, `["name=systemd"]`); empty for cgroup2.
    pub controllers: Vec<String>,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
    /// The cgroup the mount shows at its mountpoint (mountinfo's root field).
    pub root: String,
}

impl Hierarchy {
    /// True for the cgroup2 (unified) hierarchy.
    pub fn is_v2(&self) -> bool {
        self.controllers.is_empty()
    }

    /// True when this v1 hierarchy carries `controller`.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// `cpu,cpuacct` (or `unified`), for messages.
    pub fn label(&self) -> String {
        if self.is_v2() {
            "unified".to_string()
        } else {
            self.controllers.join(",")
        }
    }

    /// The directory of `cgroup` (a path as /proc/<pid>/cgroup shows it) under this mount.
    pub fn dir_of(&self, cgroup: &str) -> PathBuf {
        let rest = cgroup
            .strip_prefix(self.root.trim_end_matches('/'))
            .unwrap_or(cgroup);
        self.mountpoint.join(rest.trim_start_matches('/'))
    }
}

/// The host's cgroup layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hierarchies {
    /// Every v1 hierarchy, in mount order.
    pub v1: Vec<Hierarchy>,
    /// The cgroup2 mount, if any.
    pub v2: Option<Hierarchy>,
}

impl Hierarchies {
    /// Reads /proc/self/mountinfo.
    pub fn detect() -> Result<Hierarchies, Error> {
        let path = Path::new("/proc/self/mountinfo");
        let text = std::fs::read_to_string(path).map_err(|error| Error::ReadProc {
            path: path.to_path_buf(),
            error,
        })?;
        let found = Hierarchies::parse(&text);
        if found.v1.is_empty() && found.v2.is_none() {
            return Err(Error::NoCgroupMount);
        }
        Ok(found)
    }

    /// Parses mountinfo text.
    pub fn parse(mountinfo: &str) -> Hierarchies {
        let mut found = Hierarchies {
            v1: Vec::new(),
            v2: None,
        };
        for hierarchy in mountinfo.lines().filter_map(parse_mount_line) {
            if hierarchy.is_v2() {
                found.v2.get_or_insert(hierarchy);
            } else if !found
                .v1
                .iter()
                .any(|h| h.controllers == hierarchy.controllers)
            {
                found.v1.push(hierarchy);
            }
        }
        found
    }

    /// True when both v1 hierarchies and a cgroup2 mount exist.
    pub fn is_hybrid(&self) -> bool {
        !self.v1.is_empty() && self.v2.is_some()
    }

    /// The v1 hierarchy carrying `controller`.
    pub fn v1_with(&self, controller: &str) -> Option<&Hierarchy> {
        self.v1.iter().find(|h| h.has(controller))
    }
}

/// One mountinfo line → a hierarchy, if it is a cgroup mount.
fn parse_mount_line(line: &str) -> Option<Hierarchy> {
    let (left, right) = line.split_once(" - ")?;
    let fields: Vec<&str> = left.split(' ').collect();
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let _source = right.next()?;
    let super_options = right.next().unwrap_or("");
    let root = unescape(fields.get(3)?);
    let mountpoint = PathBuf::from(unescape(fields.get(4)?));
    let controllers = match fstype {
        "cgroup2" => Vec::new(),
        "cgroup" => {
            let list: Vec<String> = super_options
                .split(',')
                .filter(|o| V1_CONTROLLERS.contains(o) || o.starts_with("name="))
                .map(str::to_string)
                .collect();
            if list.is_empty() {
                return None;
            }
            list
        }
        _ => return None,
    };
    Some(Hierarchy {
        controllers,
        mountpoint,
        root,
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One line of /proc/<pid>/cgroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// v1 controllers of the hierarchy; empty for cgroup2 (`0::/path`).
    pub controllers: Vec<String>,
    /// The cgroup path (`/pier/x`).
    pub path: String,
}

/// Reads /proc/<pid>/cgroup (`pid` 0 = the calling process, via /proc/self).
pub fn memberships(pid: i32) -> Result<Vec<Membership>, Error> {
    let path = if pid == 0 {
        PathBuf::from("/proc/self/cgroup")
    } else {
        PathBuf::from(format!("/proc/{pid}/cgroup"))
    };
    let text = std::fs::read_to_string(&path).map_err(|error| Error::ReadProc { path, error })?;
    Ok(parse_memberships(&text))
}

/// Parses /proc/<pid>/cgroup text (`4:memory:/a/b`, `1:name=systemd:/`, `0::/`).
pub fn parse_memberships(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let _id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            Some(Membership {
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
            })
        })
        .collect()
}

/// The path of the hierarchy with `controllers` (empty: cgroup2) in a membership list.
pub fn path_in<'a>(list: &'a [Membership], controllers: &[String]) -> Option<&'a str> {
    list.iter()
        .find(|m| {
            m.controllers.len() == controllers.len()
                && controllers.iter().all(|c| m.controllers.contains(c))
        })
        .map(|m| m.path.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
22 1 0:21 / /proc rw,nosuid - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
90 22 0:32 /docker /mnt/mem\\040x rw - cgroup cgroup rw,memory
";

    #[test]
    fn parses_hybrid_mountinfo() {
        let h = Hierarchies::parse(HYBRID);
        assert!(h.is_hybrid());
        assert_eq!(h.v1.len(), 3, "the second memory mount is a duplicate");
        assert_eq!(h.v1[0].controllers, ["cpu", "cpuacct"]);
        assert_eq!(
            h.v1_with("cpuacct").unwrap().mountpoint,
            Path::new("/sys/fs/cgroup/cpu,cpuacct")
        );
        assert_eq!(h.v1[2].controllers, ["name=systemd"]);
        assert_eq!(
            h.v2.as_ref().unwrap().mountpoint,
            Path::new("/sys/fs/cgroup/unified")
        );
        assert!(h.v1_with("pids").is_none());
    }

    #[test]
    fn parses_pure_v2_and_escapes() {
        let h = Hierarchies::parse(
            "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n\
             91 22 0:32 /docker /mnt/mem\\040x rw - cgroup cgroup rw,memory\n",
        );
        assert_eq!(h.v2.unwrap().mountpoint, Path::new("/sys/fs/cgroup"));
        assert_eq!(h.v1[0].mountpoint, Path::new("/mnt/mem x"));
        assert_eq!(h.v1[0].root, "/docker");
    }

    #[test]
    fn ignores_cgroup_mounts_without_controllers() {
        let h = Hierarchies::parse("1 2 0:3 / /x rw - cgroup none rw,xattr\n");
        assert!(h.v1.is_empty() && h.v2.is_none());
    }

    #[test]
    fn maps_paths_through_mount_root() {
        let h = Hierarchy {
            controllers: vec!["memory".into()],
            mountpoint: "/mnt/mem".into(),
            root: "/docker".into(),
        };
        assert_eq!(h.dir_of("/docker/abc"), Path::new("/mnt/mem/abc"));
        assert_eq!(h.dir_of("/"), Path::new("/mnt/mem/"));
        let top = Hierarchy {
            root: "/".into(),
            ..h
        };
        assert_eq!(top.dir_of("/pier/x"), Path::new("/mnt/mem/pier/x"));
    }

    #[test]
    fn parses_proc_pid_cgroup() {
        let list = parse_memberships(
            "9:name=systemd:/\n4:memory:/process_api/2b0d\n2:cpu,cpuacct:/a:b\n0::/u\n",
        );
        assert_eq!(list.len(), 4);
        assert_eq!(list[2].controllers, ["cpu", "cpuacct"]);
        assert_eq!(list[2].path, "/a:b", "colons inside the path are kept");
        assert!(list[3].controllers.is_empty());
        let h = Hierarchies::parse(HYBRID);
        assert_eq!(path_in(&list, &h.v1[0].controllers), Some("/a:b"));
        assert_eq!(
            path_in(&list, &h.v1[1].controllers),
            Some("/process_api/2b0d")
        );
        assert_eq!(
            path_in(&list, &h.v2.as_ref().unwrap().controllers),
            Some("/u")
        );
    }
}
