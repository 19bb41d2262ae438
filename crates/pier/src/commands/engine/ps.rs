//! `pier ps`: the engine's containers, as a table or one JSON object per line (Docker's
//! `--format json`).
use pier_engine::engine::{Engine, Summary};

/// Flags of `ps`.
#[derive(clap::Args, Debug)]
#[command(
    about = "List containers (running ones; -a for all)",
    after_help = "Examples:\n  pier ps\n  pier ps -a --format json\n  pier rm $(pier ps -aq)"
)]
pub struct Args {
    /// Show every container, not only running ones
    #[arg(short = 'a', long)]
    all: bool,
    /// Print only the ids
    #[arg(short = 'q', long)]
    quiet: bool,
    /// Show full ids and commands
    #[arg(long)]
    no_trunc: bool,
    /// Output format: table, or json (one object per line)
    #[arg(long, value_name = "FORMAT", value_parser = ["table", "json"], default_value = "table")]
    format: String,
}

pub fn run(args: Args, engine: &Engine) -> anyhow::Result<i32> {
    let containers = engine.ps(args.all)?;
    let text = if args.quiet {
        containers
            .iter()
            .map(|c| format!("{}\n", short(&c.id, args.no_trunc)))
            .collect()
    } else if args.format == "json" {
        json_lines(&containers)?
    } else {
        table(&containers, args.no_trunc)
    };
    print!("{text}");
    Ok(0)
}

fn json_lines(containers: &[Summary]) -> anyhow::Result<String> {
    let mut text = String::new();
    for container in containers {
        text += &serde_json::to_string(container)?;
        text.push('\n');
    }
    Ok(text)
}

/// Docker's 12-character id unless `--no-trunc`.
fn short(id: &str, no_trunc: bool) -> &str {
    if no_trunc {
        id
    } else {
        &id[..id.len().min(12)]
    }
}

/// Docker's truncated command: at most 20 characters, quoted.
fn command(command: &str, no_trunc: bool) -> String {
    if no_trunc || command.chars().count() <= 20 {
        return format!("\"{command}\"");
    }
    let head: String = command.chars().take(19).collect();
    format!("\"{head}…\"")
}

/// Columns padded to their widest cell, separated by three spaces.
fn table(containers: &[Summary], no_trunc: bool) -> String {
    let header = [
        "CONTAINER ID",
        "NAME",
        "ROOTFS",
        "COMMAND",
        "CREATED",
        "STATUS",
        "PORTS",
        "NETWORKS",
    ];
    let mut rows = vec![header.map(String::from).to_vec()];
    for c in containers {
        rows.push(vec![
            short(&c.id, no_trunc).to_string(),
            c.name.clone(),
            c.rootfs.clone(),
            command(&c.command, no_trunc),
            c.created.clone(),
            c.status.clone(),
            c.ports.clone(),
            c.networks.clone(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            rows.iter()
                .map(|r| r[col].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:w$}"))
            .collect();
        text += cells.join("   ").trim_end();
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(id: &str, command: &str) -> Summary {
        Summary {
            id: id.to_string(),
            name: "web".into(),
            rootfs: "host".into(),
            command: command.to_string(),
            created: "2026-11-21T08:00:00Z".into(),
            status: "running".into(),
            ports: "0.0.0.0:8080->80/tcp".into(),
            networks: "bridge".into(),
        }
    }

    #[test]
    fn table_aligns_columns_and_truncates() {
        let id = "0123456789abcdef0123";
        let text = table(&[summary(id, "busybox httpd -f -p 80 -h /www")], false);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("0123456789ab   web "), "{text}");
        assert!(!lines[1].contains(id), "{text}");
        assert!(lines[1].contains("\"busybox httpd -f -p…\""), "{text}");
        assert_eq!(lines[0].find("NAME"), lines[1].find("web"));
        let full = table(&[summary(id, "x")], true);
        assert!(full.contains(id));
    }

    #[test]
    fn json_is_one_object_per_line() {
        let text = json_lines(&[summary("a", "x"), summary("b", "y")]).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(ids, ["a", "b"]);
    }
}
