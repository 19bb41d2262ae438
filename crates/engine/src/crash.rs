//! Crash injection for tests: `PIER_CRASH_AT=<point>` makes pier SIGKILL itself at that point.
//!
//! Theory of operation: the lifecycle calls [`point`] at each named step of `run` (in the front
//! and in the monitor), `stop` and `rm`, right after the step's effect happened and was recorded
//! (or, for `*:before-*` points, right before). When the environment variable names the point,
//! the process raises SIGKILL: nothing of pier's runs after it, as when the OOM killer or a
//! `kill -9` strikes, and the next `pier gc` (or any engine command) must leave nothing behind.
//! Unset, a point is a string comparison of an absent variable. [`POINTS`] lists them all, for
//! the hidden command that exposes them and the test that loops over them.
//! Privileges: none. Tests: unit test below; crates/pier/tests (crash injection loop).

/// The environment variable naming the point to crash at.
pub const ENV: &str = "PIER_CRASH_AT";

/// Every crash point, in the order a `run -d`, `stop`, `rm` pass through them.
pub const POINTS: &[&str] = &[
    "run:front-forked",
    "run:registered",
    "run:rootfs-prepared",
    "run:network-planned",
    "run:publish-planned",
    "run:spec-written",
    "run:created",
    "run:network-attached",
    "run:publish-applied",
    "run:started",
    "run:reported",
    "monitor:exited",
    "monitor:torn-down",
    "stop:signalled",
    "stop:killed",
    "rm:killed",
    "rm:torn-down",
];

/// SIGKILLs the calling process if `PIER_CRASH_AT` names `name`.
pub fn point(name: &str) {
    debug_assert!(POINTS.contains(&name), "unknown crash point {name}");
    if std::env::var_os(ENV).is_some_and(|v| v == name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_are_unique_and_unset_is_a_no_op() {
        let mut sorted = POINTS.to_vec();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), POINTS.len());
        // The test environment does not set the variable: reaching the end proves the no-op.
        if std::env::var_os(ENV).is_none() {
            point(POINTS[0]);
        }
    }
}
