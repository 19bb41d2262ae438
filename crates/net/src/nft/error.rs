//! The errors of the nftables engine: each names the step, and the table, chain or element
//! involved, and carries what `nft` printed.
use std::io;

/// Everything [`super::Table`] can fail at.
#[derive(Debug, thiserror::Error)]
pub enum NftError {
    #[error("nft: {step} ({object}): cannot run the nft binary (install nftables): {source}")]
    Spawn {
        step: &'static str,
        object: String,
        #[source]
        source: io::Error,
    },
    #[error("nft: {step} ({object}): nft failed: {stderr}")]
    Failed {
        step: &'static str,
        object: String,
        stderr: String,
    },
    #[error("nft: {step} ({object}): unparsable JSON from nft: {source}")]
    Parse {
        step: &'static str,
        object: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("nft: {step}: {subnet} is not an IPv4 subnet (the nat engine is IPv4 only)")]
    NotIpv4 { step: &'static str, subnet: String },
    #[error(
        "nft: {step}: {name:?} is not an interface name (1-15 characters, no quotes or spaces)"
    )]
    BadIfname { step: &'static str, name: String },
    #[error("nft: teardown failed at {} step(s): {}", .0.len(), list(.0))]
    Teardown(Vec<NftError>),
}

fn list(errors: &[NftError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}
