//! `pier list`: every container under `--root`, as a table, JSON, or ids only.
use pier_runtime::{Runtime, State};
use std::fmt::Write;

/// Flags of `list`.
#[derive(clap::Args, Debug)]
#[command(
    visible_alias = "ls",
    about = "List the containers under --root",
    long_about = "List the containers under --root: a table of ID, PID, STATUS, BUNDLE, CREATED \
and OWNER; --format json prints a JSON array of their states; --quiet prints the ids only.\n\n\
Example:\n  pier list\n  pier --root /run/containerd/runc/default list -q"
)]
pub struct Args {
    /// Output format
    #[arg(short = 'f', long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Print only the container ids
    #[arg(short = 'q', long)]
    pub quiet: bool,
}

/// `--format` of `list`.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Aligned columns
    Table,
    /// A JSON array of states
    Json,
}

pub fn run(args: Args, rt: &Runtime) -> anyhow::Result<i32> {
    let states = rt.list()?;
    if args.quiet {
        states.iter().for_each(|s| println!("{}", s.id));
    } else if args.format == Format::Json {
        println!("{}", serde_json::to_string(&states)?);
    } else {
        print!("{}", table(&states));
    }
    Ok(0)
}

/// runc's columns, padded to the widest cell plus one space like Go's tabwriter.
fn table(states: &[State]) -> String {
    let mut rows = vec![["ID", "PID", "STATUS", "BUNDLE", "CREATED", "OWNER"].map(String::from)];
    rows.extend(states.iter().map(|s| {
        [
            s.id.clone(),
            s.pid.to_string(),
            s.status.clone(),
            s.bundle.display().to_string(),
            s.created.clone(),
            s.owner.clone(),
        ]
    }));
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths).take(5) {
            let _ = write!(line, "{cell:<width$} ", width = width);
        }
        line.push_str(&row[5]);
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_aligns_columns() {
        let state = State {
            oci_version: String::from("1.2.0"),
            id: String::from("web"),
            status: String::from("running"),
            pid: 4242,
            bundle: "/b".into(),
            rootfs: "/b/rootfs".into(),
            created: String::from("2026-11-21T05:33:45.000000000Z"),
            owner: String::from("root"),
            annotations: Default::default(),
        };
        let out = table(&[state]);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "ID  PID  STATUS  BUNDLE CREATED                        OWNER"
        );
        assert_eq!(
            lines[1],
            "web 4242 running /b     2026-11-21T05:33:45.000000000Z root"
        );
    }
}
