//! Micro-benchmarks: cold compile of Docker's default profile (x86_64+x86+x32 and x86_64
//! alone) by pier and by libseccomp (rules added as runc/crun add them, then
//! seccomp_export_bpf), a cache hit, and the cache key alone.
//! Run: `cargo bench -p pier-seccomp --bench compile`. Figures go to crates/seccomp/README.md.
#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, criterion_main, Criterion};
use oci_spec::runtime::LinuxSeccomp;
use pier_seccomp::{compile, from_json, profile_key, Cache};
use std::hint::black_box;

fn docker(arches: Option<&str>) -> LinuxSeccomp {
    let mut json: serde_json::Value =
        serde_json::from_str(include_str!("../profiles/docker-default.json")).unwrap();
    if let Some(arch) = arches {
        json["architectures"] = serde_json::json!([arch]);
    }
    from_json(&json).unwrap()
}

fn bench(c: &mut Criterion) {
    let three = docker(None);
    let one = docker(Some("SCMP_ARCH_X86_64"));
    let mut g = c.benchmark_group("docker-default");
    g.bench_function("pier compile x86_64+x86+x32", |b| {
        b.iter(|| compile(black_box(&three)).unwrap())
    });
    g.bench_function("libseccomp compile x86_64+x86+x32", |b| {
        b.iter(|| support::libseccomp_program(black_box(&three)))
    });
    g.bench_function("pier compile x86_64", |b| {
        b.iter(|| compile(black_box(&one)).unwrap())
    });
    g.bench_function("libseccomp compile x86_64", |b| {
        b.iter(|| support::libseccomp_program(black_box(&one)))
    });
    let dir = tempfile::Builder::new()
        .prefix("pier-test-")
        .tempdir()
        .unwrap();
    let cache = Cache::new(dir.path().to_owned());
    cache.get_or_compile(&three).unwrap();
    g.bench_function("pier cache hit x86_64+x86+x32", |b| {
        b.iter(|| cache.get_or_compile(black_box(&three)).unwrap())
    });
    g.bench_function("pier cache key", |b| {
        b.iter(|| profile_key(black_box(&three)))
    });
    let json: serde_json::Value =
        serde_json::from_str(include_str!("../profiles/docker-default.json")).unwrap();
    g.bench_function("pier from_json", |b| {
        b.iter(|| from_json(black_box(&json)).unwrap())
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
