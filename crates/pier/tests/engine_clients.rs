//! Black-box tests of containers as clients of the ebpf programs (the pinned `pier_clients`
//! map, keyed by netns cookie): a bridged container started before any pin existed is
//! registered once a later publish makes them; a `--network container:` joiner leaving keeps the
//! namespace's entry, and the container it joined leaving takes the namespace off its network
//! (link, lease and entry), as Docker does.
//! Each test runs pier in its own network namespace, state directory and pin directory
//! (engine_support); the map is read with bpftool.
mod engine_support;

use engine_support::{require_root, unique, Host};

/// The netns cookie container `id`'s record holds.
fn recorded_cookie(host: &Host, id: &str) -> Option<u64> {
    let path = host
        .state_dir()
        .join("containers")
        .join(id)
        .join("record.json");
    let text = std::fs::read_to_string(&path).expect("reading the record");
    let record: serde_json::Value = serde_json::from_str(&text).expect("record JSON");
    record["client_cookie"].as_u64()
}

const EBPF: [&str; 4] = ["-p", "18080:80", "--publish-mode", "ebpf"];

#[test]
fn a_container_started_before_the_pins_is_registered_by_the_publish_that_makes_them() {
    if !require_root(
        "a_container_started_before_the_pins_is_registered_by_the_publish_that_makes_them",
    ) {
        return;
    }
    let host = Host::new("clients-late");
    let early = unique("early");
    let early_id = host.start(&early, &[], &["sleep", "600"]);
    assert!(
        !host.bpf_pins().exists(),
        "nothing published yet, so no pins"
    );
    let web = unique("web");
    let web_id = host.start(&web, &EBPF, &["sleep", "600"]);
    let registered = host.client_cookies();
    assert_eq!(
        registered.len(),
        2,
        "the container started before the pins is a client once they exist: {registered:?}"
    );
    let early_cookie = recorded_cookie(&host, &early_id);
    let web_cookie = recorded_cookie(&host, &web_id).expect("the publisher's cookie");
    assert!(early_cookie.is_some_and(|c| registered.contains(&c)));
    host.ok(&["rm", "-f", &early]);
    assert_eq!(host.client_cookies(), [web_cookie], "rm unregistered it");
    host.ok(&["rm", "-f", &web]);
    assert!(
        host.client_cookies().is_empty(),
        "rm unregistered the publisher"
    );
}

#[test]
fn a_joiner_leaving_keeps_the_entry_and_the_owner_leaving_takes_the_network() {
    if !require_root("a_joiner_leaving_keeps_the_entry_and_the_owner_leaving_takes_the_network") {
        return;
    }
    let host = Host::new("clients-join");
    let web = unique("web");
    let web_id = host.start(&web, &EBPF, &["sleep", "600"]);
    let cookie = recorded_cookie(&host, &web_id).expect("the publisher's cookie");
    assert_eq!(host.client_cookies(), [cookie]);
    let network = format!("container:{web}");
    let first = unique("first");
    host.start(&first, &["--network", &network], &["sleep", "600"]);
    host.ok(&["rm", "-f", &first]);
    assert_eq!(
        host.client_cookies(),
        [cookie],
        "a joiner leaving keeps the entry of the namespace it joined"
    );
    let joiner = unique("joiner");
    host.start(&joiner, &["--network", &network], &["sleep", "600"]);
    assert!(host
        .ok(&["exec", &joiner, "cat", "/proc/net/dev"])
        .contains("eth0"));
    host.ok(&["rm", "-f", &web]);
    assert!(
        host.client_cookies().is_empty(),
        "the owner took the namespace off its network: its entry went too"
    );
    let devices = host.ok(&["exec", &joiner, "cat", "/proc/net/dev"]);
    assert!(
        !devices.contains("eth0"),
        "the joiner keeps only lo, as in Docker: {devices}"
    );
    let leases = format!("{:?}", host.snapshot().leases);
    assert!(
        !leases.contains(&web_id),
        "the owner's address was released, not held by the joiner: {leases}"
    );
    host.ok(&["gc"]);
    host.ok(&["rm", "-f", &joiner]);
    assert!(host.client_cookies().is_empty());
}
