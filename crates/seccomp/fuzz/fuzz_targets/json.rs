//! Arbitrary bytes as `linux.seccomp` JSON -> from_json -> compile: no panic, and every
//! program compiled passes the checker (jumps in range, loads inside seccomp_data, final ret)
//! and runs to a verdict. Seeds: crates/seccomp/fuzz/seeds/json.
#![no_main]
use libfuzzer_sys::fuzz_target;
use pier_seccomp::bpf::{check, run, Data};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else { return };
    let Ok(profile) = pier_seccomp::from_json(&value) else { return };
    if let Ok(program) = pier_seccomp::compile(&profile) {
        check(program.instructions()).expect("compiled program fails the checker");
        for nr in [0, 2, 59, 102, 0x4000_0000, u32::MAX] {
            for arch in [0xc000_003e, 0x4000_0003, 0] {
                run(program.instructions(), &Data { nr, arch, ip: 0, args: [u64::MAX, 0, 1, 2, 3, 4] });
            }
        }
    }
});
