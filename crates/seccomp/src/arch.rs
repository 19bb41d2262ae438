//! The architectures a profile can name on an x86_64 host, and how the kernel tells them apart.
//!
//! Theory of operation: `seccomp_data.arch` is AUDIT_ARCH_X86_64 for both x86_64 and x32 calls;
//! x32 calls carry `__X32_SYSCALL_BIT` (0x4000_0000) in the syscall number. So the filter has
//! one dispatch per audit arch (a [`Family`]): x86_64 and x32 share one, x86 has its own.
//! x86 and x32 compare only the low 32 bits of arguments (their arguments are 32-bit), as
//! libseccomp does. Other architectures are refused: this host cannot run them.
//! Privileges: none. Tests: unit tests in compile.rs and tests/oracle.rs.
use oci_spec::runtime::Arch as OciArch;

/// `__X32_SYSCALL_BIT`.
pub(crate) const X32_BIT: u32 = 0x4000_0000;
/// AUDIT_ARCH_X86_64.
pub(crate) const AUDIT_X86_64: u32 = 0xc000_003e;
/// AUDIT_ARCH_I386.
pub(crate) const AUDIT_I386: u32 = 0x4000_0003;

/// An architecture this host can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Arch {
    /// 64-bit x86.
    X86_64,
    /// 32-bit x86 (int 0x80, sysenter).
    X86,
    /// x32 ABI (64-bit mode, 32-bit pointers).
    X32,
}

impl Arch {
    /// Column of this arch in the syscall name table.
    pub(crate) fn column(self) -> usize {
        self as usize
    }

    /// The OCI name of the arch.
    pub fn oci_name(self) -> &'static str {
        match self {
            Arch::X86_64 => "SCMP_ARCH_X86_64",
            Arch::X86 => "SCMP_ARCH_X86",
            Arch::X32 => "SCMP_ARCH_X32",
        }
    }

    /// Maps an OCI arch; `None` when this host cannot run it.
    pub(crate) fn from_oci(arch: OciArch) -> Option<Arch> {
        match arch {
            OciArch::ScmpArchNative | OciArch::ScmpArchX86_64 => Some(Arch::X86_64),
            OciArch::ScmpArchX86 => Some(Arch::X86),
            OciArch::ScmpArchX32 => Some(Arch::X32),
            _ => None,
        }
    }
}
