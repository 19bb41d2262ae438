//! pier-net: the networks pier's engine plugs containers into.
//!
//! Theory of operation: [`Netlink`] is a synchronous rtnetlink handle (links, addresses,
//! routes) acting in the namespace it was opened in; [`netns::NetNs`] runs a closure inside a
//! network namespace on a dedicated thread, so no caller thread ever changes namespace;
//! [`ipam::Ipam`] hands out addresses from a network's subnets, persisted per network under a
//! state directory with a file lock; [`pool::SubnetPool`] picks a subnet for a new network that
//! overlaps no host route and no existing network.
//! Privileges: netlink changes need `CAP_NET_ADMIN`, namespaces `CAP_SYS_ADMIN`; IPAM needs none.
//! Tests: unit tests per module; crates/net/tests/priv_net.rs (root, own namespaces).
mod error;
pub mod ipam;
pub mod netlink;
pub mod netns;
pub mod nft;
pub mod pool;
pub mod subnet;

pub use error::NetError;
pub use netlink::{IpvlanMode, LinkSummary, Netlink, Route};
pub use subnet::{Subnet, SubnetError};
