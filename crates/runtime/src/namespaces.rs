//! The container's namespaces: which are created by `clone3`, which are joined, in what order.
//!
//! Theory of operation: the parent turns `linux.namespaces` into a [`Plan`] before forking. New
//! namespaces are created by the `clone3` call itself, except three that must come later:
//! - cgroup: unshared by the init after the parent placed it in every cgroup hierarchy, so the
//!   namespace root is the container's cgroup;
//! - time: unshared by the init, offsets written to `/proc/self/timens_offsets`, then entered
//!   through `/proc/self/ns/time_for_children` (offsets are frozen once a process is inside);
//! - all of them when the user namespace is joined by path (they must belong to it): unshared
//!   after the join.
//!
//! Namespaces given by `path` are opened in the parent (so a bad path is reported before any
//! process exists) and joined by the init with `setns`, the user namespace first. A pid namespace
//! given by path can only be entered by children: the parent joins it (`pid_for_children`) around
//! the fork and returns to its own.
//!
//! Privileges: CAP_SYS_ADMIN. Tests: crates/runtime/tests/priv_lifecycle.rs.
use crate::container::Error;
use nix::sched::{setns, unshare, CloneFlags};
use oci_spec::runtime::{LinuxIdMapping, LinuxNamespaceType, Spec};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

/// A namespace given by path, opened.
#[derive(Debug)]
pub struct Join {
    /// Namespace type.
    pub flag: CloneFlags,
    /// The file named by `path`.
    pub file: File,
    /// That path, for error messages.
    pub path: PathBuf,
}

/// How the init gets its namespaces.
#[derive(Debug)]
pub struct Plan {
    /// `CLONE_NEW*` flags for `clone3`.
    pub clone_flags: u64,
    /// New namespaces the init unshares itself (after joins; cgroup after the parent's go).
    pub unshare_flags: CloneFlags,
    /// Joined by the init with setns, user namespace first.
    pub joins: Vec<Join>,
    /// A pid namespace joined by path (entered by the parent around the fork).
    pub pid_join: Option<Join>,
    /// A new user namespace whose maps the parent writes.
    pub new_user: bool,
    /// A new uts namespace (hostname and domainname may be set).
    pub new_uts: bool,
    /// A new time namespace with offsets to write.
    pub new_time: bool,
    /// A new cgroup namespace (unshared after cgroup placement).
    pub new_cgroup: bool,
}

/// `CLONE_NEWTIME` (nix has no constant for it).
const NEWTIME: CloneFlags = CloneFlags::from_bits_retain(libc::CLONE_NEWTIME);

fn flag_of(typ: LinuxNamespaceType) -> CloneFlags {
    CloneFlags::from_bits_retain(typ as i32)
}

impl Plan {
    /// Builds the plan of `spec`, opening every namespace path.
    pub fn of(spec: &Spec) -> Result<Plan, Error> {
        let mut plan = Plan {
            clone_flags: 0,
            unshare_flags: CloneFlags::empty(),
            joins: Vec::new(),
            pid_join: None,
            new_user: false,
            new_uts: false,
            new_time: false,
            new_cgroup: false,
        };
        let namespaces = spec.linux().as_ref().and_then(|l| l.namespaces().as_ref());
        let mut new = CloneFlags::empty();
        for ns in namespaces.into_iter().flatten() {
            let flag = flag_of(ns.typ());
            match ns.path() {
                Some(path) => {
                    let file =
                        File::open(path).map_err(|e| Error::io("open namespace", path, e))?;
                    let join = Join {
                        flag,
                        file,
                        path: path.clone(),
                    };
                    if flag == CloneFlags::CLONE_NEWPID {
                        plan.pid_join = Some(join);
                    } else if flag == CloneFlags::CLONE_NEWUSER {
                        plan.joins.insert(0, join);
                    } else {
                        plan.joins.push(join);
                    }
                }
                None => new |= flag,
            }
        }
        plan.new_user = new.contains(CloneFlags::CLONE_NEWUSER);
        plan.new_uts = new.contains(CloneFlags::CLONE_NEWUTS);
        plan.new_time = new.contains(NEWTIME);
        plan.new_cgroup = new.contains(CloneFlags::CLONE_NEWCGROUP);
        let user_joined = plan
            .joins
            .first()
            .is_some_and(|j| j.flag == CloneFlags::CLONE_NEWUSER);
        if user_joined && new.contains(CloneFlags::CLONE_NEWPID) {
            return Err(Error::Unsupported(
                "a new pid namespace inside a user namespace joined by path",
            ));
        }
        let late = CloneFlags::CLONE_NEWCGROUP | NEWTIME;
        if user_joined {
            plan.unshare_flags = new;
        } else {
            plan.clone_flags = (new - late).bits() as u64;
            plan.unshare_flags = new & late;
        }
        Ok(plan)
    }

