//! The `options` of a spec mount, sorted into what each kernel call needs.
//!
//! Theory of operation: one pass over the option strings (`mount(8)` names, as runc accepts
//! them) fills a [`MountOptions`]:
//! - per-mount attributes (`ro`/`rw`, `nosuid`, `nodev`, `noexec`, the atime modes,
//!   `nosymfollow` and their opposites) as `MOUNT_ATTR_*` set/clear bits. A new filesystem gets
//!   them as `MS_*` flags of `mount(2)`; a bind gets them through `mount_setattr` on the
//!   detached clone, which changes only what was asked (the source's other flags, including
//!   the ones a user namespace locks, stay);
//! - superblock flags (`sync`, `dirsync`, `mand`, `lazytime`, `silent`, `iversion`) for new
//!   filesystems;
//! - the recursive variants (`rro`, `rnosuid`, `ratime`, ...) as bits for `mount_setattr` with
//!   `AT_RECURSIVE`;
//! - the propagation (`private`, `rshared`, ...; the last one wins);
//! - `bind`/`rbind`, and `tmpcopyup` (runc's extension, see [`super::copyup`]);
//! - everything else, comma-joined, as the filesystem's data string (`mode=755`, `size=64m`...).
//!
//! Privileges: none (pure). Tests: below.
use nix::mount::MsFlags;
use pier_sys::mount::{
    MOUNT_ATTR_ATIME_MASK, MOUNT_ATTR_NOATIME, MOUNT_ATTR_NODEV, MOUNT_ATTR_NODIRATIME,
    MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NOSYMFOLLOW, MOUNT_ATTR_RDONLY,
    MOUNT_ATTR_RELATIME, MOUNT_ATTR_STRICTATIME,
};

/// A propagation type with its recursion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Propagation {
    /// One of MS_PRIVATE, MS_SHARED, MS_SLAVE, MS_UNBINDABLE.
    pub kind: MsFlags,
    /// The `r` variant: applies to the whole tree.
    pub recursive: bool,
}

impl Propagation {
    /// Parses `private`, `rprivate`, `shared`, `rshared`, `slave`, `rslave`, `unbindable`,
    /// `runbindable`.
    pub fn parse(s: &str) -> Option<Self> {
        let (recursive, base) = match s.strip_prefix('r') {
            Some(rest) if rest != "o" && rest != "w" => (true, rest),
            _ => (false, s),
        };
        let kind = match base {
            "private" => MsFlags::MS_PRIVATE,
            "shared" => MsFlags::MS_SHARED,
            "slave" => MsFlags::MS_SLAVE,
            "unbindable" => MsFlags::MS_UNBINDABLE,
            _ => return None,
        };
        Some(Self { kind, recursive })
    }

    /// The option's spelling (`rshared`, `private`, ...).
    pub fn name(self) -> &'static str {
        match (self.kind, self.recursive) {
            (MsFlags::MS_SHARED, true) => "rshared",
            (MsFlags::MS_SHARED, false) => "shared",
            (MsFlags::MS_SLAVE, true) => "rslave",
            (MsFlags::MS_SLAVE, false) => "slave",
            (MsFlags::MS_UNBINDABLE, true) => "runbindable",
            (MsFlags::MS_UNBINDABLE, false) => "unbindable",
            (_, true) => "rprivate",
            (_, false) => "private",
        }
    }

    /// The flags for `mount(NULL, target, NULL, flags, NULL)`.
    pub fn ms_flags(self) -> MsFlags {
        if self.recursive {
            self.kind | MsFlags::MS_REC
        } else {
            self.kind
        }
    }
}

/// Set and clear bits in the `MOUNT_ATTR_*` space.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Attrs {
    pub set: u64,
    pub clr: u64,
}

impl Attrs {
    fn set(&mut self, bit: u64) {
        self.set |= bit;
        self.clr &= !bit;
    }

    fn clear(&mut self, bit: u64) {
        self.clr |= bit;
        self.set &= !bit;
    }

    fn atime(&mut self, mode: u64) {
        self.clr |= MOUNT_ATTR_ATIME_MASK;
        self.set = (self.set & !MOUNT_ATTR_ATIME_MASK) | mode;
    }

    pub fn is_empty(&self) -> bool {
        self.set == 0 && self.clr == 0
    }

