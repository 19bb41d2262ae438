//! Black-box crash injection: for every point `pier crash-points` lists, a container goes through
//! run -d, stop and rm with `PIER_CRASH_AT=<point>` (pier or its monitor SIGKILLs itself there,
//! whichever reaches it), then `pier gc`; afterwards nothing of the container may be left: no
//! link, nft element, lease, mount under the state dir, container/runtime/network record
//! beyond the baseline, cgroup named for the container, or process.
//! The baseline is taken after one clean run and rm, so that the default network (bridge
//! `pier0`, the nft table) already exists: it belongs to the network, not to the container.
//! Each test runs pier in its own network namespace and state directory (engine_support).
mod engine_support;

use engine_support::{cgroups_named, describe, require_root, unique, Host, Snapshot};

/// The crash points pier knows.
fn crash_points(host: &Host) -> Vec<String> {
    let out = host.run(&["crash-points"]);
    assert!(out.status.success(), "pier crash-points: {}", describe(&out));
    let points: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    assert!(!points.is_empty(), "pier crash-points lists no point");
    points
}

/// Runs pier with `PIER_CRASH_AT=point`; any outcome is fine (the crash is the point).
fn crash(host: &Host, point: &str, args: &[&str]) {
    let _ = engine_support::finish(host.command(args).env("PIER_CRASH_AT", point));
}

/// One container's life with a crash at `point`, then gc; asserts the host is back at `baseline`.
fn crash_at(host: &Host, point: &str, baseline: &Snapshot) {
    let name = unique("crash");
    let mark = format!("PIER_TEST_MARK={name}");
    let run = ["run", "-d", "--name", &name, "-e", &mark, "-p", "18080:80", "--publish-mode", "nat", "host", "sleep", "600"];
    let mut ids = vec![name.clone()];
    crash(host, point, &run);
    ids.extend(host.entries("containers"));
    crash(host, point, &["stop", "-t", "1", &name]);
    ids.extend(host.entries("containers"));
    crash(host, point, &["rm", "-f", &name]);
    ids.extend(host.entries("containers"));
    let gc = host.run(&["gc"]);
    assert!(gc.status.success(), "pier gc after a crash at {point}: {}", describe(&gc));
    // A container that survived every crash is removed the ordinary way.
    let _ = host.run(&["rm", "-f", &name]);
    let _ = host.run(&["gc"]);
    let after = host.snapshot();
    assert_eq!(&after, baseline, "crash at {point}: left behind (ids {ids:?})");
    let cgroups = cgroups_named(&ids);
    assert!(cgroups.is_empty(), "crash at {point}: cgroups left: {cgroups:?}");
    let processes = host.processes(&name);
    assert!(processes.is_empty(), "crash at {point}: processes left: {processes:?}");
}

#[test]
fn nothing_survives_a_crash_at_any_point() {
    if !require_root("nothing_survives_a_crash_at_any_point") {
        return;
    }
    let host = Host::new("crash");
    let points = crash_points(&host);
    let warm = unique("warm");
    host.start(&warm, &["-p", "18080:80", "--publish-mode", "nat"], &["sleep", "600"]);
    host.ok(&["rm", "-f", &warm]);
    let baseline = host.snapshot();
    assert!(baseline.containers.is_empty() && baseline.mounts.is_empty(), "{baseline:?}");
    for point in &points {
        crash_at(&host, point, &baseline);
    }
}