    /// True when the init must wait for the parent before setting itself up.
    pub fn init_waits(&self) -> bool {
        self.new_user || self.new_cgroup
    }
}

/// In the init: joins the namespaces given by path and unshares the late ones (not cgroup, which
/// comes after the parent's go, see [`unshare_cgroup`]).
pub fn enter(plan: &Plan, spec: &Spec) -> Result<(), String> {
    for join in &plan.joins {
        setns(join.file.as_fd(), join.flag)
            .map_err(|e| format!("setns {}: {e}", join.path.display()))?;
    }
    let now = plan.unshare_flags - CloneFlags::CLONE_NEWCGROUP - NEWTIME;
    if !now.is_empty() {
        unshare(now).map_err(|e| format!("unshare {now:?}: {e}"))?;
    }
    if plan.new_time {
        enter_new_time_namespace(spec)?;
    }
    Ok(())
}

/// In the init of a new user namespace, once the parent wrote the maps: become the namespace's
/// root (until then the init runs as the overflow id and cannot create files).
pub fn become_root(plan: &Plan) -> Result<(), String> {
    if !plan.new_user {
        return Ok(());
    }
    use pier_sys::clone::child;
    child::setresgid(0).map_err(|e| format!("setresgid 0 in the user namespace: {e}"))?;
    child::setresuid(0).map_err(|e| format!("setresuid 0 in the user namespace: {e}"))?;
    // The id change made the process non-dumpable, which gives its /proc files to the host's
    // root, out of reach in this namespace (timens_offsets, for one); exec resets it anyway.
    nix::sys::prctl::set_dumpable(true).map_err(|e| format!("set dumpable: {e}"))
}

/// In the init, once it is in all its cgroups: a new cgroup namespace rooted there.
pub fn unshare_cgroup(plan: &Plan) -> Result<(), String> {
    if plan.new_cgroup {
        unshare(CloneFlags::CLONE_NEWCGROUP)
            .map_err(|e| format!("unshare cgroup namespace: {e}"))?;
    }
    Ok(())
}

fn enter_new_time_namespace(spec: &Spec) -> Result<(), String> {
    unshare(NEWTIME).map_err(|e| format!("unshare time namespace: {e}"))?;
    let offsets = spec
        .linux()
        .as_ref()
        .and_then(|l| l.time_offsets().as_ref());
    let mut text = String::new();
    for (clock, off) in offsets.into_iter().flatten() {
        let id = match clock.as_str() {
            "monotonic" => libc::CLOCK_MONOTONIC,
            "boottime" => libc::CLOCK_BOOTTIME,
            other => return Err(format!("linux.timeOffsets: unknown clock {other:?}")),
        };
        text.push_str(&format!(
            "{id} {} {}\n",
            off.secs().unwrap_or(0),
            off.nanosecs().unwrap_or(0)
        ));
    }
    if !text.is_empty() {
        std::fs::write("/proc/self/timens_offsets", text)
            .map_err(|e| format!("write timens_offsets: {e}"))?;
    }
    let ns = File::open("/proc/self/ns/time_for_children")
        .map_err(|e| format!("open time_for_children: {e}"))?;
    setns(ns.as_fd(), NEWTIME).map_err(|e| format!("setns time namespace: {e}"))
}

