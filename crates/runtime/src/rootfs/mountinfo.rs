//! `/proc/self/mountinfo`, read only where nothing cheaper answers the question (cgroup v1
//! hierarchies, the parent mount of a root with shared propagation).
//!
//! Theory of operation: `proc(5)` line format `id parent maj:min root mountpoint options
//! [optional fields...] - fstype source superoptions`; paths have space, tab, newline and
//! backslash octal-escaped. Privileges: none. Tests: below.
use std::io;
use std::path::{Path, PathBuf};

/// The fields of one mountinfo line pier uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry<'a> {
    /// Root of the mount within its filesystem (escaped form).
    pub root: &'a str,
    /// Where it is mounted (unescaped).
    pub mount_point: PathBuf,
    pub fstype: &'a str,
    pub super_options: &'a str,
}

/// Reads `/proc/self/mountinfo`.
pub(crate) fn read() -> std::io::Result<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
}

/// Parses the lines of `text`, skipping malformed ones.
pub(crate) fn entries(text: &str) -> impl Iterator<Item = Entry<'_>> {
    text.lines().filter_map(parse_line)
}

fn parse_line(line: &str) -> Option<Entry<'_>> {
    let (head, tail) = line.split_once(" - ")?;
    let mut head = head.split(' ');
    let root = head.nth(3)?;
    let mount_point = unescape(head.next()?);
    let mut tail = tail.split(' ');
    let fstype = tail.next()?;
    let super_options = tail.nth(1).unwrap_or("");
    Some(Entry {
        root,
        mount_point,
        fstype,
        super_options,
    })
}

/// Undoes the `\ooo` escapes of mountinfo paths.
pub(crate) fn unescape(s: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let escaped = (b[i] == b'\\')
            .then(|| b.get(i + 1..i + 4))
            .flatten()
            .and_then(|d| u8::from_str_radix(std::str::from_utf8(d).ok()?, 8).ok());
        match escaped {
            Some(c) => {
                out.push(c);
                i += 4;
            }
            None => {
                out.push(b[i]);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// The mount point of the mount that holds `path` (longest mount point that is a prefix).
pub(crate) fn mount_point_of(path: &Path) -> io::Result<PathBuf> {
    let text = read()?;
    let best = entries(&text)
        .map(|e| e.mount_point)
        .filter(|mp| path.starts_with(mp))
        .max_by_key(|mp| mp.as_os_str().len());
    Ok(best.unwrap_or_else(|| PathBuf::from("/")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lines_with_optional_fields_and_escapes() {
        let text = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:7 - cgroup cgroup rw,cpu\n\
                    41 31 0:38 / /a\\040b rw - cgroup2 cgroup2 rw\nbroken line\n";
        let e: Vec<_> = entries(text).collect();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].mount_point, PathBuf::from("/sys/fs/cgroup/cpu"));
        assert_eq!(
            (e[0].fstype, e[0].super_options, e[0].root),
            ("cgroup", "rw,cpu", "/")
        );
        assert_eq!(e[1].mount_point, PathBuf::from("/a b"));
        assert_eq!(unescape("/x\\134y\\999\\"), PathBuf::from("/x\\y\\999\\"));
    }
}
