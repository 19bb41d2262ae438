//! build.rs: compile the C eBPF programs in src/bpf/*.bpf.c into BPF objects in OUT_DIR.
//!
//! vmlinux.h (every kernel type, for the `struct bpf_sock_addr` context and CO-RE) is generated here from the
//! build machine's BTF with `bpftool btf dump file /sys/kernel/btf/vmlinux format c`, never committed.
//! Needs clang (the BPF backend), bpftool, and libbpf-dev for <bpf/bpf_helpers.h>.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

const SOURCES: &[&str] = &["publish", "remote"];
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed={VMLINUX_BTF}");
    vmlinux_h(&out);
    println!("cargo:rerun-if-changed=src/bpf/pier_addr.h");
    for name in SOURCES {
        let src = format!("src/bpf/{name}.bpf.c");
        println!("cargo:rerun-if-changed={src}");
        run(Command::new("clang")
            .args([
                "-O2",
                "-g",
                "-target",
                "bpf",
                "-D__TARGET_ARCH_x86",
                "-Wall",
                "-Werror",
                "-I",
            ])
            .arg(&out)
            .args(["-c", &src, "-o"])
            .arg(out.join(format!("{name}.bpf.o"))));
    }
}

fn vmlinux_h(out: &Path) {
    let output = Command::new(bpftool())
        .args(["btf", "dump", "file", VMLINUX_BTF, "format", "c"])
        .output()
        .unwrap_or_else(|e| {
            panic!("bpftool not found ({e}): install Debian's bpftool (scripts/setup.sh)")
        });
    if !output.status.success() {
        panic!(
            "bpftool btf dump file {VMLINUX_BTF} failed: {}; the kernel needs CONFIG_DEBUG_INFO_BTF",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    std::fs::write(out.join("vmlinux.h"), output.stdout).expect("write vmlinux.h into OUT_DIR");
}

/// Debian installs bpftool in /usr/sbin, which is not on a normal user's PATH.
fn bpftool() -> PathBuf {
    let sbin = Path::new("/usr/sbin/bpftool");
    let on_path = env::var_os("PATH")
        .is_some_and(|p| env::split_paths(&p).any(|d| d.join("bpftool").is_file()));
    if on_path || !sbin.is_file() {
        PathBuf::from("bpftool")
    } else {
        sbin.to_owned()
    }
}

fn run(cmd: &mut Command) {
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e}: install clang and libbpf-dev (scripts/setup.sh)")
    });
    if !status.success() {
        panic!("{cmd:?} failed with {status}");
    }
}
