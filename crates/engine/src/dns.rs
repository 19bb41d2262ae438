//! The /etc files a container's network needs: resolv.conf, hosts, hostname.
//!
//! Theory of operation: resolv.conf is the host's, with loopback nameservers (a stub resolver such
//! as systemd-resolved's 127.0.0.53, unreachable from a container's namespace) replaced by the
//! upstream servers the stub uses (`/run/systemd/resolve/resolv.conf`), or by Google's public
//! servers as Docker does when none is left; hosts names the container (hostname and name) at
//! each of its addresses beside the usual localhost lines. Pure text in, text out; the engine
//! writes the files into the container directory and the spec binds them.
//! Tests: unit tests below.
use std::net::IpAddr;

/// The container's resolv.conf from the host's text (and the stub's upstream file, if any).
pub fn resolv_conf(host: &str, upstream: Option<&str>) -> String {
    let _ = (host, upstream);
    todo!("engine-net helper")
}

/// The container's /etc/hosts.
pub fn hosts(hostname: &str, name: Option<&str>, addresses: &[IpAddr]) -> String {
    let _ = (hostname, name, addresses);
    todo!("engine-net helper")
}
