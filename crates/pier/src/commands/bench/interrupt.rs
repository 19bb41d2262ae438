//! Ctrl-C for long benchmarks: stop measuring, clean up, report what was measured.
//!
//! Theory of operation: signal-hook catches SIGINT, SIGTERM and SIGHUP (its handler only writes to
//! a self-pipe) and a thread of ours reads them. On one it sets [`STOP`] (the schedule checks it
//! before every cell) and SIGKILLs the running load generator, whose pid the caller keeps in the
//! given atomic, so the current cell ends at once. The main thread then unwinds its cleanup stack
//! as on any other exit. The signals are caught, not blocked: a blocked mask would be inherited by
//! every child (exec keeps it), and the containers, monitors and forwarders the benchmark starts
//! must still stop on SIGTERM; a caught signal is reset to its default at exec.
//!
//! Privileges: none. Exercised by hand (Ctrl-C) and by tests/bench_net.rs (SIGINT to the run).
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// Set once a stop signal arrived.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// Catches the stop signals and starts the thread that handles them; `running` holds the pid of
/// the child to kill on a stop (0: none).
pub fn install(running: &'static AtomicI32) -> anyhow::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM, SIGHUP])
        .map_err(|e| anyhow::anyhow!("catching SIGINT/SIGTERM/SIGHUP: {e}"))?;
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if !STOP.swap(true, Ordering::SeqCst) {
                eprintln!("\npier bench: signal {signal} received: stopping and cleaning up");
            }
            let pid = running.load(Ordering::SeqCst);
            if pid > 0 {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    });
    Ok(())
}

/// Catches the stop signals without a thread, for a caller that must stay single-threaded (`bench
/// start` `setns`es itself into a mount namespace); returns the flag a stop signal sets.
pub fn catch_without_thread() -> anyhow::Result<std::sync::Arc<AtomicBool>> {
    let flag = std::sync::Arc::new(AtomicBool::new(false));
    for signal in [SIGINT, SIGTERM, SIGHUP] {
        signal_hook::flag::register(signal, std::sync::Arc::clone(&flag))
            .map_err(|e| anyhow::anyhow!("catching signal {signal}: {e}"))?;
    }
    Ok(flag)
}

/// True once a stop signal arrived.
pub fn stopped() -> bool {
    STOP.load(Ordering::SeqCst)
}
