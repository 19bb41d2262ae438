//! `pier features`: prints the OCI features document (what this runtime supports).
/// Flags of `features`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Print the OCI features this runtime supports, as JSON",
    long_about = "Print the OCI runtime features document as JSON: the spec versions, hooks, \
mount options, namespaces, capabilities, cgroup and seccomp support of pier.\n\n\
Example:\n  pier features"
)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    println!(
        "{}",
        serde_json::to_string_pretty(&pier_runtime::features())?
    );
    Ok(0)
}
