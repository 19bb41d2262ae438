//! pier-publish: port publishing.
//!
//! Theory of operation: a published port is a [`PortMapping`], parsed from Docker's `-p` syntax
//! (`mapping.rs`). The engines that make a mapping reachable live beside it; the first one here is
//! the userspace forwarder ([`proxy`]), which `pier proxy` runs as a drop-in for docker-proxy.
//!
//! Privileges: none for parsing; the proxy needs whatever binding its host port needs.
//! Tests: unit and property tests beside the code; the proxy black-box through the binary in
//! `crates/pier/tests/proxy_*.rs`.
pub mod engine;
mod mapping;
pub mod proxy;

pub use mapping::{MappingError, PortMapping, PortRange, Protocol};
