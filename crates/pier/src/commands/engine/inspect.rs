//! `pier inspect`: the containers' records as a JSON array (as Docker prints them).
use pier_engine::engine::Engine;

/// Flags of `inspect`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Show containers' records as JSON",
    after_help = "Examples:\n  pier inspect web\n  pier inspect web db | jq '.[].Id'"
)]
pub struct Args {
    /// Container names or ids
    #[arg(required = true)]
    containers: Vec<String>,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let mut records = Vec::new();
    let code = super::for_each(&args.containers, |container| {
        records.push(engine.inspect(container)?);
        Ok(())
    });
    println!("{}", serde_json::to_string_pretty(&records)?);
    Ok(code)
}
