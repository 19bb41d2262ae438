//! `pier logs`: what a container wrote to stdout and stderr (captured by its monitor, size-capped).
use pier_engine::engine::Engine;

/// Flags of `logs`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Print a container's output",
    after_help = "Examples:\n  pier logs web\n  pier logs -f --tail 20 web"
)]
pub struct Args {
    /// Keep printing new output until the container exits
    #[arg(short = 'f', long)]
    follow: bool,
    /// Only the last N lines (or `all`)
    #[arg(short = 'n', long, value_name = "N", value_parser = parse_tail, default_value = "all")]
    tail: Tail,
    /// Container name or id (a unique prefix of an id will do)
    container: String,
}

/// `--tail`: a line count or every line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tail(Option<usize>);

fn parse_tail(text: &str) -> Result<Tail, String> {
    if text == "all" {
        return Ok(Tail(None));
    }
    text.parse()
        .map(|n| Tail(Some(n)))
        .map_err(|_| format!("{text:?} is neither a line count nor `all`"))
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    engine.logs(
        &args.container,
        args.follow,
        args.tail.0,
        &mut stdout,
        &mut stderr,
    )?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_is_a_count_or_all() {
        assert_eq!(parse_tail("all"), Ok(Tail(None)));
        assert_eq!(parse_tail("10"), Ok(Tail(Some(10))));
        assert!(parse_tail("-1").unwrap_err().contains("\"-1\""));
    }
}
