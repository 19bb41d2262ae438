//! Shared by pier-net's privileged tests: the root check, address parsing and link lookup.
use pier_net::Netlink;
use std::net::IpAddr;

/// True when the test may run. Without root it prints why it skips, except under CI=true,
/// where a privileged test that cannot run is a failure.
pub fn privileged(test: &str, needs: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return true;
    }
    assert_ne!(
        std::env::var("CI").as_deref(),
        Ok("true"),
        "{test} needs root under CI"
    );
    eprintln!("skipping: {test} needs root ({needs})");
    false
}

pub fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

pub fn index(nl: &mut Netlink, name: &str) -> u32 {
    nl.link_index(name)
        .unwrap()
        .unwrap_or_else(|| panic!("no link {name}"))
}
