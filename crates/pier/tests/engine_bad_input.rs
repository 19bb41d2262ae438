//! Black-box tests of issue 4's bad-input list: each case exits 125, names the culprit, and
//! creates nothing — the snapshot of links, nft ruleset, leases, container, runtime and network
//! records and mounts is the same before and after.
//! Each test runs pier in its own network namespace and state directory (engine_support).
mod engine_support;

use engine_support::{require_root, temp_dir, unique, Host};

/// Runs `args`, expecting a refusal naming `culprit` that changes nothing.
fn refused(host: &Host, args: &[&str], culprit: &str) {
    let before = host.snapshot();
    host.fails_naming(args, culprit);
    assert_eq!(
        host.snapshot_settled(&before),
        before,
        "pier {args:?} left something behind"
    );
}

#[test]
fn refused_runs_create_nothing() {
    if !require_root("refused_runs_create_nothing") {
        return;
    }
    let host = Host::new("badrun");
    let net = unique("bad");
    host.ok(&["network", "create", "--subnet", "198.18.240.0/24", &net]);
    let taken = unique("taken");
    host.start(
        &taken,
        &["--network", &net, "--ip", "198.18.240.10"],
        &["sleep", "600"],
    );
    let file = temp_dir();
    let not_a_dir = file.path().join("file");
    std::fs::write(&not_a_dir, "").unwrap();
    let not_a_dir = not_a_dir.to_str().unwrap();
    let cases: &[(&[&str], &str)] = &[
        (
            &["run", "--network", "pier-test-nonet", "host", "true"],
            "pier-test-nonet",
        ),
        (
            &[
                "run",
                "--network",
                &net,
                "--ip",
                "198.18.241.5",
                "host",
                "true",
            ],
            "198.18.241.5",
        ),
        (
            &[
                "run",
                "--network",
                &net,
                "--ip",
                "198.18.240.10",
                "host",
                "true",
            ],
            "198.18.240.10",
        ),
        (
            &[
                "run",
                "--network",
                &net,
                "--ip",
                "not-an-ip",
                "host",
                "true",
            ],
            "not-an-ip",
        ),
        (&["run", "--name", &taken, "host", "true"], &taken),
        (
            &["run", "/pier-test-no-such-root", "true"],
            "/pier-test-no-such-root",
        ),
        (&["run", not_a_dir, "true"], not_a_dir),
        (&["run", "-e", "=oops", "host", "true"], "=oops"),
        (&["run", "-v", "relative:/x", "host", "true"], "relative:/x"),
        (
            &["run", "-v", "/tmp:/x:bogus", "host", "true"],
            "/tmp:/x:bogus",
        ),
        (&["run", "-v", "/tmp", "host", "true"], "/tmp"),
        (&["run", "--memory", "lots", "host", "true"], "lots"),
        (&["run", "--cpus", "half", "host", "true"], "half"),
        (&["run", "--ulimit", "nofile", "host", "true"], "nofile"),
        (
            &["run", "--cap-add", "NOT_A_CAP", "host", "true"],
            "NOT_A_CAP",
        ),
        (
            &[
                "run",
                "--security-opt",
                "seccomp=/pier-test-no-profile",
                "host",
                "true",
            ],
            "/pier-test-no-profile",
        ),
        (&["run", "-p", "99999:80", "host", "true"], "99999"),
        (
            &[
                "run",
                "--env-file",
                "/pier-test-no-env-file",
                "host",
                "true",
            ],
            "/pier-test-no-env-file",
        ),
    ];
    for (args, culprit) in cases {
        refused(&host, args, culprit);
    }
    assert_eq!(host.ps_all().len(), 1, "only the first container exists");
}

#[test]
fn refused_networks_create_nothing() {
    if !require_root("refused_networks_create_nothing") {
        return;
    }
    let host = Host::new("badnet");
    host.netns.dummy("pier-test-rt", "198.19.250.1/24");
    let net = unique("first");
    host.ok(&["network", "create", "--subnet", "198.18.100.0/24", &net]);
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "network",
                "create",
                "--subnet",
                "198.19.250.0/24",
                &unique("route"),
            ],
            "198.19.250.0/24",
        ),
        (
            &[
                "network",
                "create",
                "--subnet",
                "198.18.100.128/25",
                &unique("overlap"),
            ],
            "198.18.100.128/25",
        ),
        (
            &["network", "create", "--subnet", "198.18.101.0/24", &net],
            &net,
        ),
        (
            &[
                "network",
                "create",
                "--subnet",
                "198.18.102.0/24",
                "--gateway",
                "198.18.103.1",
                &unique("gw"),
            ],
            "198.18.103.1",
        ),
        (
            &[
                "network",
                "create",
                "-d",
                "macvlan",
                "--parent",
                "pier-test-noif",
                "--subnet",
                "198.18.104.0/24",
                &unique("mv"),
            ],
            "pier-test-noif",
        ),
        (
            &["network", "rm", "pier-test-no-such-net"],
            "pier-test-no-such-net",
        ),
        (
            &["network", "inspect", "pier-test-no-such-net"],
            "pier-test-no-such-net",
        ),
    ];
    for (args, culprit) in cases {
        refused(&host, args, culprit);
    }
}

#[test]
fn unknown_containers_are_named() {
    if !require_root("unknown_containers_are_named") {
        return;
    }
    let host = Host::new("nosuch");
    for verb in [
        &["logs"][..],
        &["stop"],
        &["kill"],
        &["rm"],
        &["inspect"],
        &["wait"],
        &["port"],
        &["exec"],
    ] {
        let mut args = verb.to_vec();
        args.push("pier-test-nosuch");
        if verb == ["exec"] {
            args.push("true");
        }
        refused(&host, &args, "pier-test-nosuch");
    }
}
