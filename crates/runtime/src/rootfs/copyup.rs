//! `tmpcopyup` (runc's and crun's mount extension, which Podman sets for `--tmpfs`): a tmpfs
//! mounted over a directory of the image starts with a copy of that directory.
//!
//! Theory of operation: the destination fd was opened before the tmpfs went on top of it, so it
//! still reaches the image's directory underneath; the copy walks it with `*at` calls, never
//! following symlinks (`O_NOFOLLOW`, `AT_SYMLINK_NOFOLLOW`), and recreates directories, regular
//! files, symlinks, fifos and device nodes with their mode and owner in the new tmpfs. Depth
//! is bounded so that a pathological image cannot exhaust the stack.
//!
//! Privileges: those of creating the entries (CAP_MKNOD for device nodes, CAP_CHOWN).
//! Tests: `tests/priv_rootfs.rs`.
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, readlinkat, OFlag};
use nix::sys::stat::{fstatat, mkdirat, mknodat, umask, FileStat, Mode, SFlag};
use nix::unistd::{fchownat, symlinkat, FchownatFlags, Gid, Uid};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

const MAX_DEPTH: u32 = 64;

/// Copies the contents of directory `from` into directory `to`, modes exact (umask 0 meanwhile).
pub(crate) fn copy_dir(from: BorrowedFd, to: BorrowedFd) -> io::Result<()> {
    let old = umask(Mode::empty());
    let result = copy_level(from, to, MAX_DEPTH);
    umask(old);
    result
}

fn copy_level(from: BorrowedFd, to: BorrowedFd, depth: u32) -> io::Result<()> {
    if depth == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "directory tree too deep",
        ));
    }
    let rd = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut dir = Dir::openat(from, ".", rd, Mode::empty())?;
    for entry in dir.iter() {
        let entry = entry?;
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        copy_entry(from, to, name, depth)?;
    }
    Ok(())
}

fn copy_entry(from: BorrowedFd, to: BorrowedFd, name: &CStr, depth: u32) -> io::Result<()> {
    let st = fstatat(from, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW)?;
    let mode = Mode::from_bits_truncate(st.st_mode & 0o7777);
    let kind = SFlag::from_bits_truncate(st.st_mode & libc::S_IFMT);
    let nofollow = OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    match kind {
        SFlag::S_IFDIR => {
            mkdirat(to, name, mode)?;
            let src = openat(
                from,
                name,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | nofollow,
                Mode::empty(),
            )?;
            let dst = openat(
                to,
                name,
                OFlag::O_PATH | OFlag::O_DIRECTORY | nofollow,
                Mode::empty(),
            )?;
            copy_level(src.as_fd(), dst.as_fd(), depth - 1)?;
        }
        SFlag::S_IFREG => {
            let src = openat(from, name, OFlag::O_RDONLY | nofollow, Mode::empty())?;
            let create = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | nofollow;
            let dst = openat(to, name, create, mode)?;
            io::copy(&mut std::fs::File::from(src), &mut std::fs::File::from(dst))?;
        }
        SFlag::S_IFLNK => symlinkat(readlinkat(from, name)?.as_os_str(), to, name)?,
        _ => mknodat(to, name, kind, mode, st.st_rdev)?,
    }
    own_like(to, name, &st)
}

fn own_like(to: BorrowedFd, name: &CStr, st: &FileStat) -> io::Result<()> {
    let (uid, gid) = (
        Some(Uid::from_raw(st.st_uid)),
        Some(Gid::from_raw(st.st_gid)),
    );
    match fchownat(to, name, uid, gid, FchownatFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(()) | Err(Errno::EINVAL) => Ok(()), // EINVAL: an id not mapped in the user namespace
        Err(e) => Err(e.into()),
    }
}
