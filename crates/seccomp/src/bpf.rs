//! Classic BPF for seccomp: the instruction type, an assembler with labels, a checker and an
//! interpreter.
//!
//! Theory of operation: the compiler emits symbolic items (loads, conditional jumps to labels,
//! gotos, returns, label bindings) into [`Asm`]. `Asm::finish` lays them out. cBPF conditional
//! jumps carry 8-bit forward offsets, so a conditional jump whose target lies more than 255
//! instructions ahead gets a trampoline: the branch jumps to an adjacent `ja` (32-bit offset)
//! that reaches the target. Layout is iterated to a fixed point because each trampoline moves
//! the code after it; trampolines are only ever added, so the iteration terminates.
//!
//! [`check`] verifies what the kernel's checker would (known opcodes, in-range forward jumps,
//! aligned loads inside `seccomp_data`, a final return) and [`run`] interprets a program over a
//! `seccomp_data`, counting executed instructions; tests, fuzzing and the benchmark use both.
//! Privileges: none. Tests: unit tests below.

/// One cBPF instruction, laid out as the kernel's `struct sock_filter`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Insn {
    /// Opcode (class | size | mode or class | op | source).
    pub code: u16,
    /// Forward offset when the condition holds.
    pub jt: u8,
    /// Forward offset when it does not.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

/// `BPF_LD | BPF_W | BPF_ABS`: A = seccomp_data word at offset k.
pub const LD_W_ABS: u16 = 0x20;
/// `BPF_ALU | BPF_AND | BPF_K`: A &= k.
pub const ALU_AND_K: u16 = 0x54;
/// `BPF_JMP | BPF_JA`: pc += k.
pub const JMP_JA: u16 = 0x05;
/// `BPF_JMP | BPF_JEQ | BPF_K`.
pub const JMP_JEQ_K: u16 = 0x15;
/// `BPF_JMP | BPF_JGT | BPF_K` (unsigned).
pub const JMP_JGT_K: u16 = 0x25;
/// `BPF_JMP | BPF_JGE | BPF_K` (unsigned).
pub const JMP_JGE_K: u16 = 0x35;
/// `BPF_JMP | BPF_JSET | BPF_K`.
pub const JMP_JSET_K: u16 = 0x45;
/// `BPF_RET | BPF_K`: return k.
pub const RET_K: u16 = 0x06;
/// The kernel's limit on program length (BPF_MAXINSNS).
pub const MAX_INSNS: usize = 4096;
/// Size of `struct seccomp_data`.
pub const DATA_LEN: u32 = 64;

/// A `struct seccomp_data` to run a program against.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Data {
    /// Syscall number as the filter sees it (x32 calls carry 0x4000_0000).
    pub nr: u32,
    /// AUDIT_ARCH_* value.
    pub arch: u32,
    /// Instruction pointer.
    pub ip: u64,
    /// The six arguments.
    pub args: [u64; 6],
}

impl Data {
    fn word(&self, off: u32) -> u32 {
        let field = |v: u64, hi: bool| if hi { (v >> 32) as u32 } else { v as u32 };
        match off {
            0 => self.nr,
            4 => self.arch,
            8 | 12 => field(self.ip, off == 12),
            _ => field(self.args[(off as usize - 16) / 8], off % 8 == 4),
        }
    }
}

/// Why a program is not one the kernel would accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// Empty or longer than BPF_MAXINSNS.
    #[error("program length {0} is outside 1..=4096")]
    Length(usize),
    /// An opcode this compiler never emits and the seccomp checker may refuse.
    #[error("instruction {pc}: unknown opcode {code:#x}")]
    Opcode { pc: usize, code: u16 },
    /// A jump leaving the program.
    #[error("instruction {pc}: jump target out of range")]
    JumpOutOfRange { pc: usize },
    /// A load outside `seccomp_data` or not 4-byte aligned.
    #[error("instruction {pc}: load offset {k} outside seccomp_data")]
    Load { pc: usize, k: u32 },
    /// The last instruction can fall off the end.
    #[error("program does not end in a return")]
    NoFinalReturn,
}

