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
use std::process::Stdio;
use std::time::{Duration, Instant};

/// The crash points pier knows.
fn crash_points(host: &Host) -> Vec<String> {
    let out = host.run(&["crash-points"]);
    assert!(
        out.status.success(),
        "pier crash-points: {}",
        describe(&out)
    );
    let points: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect();
    assert!(!points.is_empty(), "pier crash-points lists no point");
    points
}

/// How long a pier command may take after a crash before the test calls it hung: a watchdog
/// against a test that never ends, not a timing assertion.
const HUNG: Duration = Duration::from_secs(20);

/// Runs pier with `PIER_CRASH_AT=point`; any outcome is fine (the crash is the point) except
/// hanging: a command that has not ended after [`HUNG`] is killed and reported.
fn crash(host: &Host, point: &str, args: &[&str]) -> Result<(), String> {
    let mut child = host
        .command(args)
        .env("PIER_CRASH_AT", point)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting pier");
    let started = Instant::now();
    while child.try_wait().expect("polling pier").is_none() {
        if started.elapsed() > HUNG {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("crash at {point}: pier {args:?} hung"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// One container's life with a crash at `point`, then gc; the host must be back at `baseline`.
fn crash_at(host: &Host, point: &str, baseline: &Snapshot) -> Result<(), String> {
    let name = unique("crash");
    let mark = format!("PIER_TEST_MARK={name}");
    let run = [
        "run",
        "-d",
        "--name",
        &name,
        "-e",
        &mark,
        "-p",
        "18080:80",
        "--publish-mode",
        "nat",
        "host",
        "sleep",
        "600",
    ];
    let mut ids = vec![name.clone()];
    let mut hung = Vec::new();
    for args in [&run[..], &["stop", "-t", "1", &name], &["rm", "-f", &name]] {
        hung.extend(crash(host, point, args).err());
        ids.extend(host.entries("containers"));
    }
    let gc = host.run(&["gc"]);
    let mut problems = hung;
    if !gc.status.success() {
        problems.push(format!(
            "crash at {point}: pier gc failed: {}",
            describe(&gc)
        ));
    }
    // A container that survived every crash is removed the ordinary way.
    let _ = host.run(&["rm", "-f", &name]);
    let _ = host.run(&["gc"]);
    let after = host.snapshot_settled(baseline);
    if &after != baseline {
        problems.push(format!(
            "crash at {point}: left behind (ids {ids:?}):\n{after:#?}\nbaseline: {baseline:#?}"
        ));
    }
    let cgroups = cgroups_named(&ids);
    if !cgroups.is_empty() {
        problems.push(format!("crash at {point}: cgroups left: {cgroups:?}"));
    }
    let processes = host.processes(&name);
    if !processes.is_empty() {
        problems.push(format!("crash at {point}: processes left: {processes:?}"));
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n"))
    }
}

#[test]
fn nothing_survives_a_crash_at_any_point() {
    if !require_root("nothing_survives_a_crash_at_any_point") {
        return;
    }
    let host = Host::new("crash");
    let points = crash_points(&host);
    let warm = unique("warm");
    host.start(
        &warm,
        &["-p", "18080:80", "--publish-mode", "nat"],
        &["sleep", "600"],
    );
    host.ok(&["rm", "-f", &warm]);
    let mut baseline = host.snapshot();
    assert!(
        baseline.containers.is_empty() && baseline.mounts.is_empty(),
        "{baseline:?}"
    );
    let mut failures = Vec::new();
    for point in &points {
        if let Err(e) = crash_at(&host, point, &baseline) {
            failures.push(e);
            // Judge the next points on their own, whatever this one left.
            baseline = host.snapshot();
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} crash points failed:\n{}",
        failures.len(),
        points.len(),
        failures.join("\n")
    );
}

#[test]
fn a_client_registered_by_a_killed_run_is_removed_by_gc() {
    if !require_root("a_client_registered_by_a_killed_run_is_removed_by_gc") {
        return;
    }
    let host = Host::new("client-gc");
    let web = unique("web");
    let ebpf = ["-p", "18080:80", "--publish-mode", "ebpf"];
    host.start(&web, &ebpf, &["sleep", "600"]);
    let served = host.client_cookies();
    assert_eq!(served.len(), 1, "the publishing container is a client too");
    let name = unique("client");
    let mark = format!("PIER_TEST_MARK={name}");
    let run = [
        "run", "-d", "--name", &name, "-e", &mark, "host", "sleep", "600",
    ];
    crash(&host, "run:network-attached", &run).unwrap();
    let registered = host.client_cookies();
    assert_eq!(
        registered.len(),
        2,
        "registered before the crash: {registered:?}"
    );
    host.ok(&["gc"]);
    assert_eq!(
        host.client_cookies(),
        served,
        "gc unregistered the killed run's client"
    );
    let left = engine_support::processes_with(&[&mark]);
    assert!(
        left.is_empty(),
        "the killed run's container is gone: {left:?}"
    );
    host.ok(&["rm", "-f", &web]);
    assert!(
        host.client_cookies().is_empty(),
        "rm unregistered the publisher"
    );
}
