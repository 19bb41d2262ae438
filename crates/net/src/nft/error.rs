//! The errors of the nftables engine: each names the step, and the table, chain or element
//! involved, and carries what `nft` printed or the errno the kernel answered a netlink batch with.
use std::io;

use nix::errno::Errno;

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
    #[error("nft: {step} ({object}): the kernel refused the netlink transaction: {source}")]
    Netlink {
        step: &'static str,
        object: String,
        #[source]
        source: nix::errno::Errno,
    },
    #[error("nft: {step} ({object}): unparsable JSON from nft: {source}")]
    Parse {
        step: &'static str,
        object: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("nft: {step}: {mapping}: the host address and the container are of different families (kernel NAT cannot translate between IPv4 and IPv6)")]
    Family { step: &'static str, mapping: String },
    #[error("nft: publish: owner {owner:?} is not a container id (letters, digits, - _ .)")]
    BadOwner { owner: String },
    #[error(
        "nft: {step}: {name:?} is not an interface name (1-15 characters, no quotes or spaces)"
    )]
    BadIfname { step: &'static str, name: String },
    #[error("nft: teardown failed at {} step(s): {}", .0.len(), list(.0))]
    Teardown(Vec<NftError>),
}

impl NftError {
    /// nft refused because a table, map or set named in the batch does not exist.
    pub fn is_missing(&self) -> bool {
        self.stderr_has("No such file or directory") || self.errno() == Some(Errno::ENOENT)
    }

    /// nft refused because an element's key exists with another value.
    pub fn is_exists(&self) -> bool {
        self.stderr_has("File exists") || self.errno() == Some(Errno::EEXIST)
    }

    fn errno(&self) -> Option<Errno> {
        match self {
            NftError::Netlink { source, .. } => Some(*source),
            _ => None,
        }
    }

    fn stderr_has(&self, text: &str) -> bool {
        matches!(self, NftError::Failed { stderr, .. } if stderr.contains(text))
    }
}

fn list(errors: &[NftError]) -> String {
    let texts: Vec<String> = errors.iter().map(ToString::to_string).collect();
    texts.join("; ")
}
