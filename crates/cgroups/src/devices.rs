//! Device rules on cgroup2: the spec's rules compiled to a BPF_CGROUP_DEVICE program.
//!
//! Theory: cgroup2 has no devices.allow/deny; the kernel runs the programs attached to a task's
//! cgroup2 directory on every device open and mknod with (type, access, major, minor) and
//! refuses when one returns 0. The program keeps v1's meaning of an ordered rule list: the
//! *last* rule that matches decides, so the rules are emitted in reverse, each as a block that
//! falls through to the next when the request does not match, and a request no rule matches is
//! allowed (a v1 cgroup without rules allows everything; specs start with "deny all").
//! An allow rule matches when the requested access is within its access; a deny rule when
//! they share any access bit (denying `r` on a device denies a read-write open).
//! Updating replaces the program: the new one is attached next to the old (ALLOW_MULTI, so for
//! a moment both must agree, never looser), then the old ones are detached.
//! Where neither a v1 devices hierarchy nor cgroup2 exists, `check_unenforced` lets the
//! default set through (deny all, then allows) and refuses any other deny rule.
//!
//! Privileges: root (CAP_BPF, CAP_NET_ADMIN, write access to the cgroup).
//! Tests: unit tests of the emitted code below; crates/cgroups/tests/priv_cgroups.rs runs a
//! program on a real cgroup.
use crate::convert::device_rule;
use crate::Error;
use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};
use pier_sys::cgroup::{
    attach_device_program, detach_device_program, device_program_ids, load_device_program,
    program_by_id, BpfInsn,
};
use std::os::fd::AsFd;
use std::path::Path;

/// Context layout (struct bpf_cgroup_dev_ctx): access_type = access << 16 | type, major, minor.
const TYPE_BLOCK: i32 = 1;
const TYPE_CHAR: i32 = 2;
const ACC_MKNOD: i32 = 1;
const ACC_READ: i32 = 2;
const ACC_WRITE: i32 = 4;
const ACC_ALL: i32 = ACC_MKNOD | ACC_READ | ACC_WRITE;

/// Registers: r1 = context (then scratch), r2 = type, r3 = access, r4 = major, r5 = minor.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    BpfInsn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}
fn ldxw(dst: u8, src: u8, off: i16) -> BpfInsn {
    insn(0x61, dst, src, off, 0)
}
fn and_k(dst: u8, imm: i32) -> BpfInsn {
    insn(0x57, dst, 0, 0, imm)
}
fn rsh_k(dst: u8, imm: i32) -> BpfInsn {
    insn(0x77, dst, 0, 0, imm)
}
fn mov_k(dst: u8, imm: i32) -> BpfInsn {
    insn(0xb7, dst, 0, 0, imm)
}
fn mov_x(dst: u8, src: u8) -> BpfInsn {
    insn(0xbf, dst, src, 0, 0)
}
/// Conditional jumps to the end of the current block (offset patched later).
fn jne_k(dst: u8, imm: i32) -> BpfInsn {
    insn(0x55, dst, 0, 0, imm)
}
fn jeq_k(dst: u8, imm: i32) -> BpfInsn {
    insn(0x15, dst, 0, 0, imm)
}
fn jset_k(dst: u8, imm: i32) -> BpfInsn {
    insn(0x45, dst, 0, 0, imm)
}
fn exit() -> BpfInsn {
    insn(0x95, 0, 0, 0, 0)
}

/// `rwm` → access bits (empty or missing = all).
fn access_bits(rule: &LinuxDeviceCgroup) -> i32 {
    let text = rule.access().as_deref().unwrap_or("");
    let bits = text.chars().fold(0, |acc, c| match c {
        'r' => acc | ACC_READ,
        'w' => acc | ACC_WRITE,
        'm' => acc | ACC_MKNOD,
        _ => acc,
    });
    if bits == 0 {
        ACC_ALL
    } else {
        bits
    }
}

