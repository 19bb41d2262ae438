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

/// Where a host running systemd-resolved keeps the upstream servers its stub forwards to.
pub const UPSTREAM_RESOLV_CONF: &str = "/run/systemd/resolve/resolv.conf";

/// Docker's fallback when no usable nameserver is left: Google's public servers.
const FALLBACK_NAMESERVERS: [&str; 2] = ["8.8.8.8", "8.8.4.4"];

/// The address of a `nameserver ADDRESS` line (`None` for other lines and bad addresses).
fn nameserver(line: &str) -> Option<IpAddr> {
    let mut words = line.split_whitespace();
    match (words.next(), words.next()) {
        (Some("nameserver"), Some(addr)) => addr.parse().ok(),
        _ => None,
    }
}

/// A nameserver a container cannot reach: one on the host's loopback (a local stub).
fn is_loopback_nameserver(line: &str) -> bool {
    nameserver(line).is_some_and(|ip| ip.is_loopback())
}

/// The container's resolv.conf from the host's text (and the stub's upstream file, if any).
pub fn resolv_conf(host: &str, upstream: Option<&str>) -> String {
    let stubbed = host.lines().any(is_loopback_nameserver);
    let base = match (stubbed, upstream) {
        (true, Some(upstream)) => upstream,
        _ => host,
    };
    let kept: Vec<&str> = base
        .lines()
        .filter(|line| !is_loopback_nameserver(line))
        .collect();
    let mut text: String = kept.iter().map(|line| format!("{line}\n")).collect();
    if !kept.iter().any(|line| nameserver(line).is_some()) {
        for server in FALLBACK_NAMESERVERS {
            text += &format!("nameserver {server}\n");
        }
    }
    text
}

/// The container's /etc/hosts.
pub fn hosts(hostname: &str, name: Option<&str>, addresses: &[IpAddr]) -> String {
    let mut text = String::from(
        "127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         ff00::0\tip6-mcastprefix\n\
         ff02::1\tip6-allnodes\n\
         ff02::2\tip6-allrouters\n",
    );
    let mut names = hostname.to_string();
    if let Some(name) = name.filter(|n| *n != hostname) {
        names = format!("{names} {name}");
    }
    for address in addresses {
        text += &format!("{address}\t{names}\n");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_without_a_stub_keeps_its_file() {
        let host = "# generated\nsearch example.org\nnameserver 10.255.255.53\noptions ndots:2\n";
        assert_eq!(resolv_conf(host, None), host);
        assert_eq!(resolv_conf(host, Some("nameserver 1.1.1.1\n")), host);
    }

    #[test]
    fn a_stub_resolver_is_replaced_by_its_upstream_servers() {
        let host = "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch lan\n";
        let upstream = "nameserver 192.0.2.1\nnameserver 2001:db8::1\nsearch lan\n";
        assert_eq!(resolv_conf(host, Some(upstream)), upstream);
    }

    #[test]
    fn loopback_servers_are_dropped_and_google_fills_an_empty_list() {
        let host = "nameserver 127.0.0.53\nnameserver ::1\nsearch lan\n";
        assert_eq!(
            resolv_conf(host, None),
            "search lan\nnameserver 8.8.8.8\nnameserver 8.8.4.4\n"
        );
        let mixed = "nameserver 127.0.1.1\nnameserver 192.0.2.7\n";
        assert_eq!(
            resolv_conf(mixed, Some("nameserver 127.0.0.1\n")),
            "nameserver 8.8.8.8\nnameserver 8.8.4.4\n"
        );
        assert_eq!(resolv_conf(mixed, None), "nameserver 192.0.2.7\n");
    }

    #[test]
    fn an_empty_host_file_gets_the_fallback_servers() {
        assert_eq!(
            resolv_conf("", None),
            "nameserver 8.8.8.8\nnameserver 8.8.4.4\n"
        );
    }

    #[test]
    fn hosts_names_the_container_at_each_address_once() {
        let addresses = ["198.18.0.2".parse().unwrap(), "2001:2::2".parse().unwrap()];
        let text = hosts("web", Some("web"), &addresses);
        assert!(text.starts_with("127.0.0.1\tlocalhost\n::1\tlocalhost"));
        assert!(
            text.ends_with("198.18.0.2\tweb\n2001:2::2\tweb\n"),
            "{text}"
        );
        let named = hosts("abc123", Some("web"), &addresses[..1]);
        assert!(named.ends_with("\n198.18.0.2\tabc123 web\n"), "{named}");
    }

    #[test]
    fn hosts_without_addresses_has_only_the_localhost_lines() {
        let text = hosts("abc123", None, &[]);
        assert_eq!(text.lines().count(), 6);
        assert!(!text.contains("abc123"));
    }
}
