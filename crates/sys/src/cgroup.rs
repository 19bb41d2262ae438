//! bpf(2) for cgroup device programs: load a BPF_PROG_TYPE_CGROUP_DEVICE program, attach it to a
//! cgroup2 directory, list and detach the ones attached there.
//!
//! Theory: cgroup2 has no devices.allow/deny files; the kernel asks the programs attached to a
//! task's cgroup2 directory (type BPF_CGROUP_DEVICE) on every device open and mknod. pier-cgroups
//! builds the program from the spec's rules; this module only moves it through bpf(2). Each
//! `bpf_attr` variant is a `#[repr(C)]` prefix of the kernel's union: the kernel accepts a
//! shorter attr (it zero-extends), so only the fields used are declared.
//!
//! Privileges: CAP_BPF + CAP_NET_ADMIN (root) for load; write access to the cgroup for attach.
//! Tests: crates/cgroups/tests/priv_cgroups.rs (a device program enforced on a real cgroup).
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_DETACH: libc::c_long = 9;
const BPF_PROG_GET_FD_BY_ID: libc::c_long = 13;
const BPF_PROG_QUERY: libc::c_long = 16;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// One eBPF instruction, as the kernel lays it out.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BpfInsn {
    /// Opcode.
    pub code: u8,
    /// Destination register in the low nibble, source register in the high nibble.
    pub regs: u8,
    /// Jump offset or memory offset.
    pub off: i16,
    /// Immediate.
    pub imm: i32,
}

#[repr(C)]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
}

#[repr(C)]
#[derive(Default)]
struct AttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
}

#[repr(C)]
#[derive(Default)]
struct QueryAttr {
    target_fd: u32,
    attach_type: u32,
    query_flags: u32,
    attach_flags: u32,
    prog_ids: u64,
    prog_cnt: u32,
    pad: u32,
}

#[repr(C)]
#[derive(Default)]
struct GetFdAttr {
    prog_id: u32,
    next_id: u32,
    open_flags: u32,
}

/// bpf(cmd, attr, sizeof attr).
pub(crate) fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a live, exclusively borrowed #[repr(C)] prefix of `union bpf_attr` and
    // the size passed is exactly its size, so the kernel reads and writes only inside it; any
    // pointers inside it were set by the caller to buffers that outlive this call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *mut T as *mut libc::c_void,
            std::mem::size_of::<T>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Takes ownership of a new fd the kernel returned.
pub(crate) fn owned(fd: libc::c_long) -> OwnedFd {
    // SAFETY: bpf(2) returned this fd just now for us alone; nothing else owns or closes it.
    unsafe { OwnedFd::from_raw_fd(fd as i32) }
}

/// Loads a cgroup device program; on a verifier rejection the error carries the verifier log.
pub fn load_device_program(insns: &[BpfInsn], license: &CStr) -> io::Result<OwnedFd> {
    let mut log = vec![0u8; 64 * 1024];
    let mut attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        log_level: 1,
        log_size: log.len() as u32,
        log_buf: log.as_mut_ptr() as u64,
        ..ProgLoadAttr::default()
    };
    attr.prog_name[..11].copy_from_slice(b"pier_device");
    match bpf(BPF_PROG_LOAD, &mut attr) {
        Ok(fd) => Ok(owned(fd)),
        Err(e) => {
            let end = log.iter().position(|b| *b == 0).unwrap_or(log.len());
            let text = String::from_utf8_lossy(&log[..end]);
            let last = text.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
            Err(io::Error::new(e.kind(), format!("{e} (verifier: {last})")))
        }
    }
}

/// Attaches a device program to a cgroup2 directory, allowing other programs beside it.
pub fn attach_device_program(cgroup: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..AttachAttr::default()
    };
    bpf(BPF_PROG_ATTACH, &mut attr).map(drop)
}

/// Detaches a device program from a cgroup2 directory.
pub fn detach_device_program(cgroup: BorrowedFd<'_>, prog: BorrowedFd<'_>) -> io::Result<()> {
    let mut attr = AttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        ..AttachAttr::default()
    };
    bpf(BPF_PROG_DETACH, &mut attr).map(drop)
}

/// Ids of the device programs attached directly to a cgroup2 directory.
pub fn device_program_ids(cgroup: BorrowedFd<'_>) -> io::Result<Vec<u32>> {
    let mut ids = vec![0u32; 64];
    let mut attr = QueryAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        prog_ids: ids.as_mut_ptr() as u64,
        prog_cnt: ids.len() as u32,
        ..QueryAttr::default()
    };
    bpf(BPF_PROG_QUERY, &mut attr)?;
    ids.truncate(attr.prog_cnt as usize);
    Ok(ids)
}

/// An fd for a loaded program, by id.
pub fn program_by_id(id: u32) -> io::Result<OwnedFd> {
    let mut attr = GetFdAttr {
        prog_id: id,
        ..GetFdAttr::default()
    };
    bpf(BPF_PROG_GET_FD_BY_ID, &mut attr).map(owned)
}
