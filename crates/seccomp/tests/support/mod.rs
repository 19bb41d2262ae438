//! Shared by tests/oracle.rs, benches/compile.rs and examples/filter_stats.rs: the same
//! profile handed to libseccomp the way runc and crun hand it over (one rule per name, rules
//! whose action is the default skipped), with the OCI rule for conditions on one argument
//! (ORed: one libseccomp rule per combination) and on different ones (ANDed).
#![allow(dead_code)]
use libseccomp::{
    ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall,
};
use oci_spec::runtime::{
    LinuxSeccomp, LinuxSeccompAction as Action, LinuxSeccompOperator as Op, LinuxSyscall,
};
use pier_seccomp::arch::Arch;
use pier_seccomp::bpf::Insn;
use pier_seccomp::syscall_number;
use std::io::{Read, Seek};

pub fn scmp_arch(a: Arch) -> ScmpArch {
    match a {
        Arch::X86_64 => ScmpArch::X8664,
        Arch::X86 => ScmpArch::X86,
        Arch::X32 => ScmpArch::X32,
    }
}

pub fn scmp_action(a: Action, errno: Option<u32>) -> ScmpAction {
    let data = errno.unwrap_or(1);
    match a {
        Action::ScmpActKill | Action::ScmpActKillThread => ScmpAction::KillThread,
        Action::ScmpActKillProcess => ScmpAction::KillProcess,
        Action::ScmpActTrap => ScmpAction::Trap,
        Action::ScmpActErrno => ScmpAction::Errno(data as i32),
        Action::ScmpActTrace => ScmpAction::Trace(data as u16),
        Action::ScmpActLog => ScmpAction::Log,
        Action::ScmpActNotify => ScmpAction::Notify,
        Action::ScmpActAllow => ScmpAction::Allow,
    }
}

pub fn arches(p: &LinuxSeccomp) -> Vec<Arch> {
    let list: Vec<Arch> = p
        .architectures()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(
            |a| match serde_json::to_value(a).unwrap().as_str().unwrap() {
                "SCMP_ARCH_X86" => Arch::X86,
                "SCMP_ARCH_X32" => Arch::X32,
                _ => Arch::X86_64,
            },
        )
        .collect();
    if list.is_empty() {
        vec![Arch::X86_64]
    } else {
        list
    }
}

pub fn theirs_nr(name: &str, arch: Arch) -> Option<u32> {
    let raw = ScmpSyscall::from_name_by_arch(name, scmp_arch(arch))
        .ok()?
        .as_raw_syscall();
    u32::try_from(raw).ok()
}

/// The profile without names whose numbers pier and libseccomp resolve differently.
pub fn agreed(p: &LinuxSeccomp) -> LinuxSeccomp {
    let all = [Arch::X86_64, Arch::X86, Arch::X32];
    let mut p = p.clone();
    let rules: Vec<LinuxSyscall> = p
        .syscalls()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|mut r| {
            let names = r
                .names()
                .iter()
                .filter(|n| all.iter().all(|&a| syscall_number(n, a) == theirs_nr(n, a)));
            r.set_names(names.cloned().collect());
            r
        })
        .collect();
    p.set_syscalls(Some(rules));
    p
}

/// One libseccomp condition list per choice of one condition per argument index.
pub fn dnf(rule: &LinuxSyscall) -> Vec<Vec<ScmpArgCompare>> {
    let mut groups: Vec<(usize, Vec<ScmpArgCompare>)> = Vec::new();
    for a in rule.args().as_deref().unwrap_or_default() {
        let op = match a.op() {
            Op::ScmpCmpNe => ScmpCompareOp::NotEqual,
            Op::ScmpCmpLt => ScmpCompareOp::Less,
            Op::ScmpCmpLe => ScmpCompareOp::LessOrEqual,
            Op::ScmpCmpEq => ScmpCompareOp::Equal,
            Op::ScmpCmpGe => ScmpCompareOp::GreaterEqual,
            Op::ScmpCmpGt => ScmpCompareOp::Greater,
            Op::ScmpCmpMaskedEq => ScmpCompareOp::MaskedEqual(a.value()),
        };
        let datum = if a.op() == Op::ScmpCmpMaskedEq {
            a.value_two().unwrap_or(0)
        } else {
            a.value()
        };
        let cmp = ScmpArgCompare::new(a.index() as u32, op, datum);
        match groups.iter_mut().find(|g| g.0 == a.index()) {
            Some(g) => g.1.push(cmp),
            None => groups.push((a.index(), vec![cmp])),
        }
    }
    groups
        .into_iter()
        .fold(vec![Vec::new()], |acc, (_, conds)| {
            acc.iter()
                .flat_map(|pre| conds.iter().map(move |c| [pre.clone(), vec![*c]].concat()))
                .collect()
        })
}

pub fn libseccomp_program(p: &LinuxSeccomp) -> Vec<Insn> {
    let default = scmp_action(p.default_action(), p.default_errno_ret());
    let mut ctx = ScmpFilterContext::new(default).unwrap();
    ctx.set_act_badarch(ScmpAction::KillProcess).unwrap();
    let list = arches(p);
    for a in &list {
        ctx.add_arch(scmp_arch(*a)).unwrap();
    }
    if !list.contains(&Arch::X86_64) {
        ctx.remove_arch(ScmpArch::X8664).unwrap();
    }
    let default_value = pier_value(p.default_action(), p.default_errno_ret());
    for rule in p.syscalls().as_deref().unwrap_or_default() {
        if pier_value(rule.action(), rule.errno_ret()) == default_value {
            continue;
        }
        let action = scmp_action(rule.action(), rule.errno_ret());
        for name in rule.names() {
            let Ok(sc) = ScmpSyscall::from_name(name) else {
                continue;
            };
            for conds in dnf(rule) {
                ctx.add_rule_conditional(action, sc, &conds)
                    .unwrap_or_else(|e| panic!("libseccomp refused {name} {conds:?}: {e}"));
            }
        }
    }
    let mut file = tempfile::tempfile().unwrap();
    ctx.export_bpf(&file).unwrap();
    let mut bytes = Vec::new();
    file.rewind().unwrap();
    file.read_to_end(&mut bytes).unwrap();
    bytes
        .chunks_exact(8)
        .map(|c| Insn {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect()
}

pub fn pier_value(a: Action, errno: Option<u32>) -> u32 {
    let data = errno.unwrap_or(1) & 0xffff;
    match a {
        Action::ScmpActKill | Action::ScmpActKillThread => 0,
        Action::ScmpActKillProcess => 0x8000_0000,
        Action::ScmpActTrap => 0x3_0000,
        Action::ScmpActErrno => 0x5_0000 | data,
        Action::ScmpActTrace => 0x7ff0_0000 | data,
        Action::ScmpActLog => 0x7ffc_0000,
        Action::ScmpActNotify => 0x7fc0_0000,
        Action::ScmpActAllow => 0x7fff_0000,
    }
}
