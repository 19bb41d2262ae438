//! OCI profile -> cBPF program.
//!
//! Theory of operation:
//! 1. Each rule becomes a [`Rule`]: its return value and its conditions grouped by argument
//!    index (OCI: conditions on the same index are ORed, different indexes ANDed). Rules whose
//!    action equals the default action are dropped, as runc does (libseccomp refuses them).
//! 2. Per audit arch ([`Family`]), every syscall number a rule names gets a [`Leaf`]: a plain
//!    return when no rule on it has conditions, else a block of its conditional rules (first
//!    match wins, in profile order) with the unconditional rule's action (or the default) as
//!    fallback. On x86 a rule on a socket/IPC call also applies to `socketcall`/`ipc` with the
//!    call number in arg0 (libseccomp's behaviour, which runc and crun inherit).
//! 3. The number line `0..=u32::MAX` is cut into intervals of equal leaf (neighbouring numbers
//!    with the same action merge), and the program dispatches on the number by binary search
//!    over the interval starts: O(log n) jumps per syscall instead of libseccomp's chain.
//!    For AUDIT_ARCH_X86_64 the x32 numbers (>= 0x4000_0000) are part of the same line.
//! 4. Leaves are emitted once each after the dispatch trees and shared by every interval and
//!    arch that reaches them; far jumps get trampolines in `bpf::Asm`.
//!
//! Arguments: 64-bit compares check the high word first, then the low word; x86 and x32
//! compare the low words only. MASKED_EQ is `(arg & value) == (valueTwo & value)`.
//! Privileges: none. Tests: unit tests below, tests/oracle.rs against libseccomp.
use crate::arch::{Arch, AUDIT_I386, AUDIT_X86_64, X32_BIT};
use crate::bpf::{self, Asm, Insn, Label};
use crate::{names, Error};
use oci_spec::runtime::{LinuxSeccomp, LinuxSeccompAction as Action, LinuxSeccompOperator as Op};
use std::collections::HashMap;

/// SECCOMP_RET_* values.
pub(crate) mod ret {
    pub const KILL_PROCESS: u32 = 0x8000_0000;
    pub const KILL_THREAD: u32 = 0;
    pub const TRAP: u32 = 0x0003_0000;
    pub const ERRNO: u32 = 0x0005_0000;
    pub const USER_NOTIF: u32 = 0x7fc0_0000;
    pub const TRACE: u32 = 0x7ff0_0000;
    pub const LOG: u32 = 0x7ffc_0000;
    pub const ALLOW: u32 = 0x7fff_0000;
}

/// What a call from an architecture outside the profile gets.
pub const BAD_ARCH_ACTION: u32 = ret::KILL_PROCESS;
/// errno for ERRNO (and data for TRACE) when the profile gives none: EPERM, as runc and crun.
const DEFAULT_ERRNO: u32 = libc::EPERM as u32;

