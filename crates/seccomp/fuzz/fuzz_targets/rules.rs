//! Arbitrary rule sets (names from pier's syscall table, any action, errno, arch set and
//! argument conditions) -> compile: no panic, every program passes the checker, and the only
//! accepted failure is a program over the kernel's 4096-instruction limit.
#![no_main]
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use pier_seccomp::bpf::{check, run, Data};
use serde_json::json;

const ACTIONS: [&str; 9] = [
    "SCMP_ACT_KILL", "SCMP_ACT_KILL_THREAD", "SCMP_ACT_KILL_PROCESS", "SCMP_ACT_TRAP", "SCMP_ACT_ERRNO",
    "SCMP_ACT_TRACE", "SCMP_ACT_LOG", "SCMP_ACT_ALLOW", "SCMP_ACT_NOTIFY",
];
const OPS: [&str; 7] = [
    "SCMP_CMP_NE", "SCMP_CMP_LT", "SCMP_CMP_LE", "SCMP_CMP_EQ", "SCMP_CMP_GE", "SCMP_CMP_GT", "SCMP_CMP_MASKED_EQ",
];
const ARCHES: [&str; 3] = ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"];

#[derive(Arbitrary, Debug)]
struct Arg {
    index: u8,
    value: u64,
    value_two: Option<u64>,
    op: u8,
}

#[derive(Arbitrary, Debug)]
struct Rule {
    names: Vec<u16>,
    action: u8,
    errno: Option<u16>,
    args: Vec<Arg>,
}

#[derive(Arbitrary, Debug)]
struct Profile {
    default: u8,
    errno: Option<u16>,
    arches: u8,
    rules: Vec<Rule>,
    probe: [u64; 6],
}

fuzz_target!(|p: Profile| {
    let names: Vec<&str> = pier_seccomp::known_syscalls().collect();
    let rules: Vec<serde_json::Value> = p
        .rules
        .iter()
        .map(|r| {
            let args: Vec<_> = r
                .args
                .iter()
                .map(|a| json!({"index": a.index % 6, "value": a.value, "valueTwo": a.value_two, "op": OPS[usize::from(a.op) % 7]}))
                .collect();
            let names: Vec<&str> = r.names.iter().map(|&n| names[usize::from(n) % names.len()]).collect();
            json!({"names": names, "action": ACTIONS[usize::from(r.action) % 9], "errnoRet": r.errno, "args": args})
        })
        .collect();
    let arches: Vec<&str> = (0..3).filter(|i| p.arches & (1 << i) != 0).map(|i| ARCHES[i]).collect();
    let default = ACTIONS[usize::from(p.default) % 8];
    let json = json!({"defaultAction": default, "defaultErrnoRet": p.errno, "architectures": arches,
        "listenerPath": "/run/pier-fuzz.sock", "syscalls": rules});
    let profile = pier_seccomp::from_json(&json).expect("generated profile is valid");
    match pier_seccomp::compile(&profile) {
        Ok(program) => {
            check(program.instructions()).expect("compiled program fails the checker");
            for nr in 0..600u32 {
                for arch in [0xc000_003e, 0x4000_0003] {
                    run(program.instructions(), &Data { nr, arch, ip: 0, args: p.probe });
                }
            }
        }
        Err(pier_seccomp::Error::ProgramTooLong { .. }) => {}
        Err(e) => panic!("compile failed: {e}"),
    }
});
