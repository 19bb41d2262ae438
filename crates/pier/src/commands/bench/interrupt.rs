//! Ctrl-C for long benchmarks: stop measuring, clean up, report what was measured.
//!
//! Theory of operation: SIGINT, SIGTERM and SIGHUP are blocked in the benchmark (before it starts
//! any thread or child, so all inherit the mask) and a thread waits for them with `sigwait`. On
//! one it sets [`STOP`] (the schedule checks it before every cell) and SIGKILLs the running load
//! generator, whose pid the caller keeps in the given atomic, so the current cell ends at once.
//! The main thread then unwinds its cleanup stack as on any other exit. No signal handler runs,
//! so nothing async-signal-unsafe can happen, and no `unsafe` is needed.
//!
//! Privileges: none. Exercised by hand (Ctrl-C) and by tests/bench_net.rs (SIGINT to the run).
use nix::sys::signal::{kill, SigSet, Signal};
use nix::unistd::Pid;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set once a stop signal arrived.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// Blocks the stop signals and starts the thread that waits for them; `running` holds the pid of
/// the child to kill on a stop (0: none).
pub fn install(running: &'static AtomicI32) -> anyhow::Result<()> {
    let mut set = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        set.add(signal);
    }
    set.thread_block()
        .map_err(|e| anyhow::anyhow!("blocking SIGINT/SIGTERM/SIGHUP: {e}"))?;
    std::thread::spawn(move || loop {
        let Ok(signal) = set.wait() else {
            continue;
        };
        if !STOP.swap(true, Ordering::SeqCst) {
            eprintln!("\npier bench: {signal} received: stopping and cleaning up");
        }
        let pid = running.load(Ordering::SeqCst);
        if pid > 0 {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    });
    Ok(())
}

/// True once a stop signal arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}
