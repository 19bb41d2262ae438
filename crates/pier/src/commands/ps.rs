//! `pier ps`: lists the container's processes, as a JSON array of pids or as `ps` lines.
//!
//! The table form runs the host's `ps` (default `-ef`, or the options after `--`), finds the PID
//! column in its header and keeps the header and the lines of the container's pids, as runc does.
use anyhow::{bail, Context};
use pier_runtime::Runtime;
use std::process::Command;

/// Flags of `ps`.
#[derive(clap::Args, Debug)]
#[command(
    about = "List the processes running in a container",
    long_about = "List the processes of a container: --format json prints a JSON array of their \
host pids and nothing else; the table form prints the lines of `ps -ef` (or of the ps options \
given after --) that belong to the container.\n\n\
Example:\n  pier ps web\n  pier ps --format json web\n  pier ps web -o pid,rss,comm"
)]
pub struct Args {
    /// Output format
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Container id
    pub id: String,
    /// Options for ps (default -ef), after the id as go-runc passes them, or after --
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PS_OPTIONS"
    )]
    pub ps_options: Vec<String>,
}

/// `--format` of `ps`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The lines of `ps` for the container's processes
    Table,
    /// A JSON array of host pids
    Json,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    let pids = rt.ps(&args.id)?;
    match args.format {
        Format::Json => println!("{}", serde_json::to_string(&pids)?),
        Format::Table => print!("{}", table(&pids, &args.ps_options)?),
    }
    Ok(0)
}

fn table(pids: &[i32], options: &[String]) -> anyhow::Result<String> {
    let options = if options.is_empty() {
        vec![String::from("-ef")]
    } else {
        options.to_vec()
    };
    let output = Command::new("ps")
        .args(&options)
        .output()
        .context("running ps")?;
    if !output.status.success() {
        bail!(
            "ps {} failed: {}",
            options.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    filter(&String::from_utf8_lossy(&output.stdout), pids)
}

/// The header and the lines whose PID column is one of `pids`.
fn filter(ps_output: &str, pids: &[i32]) -> anyhow::Result<String> {
    let mut lines = ps_output.lines();
    let header = lines.next().unwrap_or_default();
    let Some(column) = header.split_whitespace().position(|name| name == "PID") else {
        bail!("ps output has no PID column: {header:?}");
    };
    let mut out = format!("{header}\n");
    for line in lines {
        let pid = line
            .split_whitespace()
            .nth(column)
            .and_then(|p| p.parse().ok());
        if pid.is_some_and(|pid: i32| pids.contains(&pid)) {
            out.push_str(line);
            out.push('\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_header_and_container_lines() {
        let ps = "UID PID PPID C STIME TTY TIME CMD\n\
                  root 1 0 0 05:00 ? 00:00:01 /sbin/init\n\
                  root 42 1 0 05:01 ? 00:00:00 sleep 100\n\
                  root 420 1 0 05:01 ? 00:00:00 sh\n";
        let out = filter(ps, &[42]).unwrap();
        assert_eq!(
            out,
            "UID PID PPID C STIME TTY TIME CMD\nroot 42 1 0 05:01 ? 00:00:00 sleep 100\n"
        );
    }

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn ps_options_after_the_id_with_or_without_dashes() {
        use clap::Parser;
        let w = Wrapper::try_parse_from(["ps", "--format", "table", "c1", "-ef"]).unwrap();
        assert_eq!(w.args.ps_options, ["-ef"]);
        let w = Wrapper::try_parse_from(["ps", "c1", "--", "-o", "pid,comm"]).unwrap();
        assert_eq!(w.args.ps_options, ["-o", "pid,comm"]);
        let w = Wrapper::try_parse_from(["ps", "--format", "json", "c1"]).unwrap();
        assert!(w.args.ps_options.is_empty());
        assert_eq!(w.args.format, Format::Json);
    }

    #[test]
    fn finds_pid_column_anywhere() {
        let out = filter("COMMAND PID\nsleep 7\nsh 8\n", &[8]).unwrap();
        assert_eq!(out, "COMMAND PID\nsh 8\n");
        assert!(filter("COMMAND\nsleep\n", &[8]).is_err());
    }
}
