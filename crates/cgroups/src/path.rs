//! `cgroupsPath` → where the container's cgroup lives, for each manager.
//!
//! cgroupfs (runc semantics): an absolute path is relative to the root of every hierarchy, a
//! relative path is relative to the caller's own cgroup in each hierarchy (so it may differ per
//! hierarchy), no path means `/pier/<id>`. systemd: `slice:prefix:name` becomes
//! `<slice expanded like systemd>/<prefix>-<name>.scope`, where a slice `a-b.slice` lives at
//! `a.slice/a-b.slice` and `-.slice` is the root; an empty slice is `system.slice`.
//! `..` components are refused: a container must not climb out of the tree it was given.
//!
//! Privileges: none. Tests: unit tests below.
use crate::{Error, ManagerKind};

/// Where a container's cgroup is, before it is mapped into each hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// Relative to each hierarchy's root (`/pier/x`, always with a leading `/`).
    Absolute(String),
    /// Relative to the caller's cgroup in each hierarchy (`a/b`, no leading `/`).
    Relative(String),
}

/// Parent of every container cgroup whose spec gives no `cgroupsPath` (cgroupfs manager). It
/// belongs to pier: whichever container is destroyed last removes it.
pub const DEFAULT_PARENT: &str = "/pier";

/// Resolves the spec's `cgroupsPath` for `kind` (not called for `ManagerKind::Disabled`).
pub fn locate(kind: ManagerKind, cgroups_path: Option<&str>, id: &str) -> Result<Location, Error> {
    match kind {
        ManagerKind::Systemd => {
            let default = format!("system.slice:pier:{id}");
            let spec = cgroups_path.unwrap_or(&default);
            Ok(Location::Absolute(systemd_path(spec)?))
        }
        _ => match cgroups_path {
            None => Ok(Location::Absolute(format!(
                "{DEFAULT_PARENT}/{}",
                clean(id, id)?
            ))),
            Some(p) if p.starts_with('/') => Ok(Location::Absolute(format!("/{}", clean(p, p)?))),
            Some(p) => Ok(Location::Relative(clean(p, p)?)),
        },
    }
}

/// Drops empty and `.` components, refuses `..` and an empty result.
fn clean(path: &str, original: &str) -> Result<String, Error> {
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => return Err(invalid(original, "`..` is not allowed")),
            p => parts.push(p),
        }
    }
    if parts.is_empty() {
        return Err(invalid(original, "it names no cgroup below the root"));
    }
    Ok(parts.join("/"))
}

fn invalid(path: &str, reason: &'static str) -> Error {
    Error::InvalidPath {
        path: path.to_string(),
        reason,
    }
}

/// `slice:prefix:name` → `/a.slice/a-b.slice/prefix-name.scope`.
pub fn systemd_path(spec: &str) -> Result<String, Error> {
    let parts: Vec<&str> = spec.split(':').collect();
    let [slice, prefix, name] = parts[..] else {
        return Err(invalid(
            spec,
            "the systemd cgroup manager expects slice:prefix:name",
        ));
    };
    if name.is_empty() || name.contains('/') || prefix.contains('/') {
        return Err(invalid(
            spec,
            "name must be non-empty and prefix and name free of `/`",
        ));
    }
    let slice = if slice.is_empty() {
        "system.slice"
    } else {
        slice
    };
    let unit = if name.ends_with(".slice") {
        name.to_string()
    } else if prefix.is_empty() {
        format!("{name}.scope")
    } else {
        format!("{prefix}-{name}.scope")
    };
    let parent = expand_slice(slice).map_err(|reason| invalid(spec, reason))?;
    Ok(format!("{parent}/{unit}"))
}

/// `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice`; `-.slice` → `` (the root).
pub fn expand_slice(slice: &str) -> Result<String, &'static str> {
    let base = slice
        .strip_suffix(".slice")
        .ok_or("the slice must end in .slice")?;
    if slice.contains('/') {
        return Err("a slice name cannot contain `/`");
    }
    if base == "-" {
        return Ok(String::new());
    }
    if base.is_empty() || base.starts_with('-') || base.ends_with('-') || base.contains("--") {
        return Err("a slice name cannot be empty, start or end with `-`, or contain `--`");
    }
    let mut path = String::new();
    let mut end = 0;
    for part in base.split('-') {
        end += part.len();
        path.push('/');
        path.push_str(&base[..end]);
        path.push_str(".slice");
        end += 1;
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroupfs_paths() {
        let abs = |p: &str| Location::Absolute(p.to_string());
        let fs = ManagerKind::Cgroupfs;
        assert_eq!(locate(fs, None, "c1").unwrap(), abs("/pier/c1"));
        assert_eq!(
            locate(fs, Some("/docker//x/"), "c1").unwrap(),
            abs("/docker/x")
        );
        assert_eq!(
            locate(fs, Some("./a/b"), "c1").unwrap(),
            Location::Relative("a/b".into())
        );
        assert!(locate(fs, Some("/a/../../etc"), "c1").is_err());
        assert!(locate(fs, Some("/"), "c1").is_err());
        assert!(locate(fs, None, "..").is_err());
    }

    #[test]
    fn systemd_paths() {
        let sd = ManagerKind::Systemd;
        let got = |p| match locate(sd, p, "c1").unwrap() {
            Location::Absolute(a) => a,
            Location::Relative(r) => panic!("relative {r}"),
        };
        assert_eq!(got(None), "/system.slice/pier-c1.scope");
        assert_eq!(
            got(Some("machine.slice:libpod:abc")),
            "/machine.slice/libpod-abc.scope"
        );
        assert_eq!(
            got(Some("a-b-c.slice:docker:x")),
            "/a.slice/a-b.slice/a-b-c.slice/docker-x.scope"
        );
        assert_eq!(got(Some(":crio:y")), "/system.slice/crio-y.scope");
        assert_eq!(got(Some("-.slice:p:z")), "/p-z.scope");
        assert_eq!(got(Some("user.slice::my.slice")), "/user.slice/my.slice");
        assert!(locate(sd, Some("/plain/path"), "c1").is_err());
        assert!(locate(sd, Some("a--b.slice:p:n"), "c1").is_err());
        assert!(locate(sd, Some("a.scope:p:n"), "c1").is_err());
        assert!(locate(sd, Some("a.slice:p:"), "c1").is_err());
    }

    #[test]
    fn slice_expansion() {
        assert_eq!(expand_slice("system.slice").unwrap(), "/system.slice");
        assert_eq!(expand_slice("a-b.slice").unwrap(), "/a.slice/a-b.slice");
        assert_eq!(expand_slice("-.slice").unwrap(), "");
        assert!(expand_slice("-a.slice").is_err());
        assert!(expand_slice("a-.slice").is_err());
        assert!(expand_slice("a/b.slice").is_err());
    }
}
