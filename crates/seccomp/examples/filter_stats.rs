//! Prints, for Docker's default profile, the filter length and the instructions executed per
//! syscall (allowed and denied, per arch) for pier's program and libseccomp's.
//! Run: `cargo run -p pier-seccomp --example filter_stats`.
#[path = "../tests/support/mod.rs"]
mod support;

use pier_seccomp::bpf::{run, Data, Insn};
use pier_seccomp::{compile, from_json};

const ALLOW: u32 = 0x7fff_0000;
const ARCHES: [(&str, u32, u32); 3] = [
    ("x86_64", 0xc000_003e, 0),
    ("x86", 0x4000_0003, 0),
    ("x32", 0xc000_003e, 0x4000_0000),
];

/// (mean, max) instructions over the syscalls 0..600 whose verdict is / is not ALLOW.
fn counts(prog: &[Insn], audit: u32, base: u32) -> [(f64, usize, usize); 2] {
    let mut out = [(0.0, 0, 0); 2];
    for nr in 0..600 {
        let (verdict, n) = run(
            prog,
            &Data {
                nr: base | nr,
                arch: audit,
                ip: 0,
                args: [0; 6],
            },
        );
        let slot = &mut out[usize::from(verdict != ALLOW)];
        slot.0 += n as f64;
        slot.1 = slot.1.max(n);
        slot.2 += 1;
    }
    out.map(|(sum, max, count)| (sum / count.max(1) as f64, max, count))
}

fn main() {
    let json: serde_json::Value =
        serde_json::from_str(include_str!("../profiles/docker-default.json")).unwrap();
    let profile = support::agreed(&from_json(&json).unwrap());
    let ours = compile(&profile).unwrap();
    let theirs = support::libseccomp_program(&profile);
    println!("Docker default profile, x86_64+x86+x32 (names both tables know)");
    println!(
        "filter length: pier {} instructions, libseccomp {}",
        ours.instructions().len(),
        theirs.len()
    );
    println!(
        "{:<8} {:<8} {:>12} {:>12} {:>12} {:>12} {:>7}",
        "arch", "verdict", "pier mean", "pier max", "lib mean", "lib max", "ratio"
    );
    for (name, audit, base) in ARCHES {
        let (a, b) = (
            counts(ours.instructions(), audit, base),
            counts(&theirs, audit, base),
        );
        for (i, verdict) in ["allowed", "denied"].iter().enumerate() {
            println!(
                "{name:<8} {verdict:<8} {:>12.1} {:>12} {:>12.1} {:>12} {:>7.3}",
                a[i].0,
                a[i].1,
                b[i].0,
                b[i].1,
                a[i].0 / b[i].0
            );
        }
    }
}
