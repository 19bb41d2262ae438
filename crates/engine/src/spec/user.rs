//! `-u USER[:GROUP]` resolved the way runc's libcontainer/user does it for Docker, against the
//! root's own /etc/passwd and /etc/group (the host's for the `host` root).
//!
//! Theory of operation: a name must be in passwd (a number need not be: it then gets gid 0 and
//! home `/`); the primary group is the passwd entry's unless GROUP names one (a name must be in
//! /etc/group); supplementary groups are the /etc/group entries listing the user by name, and
//! only when no GROUP was given ("supplementary groups only make sense in the implicit form").
//! The default user is uid 0 looked up the same way. Pure text parsing; tests below.
use std::path::Path;

use super::SpecError;

/// The process's credentials and home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct User {
    pub uid: u32,
    pub gid: u32,
    pub additional_gids: Vec<u32>,
    pub home: String,
}

/// One passwd line: name, uid, gid, home.
struct Passwd {
    name: String,
    uid: u32,
    gid: u32,
    home: String,
}

/// Resolves `spec` (None = root) against `<etc_root>/etc/passwd` and `<etc_root>/etc/group`.
pub(super) fn resolve(spec: Option<&str>, etc_root: &Path) -> Result<User, SpecError> {
    let passwd = std::fs::read_to_string(etc_root.join("etc/passwd")).unwrap_or_default();
    let group = std::fs::read_to_string(etc_root.join("etc/group")).unwrap_or_default();
    resolve_in(spec.unwrap_or("0"), &passwd, &group)
}

fn resolve_in(spec: &str, passwd: &str, group: &str) -> Result<User, SpecError> {
    let fail = |reason: String| SpecError::User {
        user: spec.to_string(),
        reason,
    };
    let (user_part, group_part) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let entry = passwd_entries(passwd).find(|p| match user_part.parse::<u32>() {
        Ok(uid) => p.uid == uid,
        Err(_) => p.name == user_part,
    });
    let (uid, mut gid, home, name) = match (entry, user_part.parse::<u32>()) {
        (Some(p), _) => (p.uid, p.gid, p.home, Some(p.name)),
        (None, Ok(uid)) => (uid, 0, "/".to_string(), None),
        (None, Err(_)) => {
            return Err(fail(format!(
                "unable to find user {user_part}: no matching entries in passwd file"
            )))
        }
    };
    let mut additional_gids = Vec::new();
    match group_part {
        Some(g) => gid = group_id(g, group).map_err(fail)?,
        None => {
            if let Some(name) = name {
                additional_gids = member_groups(&name, group);
            }
        }
    }
    Ok(User {
        uid,
        gid,
        additional_gids,
        home,
    })
}

fn passwd_entries(text: &str) -> impl Iterator<Item = Passwd> + '_ {
    text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        if f.len() < 6 {
            return None;
        }
        Some(Passwd {
            name: f[0].to_string(),
            uid: f[2].parse().ok()?,
            gid: f[3].parse().ok()?,
            home: f[5].to_string(),
        })
    })
}

/// (name, gid, members) of each /etc/group line.
fn group_entries(text: &str) -> impl Iterator<Item = (&str, u32, &str)> {
    text.lines().filter_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 4).then_some(())?;
        Some((f[0], f[2].parse().ok()?, f[3]))
    })
}

fn group_id(group: &str, text: &str) -> Result<u32, String> {
    if let Ok(gid) = group.parse() {
        return Ok(gid);
    }
    group_entries(text)
        .find(|(name, _, _)| *name == group)
        .map(|(_, gid, _)| gid)
        .ok_or_else(|| format!("unable to find group {group}: no matching entries in group file"))
}

fn member_groups(user: &str, text: &str) -> Vec<u32> {
    group_entries(text)
        .filter(|(_, _, members)| members.split(',').any(|m| m == user))
        .map(|(_, gid, _)| gid)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
        daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n\
        www-data:x:33:33:www-data:/var/www:/usr/sbin/nologin\n\
        broken line\n";
    const GROUP: &str = "root:x:0:\nadm:x:4:www-data,alice\nwww-data:x:33:\nstaff:x:50:www-data\n";

    fn user(spec: &str) -> Result<User, SpecError> {
        resolve_in(spec, PASSWD, GROUP)
    }

    #[test]
    fn root_by_default() {
        let u = user("0").unwrap();
        assert_eq!((u.uid, u.gid, u.home.as_str()), (0, 0, "/root"));
        assert!(u.additional_gids.is_empty());
    }

    #[test]
    fn a_name_takes_its_entry_and_its_groups() {
        let u = user("www-data").unwrap();
        assert_eq!((u.uid, u.gid, u.home.as_str()), (33, 33, "/var/www"));
        assert_eq!(u.additional_gids, [4, 50]);
    }

    #[test]
    fn a_given_group_replaces_the_primary_and_the_supplementary_ones() {
        let u = user("www-data:staff").unwrap();
        assert_eq!((u.uid, u.gid), (33, 50));
        assert!(u.additional_gids.is_empty());
        assert_eq!(user("33:7").unwrap().gid, 7);
    }

    #[test]
    fn an_unknown_number_is_fine_an_unknown_name_is_not() {
        let u = user("1234").unwrap();
        assert_eq!((u.uid, u.gid, u.home.as_str()), (1234, 0, "/"));
        let err = user("nobody-here").unwrap_err().to_string();
        assert_eq!(
            err,
            "-u nobody-here: unable to find user nobody-here: no matching entries in passwd file"
        );
        let err = user("root:wheel").unwrap_err().to_string();
        assert!(err.contains("unable to find group wheel"), "{err}");
    }
}