/// The block for one rule: jumps past itself unless the request matches, else returns.
fn rule_block(rule: &LinuxDeviceCgroup) -> Option<Vec<BpfInsn>> {
    let mut block = Vec::new();
    match rule.typ().unwrap_or_default() {
        LinuxDeviceType::A => {}
        LinuxDeviceType::B => block.push(jne_k(2, TYPE_BLOCK)),
        LinuxDeviceType::C | LinuxDeviceType::U => block.push(jne_k(2, TYPE_CHAR)),
        LinuxDeviceType::P => return None,
    }
    let bits = access_bits(rule);
    if bits != ACC_ALL && rule.allow() {
        block.push(jset_k(3, !bits & ACC_ALL));
    } else if bits != ACC_ALL {
        block.extend([mov_x(1, 3), and_k(1, bits), jeq_k(1, 0)]);
    }
    if rule.typ().unwrap_or_default() != LinuxDeviceType::A {
        for (reg, num) in [(4, rule.major()), (5, rule.minor())] {
            if let Some(n) = num.filter(|n| *n >= 0) {
                block.push(jne_k(reg, n as i32));
            }
        }
    }
    block.extend([mov_k(0, i32::from(rule.allow())), exit()]);
    let len = block.len();
    for (i, ins) in block.iter_mut().enumerate() {
        if is_jump(ins) {
            ins.off = (len - i - 1) as i16;
        }
    }
    Some(block)
}

/// The whole program for an ordered rule list.
pub fn program(rules: &[LinuxDeviceCgroup]) -> Vec<BpfInsn> {
    let mut code = vec![
        ldxw(2, 1, 0),
        and_k(2, 0xffff),
        ldxw(3, 1, 0),
        rsh_k(3, 16),
        ldxw(4, 1, 4),
        ldxw(5, 1, 8),
    ];
    for block in rules.iter().rev().filter_map(rule_block) {
        let matches_all = !block.iter().any(is_jump);
        code.extend(block);
        if matches_all {
            // Nothing after a rule that matches every request is reachable (the verifier
            // refuses unreachable code).
            return code;
        }
    }
    code.extend([mov_k(0, 1), exit()]);
    code
}

fn is_jump(ins: &BpfInsn) -> bool {
    matches!(ins.code, 0x55 | 0x15 | 0x45)
}