    /// The `MS_*` flags of `mount(2)` for a new filesystem with these attributes.
    pub fn ms_flags(&self) -> MsFlags {
        let mut f = MsFlags::empty();
        for (bit, flag) in [
            (MOUNT_ATTR_RDONLY, MsFlags::MS_RDONLY),
            (MOUNT_ATTR_NOSUID, MsFlags::MS_NOSUID),
            (MOUNT_ATTR_NODEV, MsFlags::MS_NODEV),
            (MOUNT_ATTR_NOEXEC, MsFlags::MS_NOEXEC),
            (MOUNT_ATTR_NODIRATIME, MsFlags::MS_NODIRATIME),
            (
                MOUNT_ATTR_NOSYMFOLLOW,
                MsFlags::from_bits_retain(libc::MS_NOSYMFOLLOW),
            ),
        ] {
            if self.set & bit != 0 {
                f |= flag;
            }
        }
        if self.clr & MOUNT_ATTR_ATIME_MASK != 0 {
            f |= match self.set & MOUNT_ATTR_ATIME_MASK {
                MOUNT_ATTR_NOATIME => MsFlags::MS_NOATIME,
                MOUNT_ATTR_STRICTATIME => MsFlags::MS_STRICTATIME,
                _ => MsFlags::MS_RELATIME,
            };
        }
        f
    }

    /// Applies a per-mount option; false if `name` is not one.
    fn apply(&mut self, name: &str) -> bool {
        match name {
            "ro" => self.set(MOUNT_ATTR_RDONLY),
            "rw" => self.clear(MOUNT_ATTR_RDONLY),
            "nosuid" => self.set(MOUNT_ATTR_NOSUID),
            "suid" => self.clear(MOUNT_ATTR_NOSUID),
            "nodev" => self.set(MOUNT_ATTR_NODEV),
            "dev" => self.clear(MOUNT_ATTR_NODEV),
            "noexec" => self.set(MOUNT_ATTR_NOEXEC),
            "exec" => self.clear(MOUNT_ATTR_NOEXEC),
            "nodiratime" => self.set(MOUNT_ATTR_NODIRATIME),
            "diratime" => self.clear(MOUNT_ATTR_NODIRATIME),
            "nosymfollow" => self.set(MOUNT_ATTR_NOSYMFOLLOW),
            "symfollow" => self.clear(MOUNT_ATTR_NOSYMFOLLOW),
            "noatime" => self.atime(MOUNT_ATTR_NOATIME),
            "atime" | "relatime" | "nostrictatime" => self.atime(MOUNT_ATTR_RELATIME),
            "strictatime" | "norelatime" => self.atime(MOUNT_ATTR_STRICTATIME),
            _ => return false,
        }
        true
    }
}

/// Superblock flags that only a new filesystem takes.
fn sb_flag(name: &str) -> Option<(MsFlags, bool)> {
    Some(match name {
        "sync" => (MsFlags::MS_SYNCHRONOUS, true),
        "async" => (MsFlags::MS_SYNCHRONOUS, false),
        "dirsync" => (MsFlags::MS_DIRSYNC, true),
        "mand" => (MsFlags::MS_MANDLOCK, true),
        "nomand" => (MsFlags::MS_MANDLOCK, false),
        "lazytime" => (MsFlags::MS_LAZYTIME, true),
        "nolazytime" => (MsFlags::MS_LAZYTIME, false),
        "silent" => (MsFlags::MS_SILENT, true),
        "loud" => (MsFlags::MS_SILENT, false),
        "iversion" => (MsFlags::MS_I_VERSION, true),
        "noiversion" => (MsFlags::MS_I_VERSION, false),
        "defaults" => (MsFlags::empty(), true),
        _ => return None,
    })
}

/// One spec mount's options, sorted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MountOptions {
    /// `bind` or `rbind` was given.
    pub bind: bool,
    /// `rbind`: the bind takes the submounts along.
    pub rbind: bool,
    /// Per-mount attributes (top mount only).
    pub attrs: Attrs,
    /// Attributes for the whole tree (`rro`, `rnosuid`, ...).
    pub rec_attrs: Attrs,
    /// Superblock flags for a new filesystem.
    pub sb_flags: MsFlags,
    /// The last propagation option.
    pub propagation: Option<Propagation>,
    /// Options the kernel does not take as flags: the filesystem's data.
    pub data: String,
    /// An option pier recognises but does not support (`idmap`, `ridmap`).
    pub unsupported: Option<String>,
    /// `tmpcopyup`: a tmpfs starts with a copy of the directory it covers.
    pub copy_up: bool,
}