/// In the parent: writes the uid and gid maps of the init's new user namespace.
pub fn write_id_maps(pid: i32, spec: &Spec) -> Result<(), Error> {
    let linux = spec.linux().as_ref();
    let maps = [
        ("uid_map", linux.and_then(|l| l.uid_mappings().as_ref())),
        ("gid_map", linux.and_then(|l| l.gid_mappings().as_ref())),
    ];
    for (file, map) in maps {
        let Some(map) = map.filter(|m| !m.is_empty()) else {
            continue;
        };
        let path = PathBuf::from(format!("/proc/{pid}/{file}"));
        std::fs::write(&path, map_text(map))
            .map_err(|e| Error::io("write user namespace map", &path, e))?;
    }
    Ok(())
}

fn map_text(map: &[LinuxIdMapping]) -> String {
    map.iter()
        .map(|m| format!("{} {} {}\n", m.container_id(), m.host_id(), m.size()))
        .collect()
}

/// Guard of the parent's pid namespace for children while it forks into a joined one.
#[derive(Debug)]
pub struct PidForChildren {
    own: OwnedFd,
}

impl PidForChildren {
    /// Makes the caller's next children start in the pid namespace `target`.
    pub fn enter(target: impl AsFd, path: &std::path::Path) -> Result<PidForChildren, Error> {
        let own: OwnedFd = File::open("/proc/self/ns/pid_for_children")
            .map_err(|e| {
                Error::io(
                    "open own pid namespace",
                    "/proc/self/ns/pid_for_children",
                    e,
                )
            })?
            .into();
        setns(target, CloneFlags::CLONE_NEWPID)
            .map_err(|e| Error::io("join pid namespace", path, e.into()))?;
        Ok(PidForChildren { own })
    }
}

impl Drop for PidForChildren {
    fn drop(&mut self) {
        if let Err(e) = setns(self.own.as_fd(), CloneFlags::CLONE_NEWPID) {
            log::warn!("returning to the runtime's pid namespace: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(namespaces: serde_json::Value) -> Spec {
        serde_json::from_value(json!({"ociVersion": "1.0.2", "linux": {"namespaces": namespaces}}))
            .unwrap()
    }

    #[test]
    fn new_namespaces_go_to_clone_except_late_ones() {
        let plan = Plan::of(&spec(
            json!([{"type": "pid"}, {"type": "mount"}, {"type": "cgroup"}, {"type": "time"}]),
        ))
        .unwrap();
        let expected = (CloneFlags::CLONE_NEWPID | CloneFlags::CLONE_NEWNS).bits() as u64;
        assert_eq!(plan.clone_flags, expected);
        assert_eq!(plan.unshare_flags, CloneFlags::CLONE_NEWCGROUP | NEWTIME);
        assert!(plan.init_waits());
    }

    #[test]
    fn joined_user_namespace_comes_first() {
        let plan = Plan::of(&spec(json!([
            {"type": "network", "path": "/proc/self/ns/net"},
            {"type": "user", "path": "/proc/self/ns/user"},
            {"type": "uts"}
        ])))
        .unwrap();
        assert_eq!(plan.joins[0].flag, CloneFlags::CLONE_NEWUSER);
        assert_eq!(plan.clone_flags, 0);
        assert_eq!(plan.unshare_flags, CloneFlags::CLONE_NEWUTS);
    }

    #[test]
    fn bad_namespace_path_is_named() {
        let err = Plan::of(&spec(
            json!([{"type": "network", "path": "/nonexistent/ns"}]),
        ))
        .unwrap_err();
        assert!(err.to_string().contains("/nonexistent/ns"), "{err}");
    }

    #[test]
    fn id_map_format() {
        let m: LinuxIdMapping =
            serde_json::from_value(json!({"containerID": 0, "hostID": 1000, "size": 10})).unwrap();
        assert_eq!(map_text(&[m]), "0 1000 10\n");
    }
}
