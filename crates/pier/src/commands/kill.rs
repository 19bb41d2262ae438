//! `pier kill`: sends a signal to the container's init (or, with `--all`, every process).
//!
//! Signals are given as numbers (`9`), names (`KILL`, `SIGKILL`, any case) or real-time
//! offsets (`RTMIN+3`, `SIGRTMAX-1`), as runc accepts them.
use anyhow::bail;
use nix::sys::signal::Signal;
use pier_runtime::Runtime;
use std::str::FromStr;

/// Flags of `kill`.
#[derive(clap::Args, Debug)]
#[command(
    about = "Send a signal to a container's init process (default SIGTERM)",
    long_about = "Send a signal to the init process of a container, or with --all to every \
process in it. SIGNAL is a number or a name with or without SIG, in any case; default TERM.\n\n\
Example:\n  pier kill web\n  pier kill web KILL\n  pier kill --all web 9"
)]
pub struct Args {
    /// Signal every process of the container, not only its init
    #[arg(short = 'a', long)]
    pub all: bool,
    /// Container id
    pub id: String,
    /// Signal number or name
    #[arg(default_value = "SIGTERM", allow_hyphen_values = true)]
    pub signal: String,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    let signal = parse_signal(&args.signal)?;
    rt.kill(&args.id, signal, args.all)?;
    Ok(0)
}

/// Parses a signal as runc does: a number, or a name with or without `SIG`, case-insensitive.
pub fn parse_signal(text: &str) -> anyhow::Result<i32> {
    let rtmin = libc::SIGRTMIN();
    let rtmax = libc::SIGRTMAX();
    if let Ok(number) = text.parse::<i32>() {
        if (1..=rtmax).contains(&number) {
            return Ok(number);
        }
        bail!("invalid signal {text:?}: signal numbers are 1 to {rtmax}");
    }
    let upper = text.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(signal) = realtime(name, rtmin, rtmax) {
        return Ok(signal);
    }
    match Signal::from_str(&format!("SIG{name}")) {
        Ok(signal) => Ok(signal as i32),
        Err(_) => bail!("unknown signal {text:?}"),
    }
}

/// `RTMIN`, `RTMIN+N`, `RTMAX`, `RTMAX-N` within the real-time range.
fn realtime(name: &str, rtmin: i32, rtmax: i32) -> Option<i32> {
    let signal = if let Some(rest) = name.strip_prefix("RTMIN") {
        rtmin + offset(rest, '+')?
    } else if let Some(rest) = name.strip_prefix("RTMAX") {
        rtmax - offset(rest, '-')?
    } else {
        return None;
    };
    (rtmin..=rtmax).contains(&signal).then_some(signal)
}

fn offset(rest: &str, sign: char) -> Option<i32> {
    if rest.is_empty() {
        return Some(0);
    }
    rest.strip_prefix(sign)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_names_in_any_case() {
        for text in ["9", "KILL", "kill", "SIGKILL", "sigkill", "SigKill"] {
            assert_eq!(parse_signal(text).unwrap(), libc::SIGKILL, "{text}");
        }
        assert_eq!(parse_signal("TERM").unwrap(), libc::SIGTERM);
        assert_eq!(parse_signal("hup").unwrap(), libc::SIGHUP);
        assert_eq!(parse_signal("SIGWINCH").unwrap(), libc::SIGWINCH);
    }

    #[test]
    fn realtime_signals() {
        assert_eq!(parse_signal("RTMIN").unwrap(), libc::SIGRTMIN());
        assert_eq!(parse_signal("SIGRTMIN+3").unwrap(), libc::SIGRTMIN() + 3);
        assert_eq!(parse_signal("rtmax-1").unwrap(), libc::SIGRTMAX() - 1);
        assert!(parse_signal("RTMIN+99").is_err());
    }

    #[test]
    fn unknown_signals_are_named_in_the_error() {
        for text in ["FOO", "SIGFOO", "0", "65", "-9", ""] {
            let err = parse_signal(text).unwrap_err().to_string();
            assert!(err.contains(&format!("{text:?}")), "{err}");
        }
    }
}
