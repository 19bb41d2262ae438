//! `pier spec`: writes a default config.json into the bundle directory, never over an old one.
use anyhow::{bail, Context};
use oci_spec::runtime::{Linux, Spec};
use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::PathBuf;

/// Flags of `spec`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Write a default config.json to start a bundle from",
    long_about = "Write a default OCI config.json into the bundle directory (default: the current \
one): the program is `sh` with a terminal, the rootfs is ./rootfs, with the usual namespaces, \
mounts, masked and read-only paths. An existing config.json is never overwritten. With \
--rootless the spec maps the caller's uid and gid to root in a user namespace.\n\n\
Example:\n  mkdir -p web/rootfs && pier spec --bundle web"
)]
pub struct Args {
    /// Directory to write config.json into
    #[arg(short = 'b', long, default_value = ".", value_name = "DIR")]
    pub bundle: PathBuf,
    /// Write a spec for a container started by an unprivileged user
    #[arg(long)]
    pub rootless: bool,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let path = super::absolute(&args.bundle.join("config.json"));
    let mut spec = pier_runtime::default_spec();
    if args.rootless {
        make_rootless(&mut spec);
    }
    let json = serde_json::to_string_pretty(&spec)?;
    let mut file = match OpenOptions::new().write(true).create_new(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            bail!("file {} exists: remove it first", path.display())
        }
        Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
    };
    writeln!(file, "{json}").with_context(|| format!("writing {}", path.display()))?;
    Ok(0)
}

/// The caller's ids mapped to root in a user namespace, the mounts a user may make.
fn make_rootless(spec: &mut Spec) {
    let uid = nix::unistd::geteuid().as_raw();
    let gid = nix::unistd::getegid().as_raw();
    let template = Spec::rootless(uid, gid);
    spec.set_mounts(template.mounts().clone());
    spec.set_linux(Some(Linux::rootless(uid, gid)));
}
