//! (cache: placeholder until the next step)
use crate::{compile, Error, Program};
use oci_spec::runtime::LinuxSeccomp;
use std::path::PathBuf;

/// Version of the compiler's output format; part of every cache key.
pub const COMPILER_VERSION: &str = concat!("pier-seccomp ", env!("CARGO_PKG_VERSION"), " bpf-1");

/// The on-disk cache of compiled filters under the runtime root.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// A cache stored in `dir` (created on first write).
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Returns the cached program for `profile` or compiles and stores it.
    pub fn get_or_compile(&self, profile: &LinuxSeccomp) -> Result<Program, Error> {
        let _ = &self.dir;
        compile(profile)
    }
}
