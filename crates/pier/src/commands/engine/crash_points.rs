//! `pier crash-points` (hidden): the names `PIER_CRASH_AT` accepts, one per line, in the order a
//! `run -d`, `stop`, `rm` pass through them; the crash-injection tests loop over this list.
use pier_engine::crash::POINTS;

/// Flags of `crash-points` (none).
#[derive(clap::Args, Debug)]
#[command(about = "List the crash-injection points (PIER_CRASH_AT=<point>; for tests)")]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    for point in POINTS {
        println!("{point}");
    }
    Ok(0)
}
