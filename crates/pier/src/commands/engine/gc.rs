//! `pier gc`: removes what killed pier commands and monitors left behind (links, nft elements,
//! leases, mounts, cgroups, state and runtime directories, processes); prints each removal.
use pier_engine::engine::Engine;

/// Flags of `gc` (none).
#[derive(clap::Args, Debug)]
#[command(
    about = "Clean up after crashed pier commands and monitors",
    long_about = "Find what killed pier commands or monitors left behind — links, nftables \
elements, address leases, mounts, cgroups, state and runtime directories, processes of containers \
that no longer exist — and remove it, printing one line per removal. Every engine command does \
this on start; `pier gc` also reclaims address leases of removed containers, eBPF client entries \
of namespaces that are gone and an older pier's unused pins, and detaches the remote-client tc \
programs from the host's interfaces when no port is published through them.",
    after_help = "Example:\n  pier gc"
)]
pub struct Args {}

pub fn run(_args: Args, engine: &Engine) -> anyhow::Result<i32> {
    for removed in engine.gc()?.removed {
        println!("{removed}");
    }
    Ok(0)
}
