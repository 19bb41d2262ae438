//! `pier bench`: scenario benchmarks, reproducible on any machine, side by side with the real peers
//! (issue 6). Each scenario is a subcommand; today `start` (container start time, issue 2).
//!
//! Layout: `start.rs` runs the scenario; `bundle.rs` builds its OCI bundles; `rows.rs` says what is
//! measured and how; `runner.rs` times one run; `stats.rs` holds the medians and the interleaved
//! schedule; `report.rs` and `table.rs` print the results and write the JSON.
//!
//! Benchmarks are never timed tests: tests/bench_start.rs checks the JSON shape only.
mod bundle;
mod report;
mod rows;
mod runner;
mod start;
mod stats;
mod table;

/// Flags of `pier bench`.
#[derive(clap::Args, Debug)]
#[command(about = "Measure pier against its peers (crun, runc, ...) on this machine")]
pub struct Args {
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(clap::Subcommand, Debug)]
enum Scenario {
    /// Container start time of pier, crun, runc and the bare namespace floor, without seccomp and
    /// with Docker's default profile
    Start(start::Args),
}

/// Runs the benchmark; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.scenario {
        Scenario::Start(args) => start::run(args),
    }
}