/// The filter return value of an OCI action.
pub(crate) fn action_value(action: Action, errno: Option<u32>) -> u32 {
    let data = errno.unwrap_or(DEFAULT_ERRNO) & 0xffff;
    match action {
        Action::ScmpActKill | Action::ScmpActKillThread => ret::KILL_THREAD,
        Action::ScmpActKillProcess => ret::KILL_PROCESS,
        Action::ScmpActTrap => ret::TRAP,
        Action::ScmpActErrno => ret::ERRNO | data,
        Action::ScmpActTrace => ret::TRACE | data,
        Action::ScmpActLog => ret::LOG,
        Action::ScmpActNotify => ret::USER_NOTIF,
        Action::ScmpActAllow => ret::ALLOW,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cond {
    op: Op,
    value: u64,
    value_two: u64,
}

#[derive(Debug)]
struct Rule {
    action: u32,
    /// (argument index, conditions ORed), indexes ANDed.
    groups: Vec<(usize, Vec<Cond>)>,
}

/// One rule as it applies to one syscall number: directly or through an x86 multiplexer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct RuleRef {
    rule: usize,
    mux_call: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Leaf {
    Ret(u32),
    Block {
        rules: Vec<RuleRef>,
        fallback: u32,
        wide: bool,
    },
}

/// The audit arches: x86_64 and x32 share AUDIT_ARCH_X86_64.
#[derive(Debug, Clone, Copy)]
struct Family {
    audit: u32,
    /// The profile's arches in this family: [x86_64 or x86, x32].
    members: [Option<Arch>; 2],
}

/// Output of the compiler: the program and whether it uses NOTIFY.
#[derive(Debug)]
pub(crate) struct Output {
    pub insns: Vec<Insn>,
    pub notify: bool,
}

/// Compiles a validated profile for `arches`.
pub(crate) fn compile(profile: &LinuxSeccomp, arches: &[Arch]) -> Result<Output, Error> {
    let default = action_value(profile.default_action(), profile.default_errno_ret());
    let rules = lower_rules(profile, default);
    let notify = rules.iter().any(|r| r.action == ret::USER_NOTIF);
    let families = families(arches);
    let mut gen = Gen {
        asm: Asm::default(),
        leaves: HashMap::new(),
        order: Vec::new(),
    };
    gen.asm.load(4);
    let starts: Vec<Label> = families.iter().map(|_| gen.asm.label()).collect();
    for (family, &start) in families.iter().zip(&starts) {
        let next = gen.asm.label();
        gen.asm.jump(bpf::JMP_JEQ_K, family.audit, start, next);
        gen.asm.bind(next);
    }
    gen.asm.ret(BAD_ARCH_ACTION);
    for (family, start) in families.iter().zip(starts) {
        gen.asm.bind(start);
        gen.asm.load(0);
        let intervals = intervals(profile, &rules, family, default);
        gen.tree(&intervals);
    }
    gen.emit_leaves(&rules);
    let insns = gen
        .asm
        .finish()
        .map_err(|e| Error::ProgramTooLong { len: e.0 })?;
    Ok(Output { insns, notify })
}

fn lower_rules(profile: &LinuxSeccomp, default: u32) -> Vec<Rule> {
    let syscalls = profile.syscalls().as_deref().unwrap_or_default();
    syscalls
        .iter()
        .map(|s| {
            let mut groups: Vec<(usize, Vec<Cond>)> = Vec::new();
            for arg in s.args().as_deref().unwrap_or_default() {
                let cond = Cond {
                    op: arg.op(),
                    value: arg.value(),
                    value_two: arg.value_two().unwrap_or(0),
                };
                match groups.iter_mut().find(|(i, _)| *i == arg.index()) {
                    Some((_, conds)) => conds.push(cond),
                    None => groups.push((arg.index(), vec![cond])),
                }
            }
            Rule {
                action: action_value(s.action(), s.errno_ret()),
                groups,
            }
        })
        .map(|r| {
            if r.action == default {
                Rule {
                    action: default,
                    groups: Vec::new(),
                }
            } else {
                r
            }
        })
        .collect()
}

fn families(arches: &[Arch]) -> Vec<Family> {
    let has = |a: Arch| arches.contains(&a).then_some(a);
    let mut out = Vec::with_capacity(2);
    if has(Arch::X86_64).is_some() || has(Arch::X32).is_some() {
        out.push(Family {
            audit: AUDIT_X86_64,
            members: [has(Arch::X86_64), has(Arch::X32)],
        });
    }
    if let Some(x86) = has(Arch::X86) {
        out.push(Family {
            audit: AUDIT_I386,
            members: [Some(x86), None],
        });
    }
    out
}

/// (first syscall number, leaf) pairs covering 0..=u32::MAX in order, neighbours distinct.
fn intervals(
    profile: &LinuxSeccomp,
    rules: &[Rule],
    family: &Family,
    default: u32,
) -> Vec<(u32, Leaf)> {
    let mut hits: Vec<(u32, RuleRef)> = Vec::new();
    let syscalls = profile.syscalls().as_deref().unwrap_or_default();
    for (i, (syscall, rule)) in syscalls.iter().zip(rules).enumerate() {
        if rule.action == default {
            continue;
        }
        for name in syscall.names() {
            for arch in family.members.into_iter().flatten() {
                if let Some(nr) = names::resolve(name, arch) {
                    hits.push((
                        nr,
                        RuleRef {
                            rule: i,
                            mux_call: None,
                        },
                    ));
                }
                if let (Arch::X86, Some((nr, call))) = (arch, names::x86_multiplexed(name)) {
                    hits.push((
                        nr,
                        RuleRef {
                            rule: i,
                            mux_call: Some(call),
                        },
                    ));
                }
            }
        }
    }
    hits.sort_unstable_by_key(|&(nr, r)| (nr, r.rule, r.mux_call));
    hits.dedup();
    let base = |nr: u32| Leaf::Ret(family.base_action(nr, default));
    // (start, names a syscall, leaf): at equal starts the syscall's own leaf wins.
    let mut points: Vec<(u32, bool, Leaf)> =
        vec![(0, false, base(0)), (X32_BIT, false, base(X32_BIT))];
    points.push((u32::MAX, false, base(u32::MAX)));
    for group in hits.chunk_by(|a, b| a.0 == b.0) {
        let nr = group[0].0;
        let refs: Vec<RuleRef> = group.iter().map(|h| h.1).collect();
        let wide = family.audit == AUDIT_X86_64 && nr < X32_BIT;
        points.push((nr, true, leaf_for(rules, &refs, default, wide)));
        if nr != u32::MAX {
            points.push((nr + 1, false, base(nr + 1)));
        }
    }
    points.sort_unstable_by_key(|p| (p.0, p.1));
    let mut out: Vec<(u32, Leaf)> = Vec::with_capacity(points.len());
    for (start, _, leaf) in points {
        if out.last().is_some_and(|l| l.0 == start) {
            out.pop();
        }
        if out.last().is_none_or(|l| l.1 != leaf) {
            out.push((start, leaf));
        }
    }
    out
}

impl Family {
    /// What numbers no rule names get: the default action inside the family's ranges, the
    /// bad-arch action outside (x32 numbers when x32 is not in the profile, and the reverse).
    /// -1 (u32::MAX) is in range, as in libseccomp.
    fn base_action(&self, nr: u32, default: u32) -> u32 {
        let member = self.audit == AUDIT_I386
            || nr == u32::MAX
            || if nr >= X32_BIT {
                self.members[1].is_some()
            } else {
                self.members[0].is_some()
            };
        if member {
            default
        } else {
            BAD_ARCH_ACTION
        }
    }
}

fn leaf_for(rules: &[Rule], refs: &[RuleRef], default: u32, wide: bool) -> Leaf {
    let unconditional = |r: &RuleRef| r.mux_call.is_none() && rules[r.rule].groups.is_empty();
    let fallback = refs
        .iter()
        .find(|r| unconditional(r))
        .map_or(default, |r| rules[r.rule].action);
    let mut conditional: Vec<RuleRef> =
        refs.iter().filter(|r| !unconditional(r)).copied().collect();
    while conditional
        .last()
        .is_some_and(|r| rules[r.rule].action == fallback)
    {
        conditional.pop();
    }
    if conditional.is_empty() {
        Leaf::Ret(fallback)
    } else {
        Leaf::Block {
            rules: conditional,
            fallback,
            wide,
        }
    }
}

struct Gen {
    asm: Asm,
    leaves: HashMap<Leaf, Label>,
    order: Vec<Leaf>,
}

impl Gen {
    fn leaf_label(&mut self, leaf: &Leaf) -> Label {
        if let Some(&l) = self.leaves.get(leaf) {
            return l;
        }
        let l = self.asm.label();
        self.leaves.insert(leaf.clone(), l);
        self.order.push(leaf.clone());
        l
    }

    /// Binary search over interval starts; the accumulator holds the syscall number.
    fn tree(&mut self, intervals: &[(u32, Leaf)]) {
        if intervals.len() == 1 {
            let l = self.leaf_label(&intervals[0].1);
            self.asm.goto(l);
            return;
        }
        self.node(intervals);
    }

    fn node(&mut self, intervals: &[(u32, Leaf)]) {
        let mid = intervals.len() / 2;
        let (left, right) = intervals.split_at(mid);
        let jt = self.child_label(right);
        let jf = self.child_label(left);
        self.asm.jump(bpf::JMP_JGE_K, right[0].0, jt.0, jf.0);
        for (label, part) in [jf, jt] {
            if part.len() > 1 {
                self.asm.bind(label);
                self.node(part);
            }
        }
    }

    fn child_label<'a>(&mut self, part: &'a [(u32, Leaf)]) -> (Label, &'a [(u32, Leaf)]) {
        let label = if part.len() == 1 {
            self.leaf_label(&part[0].1)
        } else {
            self.asm.label()
        };
        (label, part)
    }

    fn emit_leaves(&mut self, rules: &[Rule]) {
        let order = std::mem::take(&mut self.order);
        for leaf in &order {
            self.asm.bind(self.leaves[leaf]);
            match leaf {
                Leaf::Ret(k) => self.asm.ret(*k),
                Leaf::Block {
                    rules: refs,
                    fallback,
                    wide,
                } => {
                    for r in refs {
                        self.rule(&rules[r.rule], r.mux_call, *wide);
                    }
                    self.asm.ret(*fallback);
                }
            }
        }
    }

    /// Returns the rule's action when all its argument groups hold, else falls through.
    fn rule(&mut self, rule: &Rule, mux_call: Option<u32>, wide: bool) {
        let next = self.asm.label();
        if let Some(call) = mux_call {
            let ok = self.asm.label();
            self.asm.load(16);
            self.asm.jump(bpf::JMP_JEQ_K, call, ok, next);
            self.asm.bind(ok);
        }
        for (index, conds) in &rule.groups {
            if mux_call.is_some() && *index == 0 {
                continue;
            }
            let ok = self.asm.label();
            for (j, cond) in conds.iter().enumerate() {
                let last = j + 1 == conds.len();
                let fail = if last { next } else { self.asm.label() };
                self.cond(*index, cond, ok, fail, wide);
                if !last {
                    self.asm.bind(fail);
                }
            }
            self.asm.bind(ok);
        }
        self.asm.ret(rule.action);
        self.asm.bind(next);
    }

    /// Jumps to `yes` when argument `index` satisfies `cond`, else to `no`.
    fn cond(&mut self, index: usize, cond: &Cond, yes: Label, no: Label, wide: bool) {
        let lo_off = 16 + 8 * index as u32;
        let (v, v2) = (cond.value, cond.value_two);
        match cond.op {
            Op::ScmpCmpEq => self.eq(lo_off, v, u64::MAX, yes, no, wide),
            Op::ScmpCmpNe => self.eq(lo_off, v, u64::MAX, no, yes, wide),
            Op::ScmpCmpMaskedEq => self.eq(lo_off, v2 & v, v, yes, no, wide),
            Op::ScmpCmpGe => self.ordered(lo_off, v, bpf::JMP_JGE_K, yes, no, wide),
            Op::ScmpCmpLt => self.ordered(lo_off, v, bpf::JMP_JGE_K, no, yes, wide),
            Op::ScmpCmpGt => self.ordered(lo_off, v, bpf::JMP_JGT_K, yes, no, wide),
            Op::ScmpCmpLe => self.ordered(lo_off, v, bpf::JMP_JGT_K, no, yes, wide),
        }
    }

    /// `(arg & mask) == v` on both words (high first), or on the low word only.
    fn eq(&mut self, lo_off: u32, v: u64, mask: u64, yes: Label, no: Label, wide: bool) {
        let high = (wide && mask >> 32 != 0).then_some((
            lo_off + 4,
            (mask >> 32) as u32,
            (v >> 32) as u32,
        ));
        let low = (mask as u32 != 0).then_some((lo_off, mask as u32, v as u32));
        let words: Vec<(u32, u32, u32)> = [high, low].into_iter().flatten().collect();
        if words.is_empty() {
            self.asm.goto(yes);
        }
        for (i, &(off, m, val)) in words.iter().enumerate() {
            let last = i + 1 == words.len();
            let cont = if last { yes } else { self.asm.label() };
            self.asm.load(off);
            if m != u32::MAX {
                self.asm.and(m);
            }
            self.asm.jump(bpf::JMP_JEQ_K, val, cont, no);
            if !last {
                self.asm.bind(cont);
            }
        }
    }

    /// `arg >= v` (JGE) or `arg > v` (JGT), unsigned, on 64 or 32 bits.
    fn ordered(&mut self, lo_off: u32, v: u64, code: u16, yes: Label, no: Label, wide: bool) {
        let (hi, lo) = ((v >> 32) as u32, v as u32);
        if wide {
            let (eq_hi, low) = (self.asm.label(), self.asm.label());
            self.asm.load(lo_off + 4);
            self.asm.jump(bpf::JMP_JGT_K, hi, yes, eq_hi);
            self.asm.bind(eq_hi);
            self.asm.jump(bpf::JMP_JEQ_K, hi, low, no);
            self.asm.bind(low);
        }
        self.asm.load(lo_off);
        self.asm.jump(code, lo, yes, no);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bpf::{check, run, Data};

    fn profile(json: &str) -> LinuxSeccomp {
        serde_json::from_str(json).unwrap()
    }

    fn verdict(prog: &[Insn], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        run(
            prog,
            &Data {
                nr,
                arch,
                ip: 0,
                args,
            },
        )
        .0
    }

    #[test]
    fn dispatch_and_64_bit_args() {
        let p = profile(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":38,"syscalls":[
            {"names":["read","write"],"action":"SCMP_ACT_ALLOW"},
            {"names":["kill"],"action":"SCMP_ACT_ALLOW","args":[
              {"index":1,"value":4294967296,"op":"SCMP_CMP_GT"},
              {"index":1,"value":9,"op":"SCMP_CMP_EQ"},
              {"index":0,"value":255,"valueTwo":3,"op":"SCMP_CMP_MASKED_EQ"}]}]}"#,
        );
        let out = compile(&p, &[Arch::X86_64]).unwrap();
        check(&out.insns).unwrap();
        let v = |nr, args| verdict(&out.insns, AUDIT_X86_64, nr, args);
        assert_eq!(v(0, [0; 6]), ret::ALLOW);
        assert_eq!(v(1, [0; 6]), ret::ALLOW);
        assert_eq!(v(2, [0; 6]), ret::ERRNO | 38);
        assert_eq!(v(62, [0x103, 9, 0, 0, 0, 0]), ret::ALLOW);
        assert_eq!(v(62, [0x103, 1 << 33, 0, 0, 0, 0]), ret::ALLOW);
        assert_eq!(v(62, [0x103, 1 << 32, 0, 0, 0, 0]), ret::ERRNO | 38);
        assert_eq!(v(62, [0x104, 9, 0, 0, 0, 0]), ret::ERRNO | 38);
        assert_eq!(v(X32_BIT, [0; 6]), BAD_ARCH_ACTION);
        assert_eq!(verdict(&out.insns, AUDIT_I386, 3, [0; 6]), BAD_ARCH_ACTION);
    }
}