/// Checks that `prog` is valid for the seccomp BPF checker.
pub fn check(prog: &[Insn]) -> Result<(), CheckError> {
    if prog.is_empty() || prog.len() > MAX_INSNS {
        return Err(CheckError::Length(prog.len()));
    }
    let len = prog.len();
    for (pc, insn) in prog.iter().enumerate() {
        let reach = |off: usize| pc + 1 + off < len;
        match insn.code {
            LD_W_ABS if !insn.k.is_multiple_of(4) || insn.k >= DATA_LEN => {
                return Err(CheckError::Load { pc, k: insn.k })
            }
            LD_W_ABS | ALU_AND_K | RET_K => {}
            JMP_JA if !reach(insn.k as usize) => return Err(CheckError::JumpOutOfRange { pc }),
            JMP_JA => {}
            JMP_JEQ_K | JMP_JGT_K | JMP_JGE_K | JMP_JSET_K => {
                if !reach(insn.jt.into()) || !reach(insn.jf.into()) {
                    return Err(CheckError::JumpOutOfRange { pc });
                }
            }
            code => return Err(CheckError::Opcode { pc, code }),
        }
    }
    match prog[len - 1].code {
        RET_K => Ok(()),
        _ => Err(CheckError::NoFinalReturn),
    }
}

/// Runs a checked program over `data`: (return value, instructions executed).
///
/// # Panics
/// If `prog` does not pass [`check`].
pub fn run(prog: &[Insn], data: &Data) -> (u32, usize) {
    let (mut a, mut pc, mut executed) = (0u32, 0usize, 0usize);
    loop {
        let insn = prog[pc];
        executed += 1;
        pc += 1;
        let cond = |taken: bool| if taken { insn.jt } else { insn.jf } as usize;
        match insn.code {
            LD_W_ABS => a = data.word(insn.k),
            ALU_AND_K => a &= insn.k,
            JMP_JA => pc += insn.k as usize,
            JMP_JEQ_K => pc += cond(a == insn.k),
            JMP_JGT_K => pc += cond(a > insn.k),
            JMP_JGE_K => pc += cond(a >= insn.k),
            JMP_JSET_K => pc += cond(a & insn.k != 0),
            RET_K => return (insn.k, executed),
            code => panic!("unchecked program: opcode {code:#x}"),
        }
    }
}

/// A position in the program, bound once with [`Asm::bind`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Label(usize);

#[derive(Debug, Clone, Copy)]
enum Item {
    Plain(Insn),
    Jump {
        code: u16,
        k: u32,
        jt: Label,
        jf: Label,
    },
    Goto(Label),
    Bind(Label),
}

/// Collects symbolic instructions and lays them out with trampolines for far jumps.
#[derive(Debug, Default)]
pub(crate) struct Asm {
    items: Vec<Item>,
    labels: usize,
}

/// The program needs more than BPF_MAXINSNS instructions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TooLong(pub usize);

impl Asm {
    pub(crate) fn label(&mut self) -> Label {
        self.labels += 1;
        Label(self.labels - 1)
    }

    pub(crate) fn bind(&mut self, l: Label) {
        self.items.push(Item::Bind(l));
    }

    pub(crate) fn load(&mut self, offset: u32) {
        self.plain(LD_W_ABS, offset);
    }

    pub(crate) fn and(&mut self, k: u32) {
        self.plain(ALU_AND_K, k);
    }

    pub(crate) fn ret(&mut self, k: u32) {
        self.plain(RET_K, k);
    }

    pub(crate) fn jump(&mut self, code: u16, k: u32, jt: Label, jf: Label) {
        self.items.push(Item::Jump { code, k, jt, jf });
    }

    pub(crate) fn goto(&mut self, l: Label) {
        self.items.push(Item::Goto(l));
    }

    fn plain(&mut self, code: u16, k: u32) {
        self.items.push(Item::Plain(Insn {
            code,
            jt: 0,
            jf: 0,
            k,
        }));
    }

