//! `pier bench` (minimal shape so the command line compiles; the clients helper writes the
//! benchmark itself with this same signature).

/// Flags of `pier bench`.
#[derive(clap::Args, Debug)]
#[command(about = "Measure container start time against crun and runc")]
pub struct Args {
    /// The scenario to run
    #[arg(value_name = "SCENARIO")]
    scenario: Option<String>,
}

/// Runs the benchmark; returns the exit code.
pub fn run(args: Args) -> anyhow::Result<i32> {
    anyhow::bail!(
        "pier bench {} is not built yet",
        args.scenario.as_deref().unwrap_or("")
    )
}