/// Loads the program for `rules` and makes it the only device program of cgroup2 dir `dir`.
pub fn apply(dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<(), Error> {
    let fail = |step| {
        move |error| Error::Bpf {
            step,
            dir: dir.to_path_buf(),
            error,
        }
    };
    let prog = load_device_program(&program(rules), c"Apache-2.0")
        .map_err(fail("load the device program for"))?;
    let cgroup = std::fs::File::open(dir).map_err(|error| Error::Open {
        path: dir.to_path_buf(),
        error,
    })?;
    let old = device_program_ids(cgroup.as_fd()).map_err(fail("list device programs of"))?;
    attach_device_program(cgroup.as_fd(), prog.as_fd())
        .map_err(fail("attach the device program to"))?;
    for id in old {
        let old_prog = program_by_id(id).map_err(fail("open an old device program of"))?;
        detach_device_program(cgroup.as_fd(), old_prog.as_fd())
            .map_err(fail("detach an old device program from"))?;
    }
    Ok(())
}

/// For hosts that cannot enforce device rules at all (see header).
pub fn check_unenforced(rules: &[LinuxDeviceCgroup]) -> Result<(), Error> {
    for (i, rule) in rules.iter().enumerate() {
        let tolerated = rule.allow() || (i == 0 && device_rule(rule) == "a *:* rwm");
        if !tolerated {
            return Err(Error::DeviceRuleUnenforceable {
                rule: format!("deny {}", device_rule(rule)),
            });
        }
    }
    if rules.iter().any(|r| !r.allow()) {
        log::warn!("device rules are not enforced: no devices controller and no cgroup2 here");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxDeviceCgroupBuilder;

    fn rule(
        allow: bool,
        typ: LinuxDeviceType,
        major: i64,
        minor: i64,
        access: &str,
    ) -> LinuxDeviceCgroup {
        let b = LinuxDeviceCgroupBuilder::default()
            .allow(allow)
            .typ(typ)
            .access(access);
        let b = if major >= 0 { b.major(major) } else { b };
        let b = if minor >= 0 { b.minor(minor) } else { b };
        b.build().unwrap()
    }

    /// A tiny interpreter of exactly the instructions `program` emits.
    fn run(code: &[BpfInsn], typ: i32, access: i32, major: i32, minor: i32) -> i64 {
        let ctx = [((access << 16) | typ) as i64, major as i64, minor as i64];
        let mut r = [0i64; 11];
        let mut pc = 0usize;
        loop {
            let i = code[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            let imm = i64::from(i.imm);
            let mut jump = false;
            match i.code {
                0x61 => r[dst] = ctx[(i.off / 4) as usize] & 0xffff_ffff,
                0x57 => r[dst] &= imm,
                0x77 => r[dst] >>= imm,
                0xb7 => r[dst] = imm,
                0xbf => r[dst] = r[src],
                0x55 => jump = r[dst] != imm,
                0x15 => jump = r[dst] == imm,
                0x45 => jump = r[dst] & imm != 0,
                0x95 => return r[0],
                other => panic!("unexpected opcode {other:#x}"),
            }
            pc += 1 + if jump { i.off as usize } else { 0 };
        }
    }

    #[test]
    fn default_set_allows_listed_devices_only() {
        let code = program(&[
            rule(false, LinuxDeviceType::A, -1, -1, "rwm"),
            rule(true, LinuxDeviceType::C, 1, 3, "rwm"),
            rule(true, LinuxDeviceType::C, 136, -1, "rw"),
            rule(true, LinuxDeviceType::B, -1, -1, "m"),
        ]);
        assert_eq!(
            run(&code, TYPE_CHAR, ACC_READ | ACC_WRITE, 1, 3),
            1,
            "/dev/null"
        );
        assert_eq!(
            run(&code, TYPE_CHAR, ACC_READ, 1, 5),
            0,
            "/dev/zero is not listed"
        );
        assert_eq!(
            run(&code, TYPE_BLOCK, ACC_READ, 1, 3),
            0,
            "block 1:3 is not char 1:3"
        );
        assert_eq!(run(&code, TYPE_CHAR, ACC_WRITE, 136, 7), 1, "any pts");
        assert_eq!(
            run(&code, TYPE_CHAR, ACC_MKNOD, 136, 7),
            0,
            "pts allows rw, not m"
        );
        assert_eq!(
            run(&code, TYPE_BLOCK, ACC_MKNOD, 8, 0),
            1,
            "mknod of any block device"
        );
        assert_eq!(
            run(&code, TYPE_BLOCK, ACC_READ, 8, 0),
            0,
            "but not reading it"
        );
    }

    #[test]
    fn later_rules_win_and_no_rules_allow() {
        let code = program(&[
            rule(true, LinuxDeviceType::C, 1, 3, "rwm"),
            rule(false, LinuxDeviceType::C, 1, 3, "w"),
        ]);
        assert_eq!(run(&code, TYPE_CHAR, ACC_READ, 1, 3), 1);
        assert_eq!(run(&code, TYPE_CHAR, ACC_READ | ACC_WRITE, 1, 3), 0);
        assert_eq!(
            run(&code, TYPE_CHAR, ACC_READ, 4, 4),
            1,
            "unmatched is allowed"
        );
        assert_eq!(run(&program(&[]), TYPE_BLOCK, ACC_ALL, 8, 0), 1);
        let deny_all_last = program(&[
            rule(true, LinuxDeviceType::C, 1, 3, "rwm"),
            rule(false, LinuxDeviceType::A, -1, -1, "rwm"),
        ]);
        assert_eq!(
            deny_all_last.len(),
            8,
            "prologue and one block, nothing unreachable"
        );
        assert_eq!(run(&deny_all_last, TYPE_CHAR, ACC_READ, 1, 3), 0);
        let fifo_only = program(&[rule(false, LinuxDeviceType::P, -1, -1, "rwm")]);
        assert_eq!(
            fifo_only.len(),
            program(&[]).len(),
            "FIFO rules emit nothing"
        );
    }

    #[test]
    fn unenforced_hosts_take_only_the_default_set() {
        let default = [
            rule(false, LinuxDeviceType::A, -1, -1, "rwm"),
            rule(true, LinuxDeviceType::C, 1, 3, "rwm"),
        ];
        assert!(check_unenforced(&default).is_ok());
        let extra = [
            rule(true, LinuxDeviceType::C, 1, 3, "rwm"),
            rule(false, LinuxDeviceType::C, 10, 200, "rwm"),
        ];
        let err = check_unenforced(&extra).unwrap_err().to_string();
        assert!(err.contains("deny c 10:200 rwm"), "{err}");
    }
}