    /// Lays the program out; every label must be bound after all jumps to it.
    pub(crate) fn finish(self) -> Result<Vec<Insn>, TooLong> {
        let mut far = vec![(false, false); self.items.len()];
        let addrs = loop {
            let (addrs, total) = self.layout(&far);
            if total > MAX_INSNS {
                return Err(TooLong(total));
            }
            let mut changed = false;
            for (i, item) in self.items.iter().enumerate() {
                if let Item::Jump { jt, jf, .. } = *item {
                    let next = addrs.items[i] + 1;
                    let (ft, ff) = far[i];
                    let needs = |l: Label| addrs.labels[l.0] - next > 255;
                    let (nt, nf) = (ft || needs(jt), ff || needs(jf));
                    changed |= (nt, nf) != (ft, ff);
                    far[i] = (nt, nf);
                }
            }
            if !changed {
                break addrs;
            }
        };
        Ok(self.emit(&far, &addrs))
    }

    fn layout(&self, far: &[(bool, bool)]) -> (Layout, usize) {
        let mut items = Vec::with_capacity(self.items.len());
        let mut labels = vec![usize::MAX; self.labels];
        let mut pc = 0;
        for (item, &(ft, ff)) in self.items.iter().zip(far) {
            items.push(pc);
            match item {
                Item::Bind(l) => labels[l.0] = pc,
                Item::Jump { .. } => pc += 1 + usize::from(ft) + usize::from(ff),
                Item::Plain(_) | Item::Goto(_) => pc += 1,
            }
        }
        (Layout { items, labels }, pc)
    }

    fn emit(&self, far: &[(bool, bool)], addrs: &Layout) -> Vec<Insn> {
        let mut out = Vec::with_capacity(addrs.items.last().map_or(0, |a| a + 3));
        let ja = |from: usize, l: Label| Insn {
            code: JMP_JA,
            jt: 0,
            jf: 0,
            k: (addrs.labels[l.0] - from - 1) as u32,
        };
        for (item, &(ft, ff)) in self.items.iter().zip(far) {
            let pc = out.len();
            match *item {
                Item::Bind(_) => {}
                Item::Plain(insn) => out.push(insn),
                Item::Goto(l) => out.push(ja(pc, l)),
                Item::Jump { code, k, jt, jf } => {
                    let near = |l: Label| (addrs.labels[l.0] - pc - 1) as u8;
                    let jt_off = if ft { 0 } else { near(jt) };
                    let jf_off = if ff { u8::from(ft) } else { near(jf) };
                    out.push(Insn {
                        code,
                        jt: jt_off,
                        jf: jf_off,
                        k,
                    });
                    if ft {
                        out.push(ja(pc + 1, jt));
                    }
                    if ff {
                        out.push(ja(out.len(), jf));
                    }
                }
            }
        }
        out
    }
}

struct Layout {
    items: Vec<usize>,
    labels: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn far_jumps_get_trampolines_and_stay_correct() {
        let mut asm = Asm::default();
        let (far, near) = (asm.label(), asm.label());
        asm.load(0);
        asm.jump(JMP_JEQ_K, 7, far, near);
        asm.bind(near);
        for _ in 0..300 {
            asm.and(u32::MAX);
        }
        asm.ret(1);
        asm.bind(far);
        asm.ret(2);
        let prog = asm.finish().unwrap();
        check(&prog).unwrap();
        assert_eq!(prog.len(), 305);
        let run_nr = |nr| {
            run(
                &prog,
                &Data {
                    nr,
                    ..Data::default()
                },
            )
            .0
        };
        assert_eq!(run_nr(7), 2);
        assert_eq!(run_nr(8), 1);
    }

    #[test]
    fn check_rejects_jump_past_end() {
        let prog = [
            Insn {
                code: JMP_JEQ_K,
                jt: 1,
                jf: 0,
                k: 0,
            },
            Insn {
                code: RET_K,
                jt: 0,
                jf: 0,
                k: 0,
            },
        ];
        assert_eq!(check(&prog), Err(CheckError::JumpOutOfRange { pc: 0 }));
    }

    #[test]
    fn check_rejects_load_outside_data() {
        let prog = [
            Insn {
                code: LD_W_ABS,
                jt: 0,
                jf: 0,
                k: 64,
            },
            Insn {
                code: RET_K,
                jt: 0,
                jf: 0,
                k: 0,
            },
        ];
        assert_eq!(check(&prog), Err(CheckError::Load { pc: 0, k: 64 }));
    }
}
