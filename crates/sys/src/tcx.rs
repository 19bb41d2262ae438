//! bpf(2) for tcx links: attach a loaded sched_cls program to a network interface's ingress
//! hook as a bpf_link, pin that link in bpffs, and open pinned objects.
//!
//! Theory: tcx (Linux 6.6+) attaches tc programs through bpf_link instead of a clsact qdisc
//! and a netlink filter. A link pinned in bpffs keeps the program attached after the process
//! that made it exits, until the pin is removed and no fd holds it, or the interface goes away
//! (the link then stays, detached). libbpf-rs 0.27 has no tcx attach, so pier-bpf calls these.
//! The attr structs are `#[repr(C)]` prefixes of the kernel's `union bpf_attr` (see
//! cgroup.rs for why a prefix is enough).
//!
//! Privileges: CAP_BPF + CAP_NET_ADMIN (root). Tests: crates/publish/tests/priv_engines_remote.rs.
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::cgroup::{bpf, owned};

const BPF_OBJ_PIN: libc::c_long = 6;
const BPF_OBJ_GET: libc::c_long = 7;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_TCX_INGRESS: u32 = 46;

#[repr(C)]
#[derive(Default)]
struct ObjAttr {
    pathname: u64,
    bpf_fd: u32,
    file_flags: u32,
}

#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
    relative_fd: u32,
    pad: u32,
    expected_revision: u64,
}

fn c_path(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// Attaches the sched_cls program `prog` to the ingress of interface `ifindex` (tcx, appended
/// after programs already there); the returned link fd keeps it attached.
pub fn attach_ingress(prog: BorrowedFd<'_>, ifindex: u32) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: prog.as_raw_fd() as u32,
        target_ifindex: ifindex,
        attach_type: BPF_TCX_INGRESS,
        ..Default::default()
    };
    bpf(BPF_LINK_CREATE, &mut attr).map(owned)
}

/// Pins the BPF object behind `fd` (a program, map or link) at `path` on a bpffs.
pub fn pin(fd: BorrowedFd<'_>, path: &Path) -> io::Result<()> {
    let path = c_path(path)?;
    let mut attr = ObjAttr {
        pathname: path.as_ptr() as u64,
        bpf_fd: fd.as_raw_fd() as u32,
        ..Default::default()
    };
    bpf(BPF_OBJ_PIN, &mut attr).map(drop)
}

/// Opens the BPF object pinned at `path`.
pub fn open_pinned(path: &Path) -> io::Result<OwnedFd> {
    let path = c_path(path)?;
    let mut attr = ObjAttr {
        pathname: path.as_ptr() as u64,
        ..Default::default()
    };
    bpf(BPF_OBJ_GET, &mut attr).map(owned)
}