impl MountOptions {
    /// Sorts `options` (a spec mount's `options`).
    pub fn parse(options: &[String]) -> Self {
        let mut o = Self {
            bind: false,
            rbind: false,
            attrs: Attrs::default(),
            rec_attrs: Attrs::default(),
            sb_flags: MsFlags::empty(),
            propagation: None,
            data: String::new(),
            unsupported: None,
            copy_up: false,
        };
        for opt in options {
            let opt = opt.as_str();
            if o.attrs.apply(opt) {
                continue;
            }
            if let Some((flag, on)) = sb_flag(opt) {
                o.sb_flags.set(flag, on);
                continue;
            }
            if let Some(p) = Propagation::parse(opt) {
                o.propagation = Some(p);
                continue;
            }
            match opt {
                "bind" => o.bind = true,
                "rbind" => (o.bind, o.rbind) = (true, true),
                "idmap" | "ridmap" => o.unsupported = Some(opt.to_string()),
                "tmpcopyup" => o.copy_up = true,
                "notmpcopyup" => o.copy_up = false,
                "remount" | "" => {}
                _ => {
                    let is_rec = opt.strip_prefix('r').is_some_and(|r| o.rec_attrs.apply(r));
                    if !is_rec {
                        if !o.data.is_empty() {
                            o.data.push(',');
                        }
                        o.data.push_str(opt);
                    }
                }
            }
        }
        o
    }

    /// `mount(2)` flags for a new filesystem.
    pub fn fs_flags(&self) -> MsFlags {
        self.attrs.ms_flags() | self.sb_flags
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(opts: &[&str]) -> MountOptions {
        MountOptions::parse(&opts.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn docker_dev_tmpfs() {
        let o = parse(&["nosuid", "strictatime", "mode=755", "size=65536k"]);
        assert!(!o.bind);
        assert_eq!(o.fs_flags(), MsFlags::MS_NOSUID | MsFlags::MS_STRICTATIME);
        assert_eq!(o.data, "mode=755,size=65536k");
        assert_eq!(o.propagation, None);
    }

    #[test]
    fn rbind_with_recursive_read_only_and_propagation() {
        let o = parse(&["rbind", "rro", "nosuid", "rprivate", "rnoexec"]);
        assert!(o.bind && o.rbind);
        assert_eq!(o.attrs.set, MOUNT_ATTR_NOSUID);
        assert_eq!(o.rec_attrs.set, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOEXEC);
        assert_eq!(
            o.propagation,
            Some(Propagation {
                kind: MsFlags::MS_PRIVATE,
                recursive: true
            })
        );
        assert!(o.data.is_empty());
    }

    #[test]
    fn later_options_override_earlier_ones() {
        let o = parse(&["bind", "ro", "rw", "noatime", "relatime"]);
        assert_eq!(o.attrs.set, MOUNT_ATTR_RELATIME);
        assert_eq!(o.attrs.clr, MOUNT_ATTR_RDONLY | MOUNT_ATTR_ATIME_MASK);
        assert_eq!(o.fs_flags(), MsFlags::MS_RELATIME);
    }

    #[test]
    fn ro_and_rw_are_not_propagation_or_recursive_words() {
        assert_eq!(Propagation::parse("ro"), None);
        assert_eq!(Propagation::parse("rw"), None);
        let o = parse(&["ro"]);
        assert_eq!(o.rec_attrs, Attrs::default());
        assert_eq!(o.fs_flags(), MsFlags::MS_RDONLY);
    }

    #[test]
    fn unknown_words_become_data_and_idmap_is_flagged() {
        let o = parse(&[
            "newinstance",
            "ptmxmode=0666",
            "idmap",
            "gid=5",
            "tmpcopyup",
        ]);
        assert_eq!(o.data, "newinstance,ptmxmode=0666,gid=5");
        assert!(o.copy_up);
        assert_eq!(o.unsupported.as_deref(), Some("idmap"));
    }

    #[test]
    fn superblock_flags() {
        let o = parse(&["sync", "dirsync", "async"]);
        assert_eq!(o.sb_flags, MsFlags::MS_DIRSYNC);
    }
}
