//! `pier ps`: the engine's containers, as a table (creation time as an age, "5 minutes ago")
//! or one JSON object per line (Docker's `--format json`, times as recorded: RFC 3339).
use pier_engine::engine::{Engine, Summary};
use std::time::{SystemTime, UNIX_EPOCH};

/// Flags of `ps`.
#[derive(clap::Args, Debug)]
#[command(
    about = "List containers (running ones; -a for all)",
    after_help = "Example:\n  pier ps\n  pier ps -a --format json\n  pier rm $(pier ps -aq)"
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
        table(&containers, args.no_trunc, SystemTime::now())
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
fn table(containers: &[Summary], no_trunc: bool, now: SystemTime) -> String {
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
            age(&c.created, now),
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

/// An RFC 3339 UTC time (`2026-11-21T08:00:00.123Z`) as its age at `now`, in Docker's words;
/// the text itself when it does not parse.
fn age(created: &str, now: SystemTime) -> String {
    let Some(then) = unix_seconds(created) else {
        return created.to_string();
    };
    let now = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let secs = (now - then).max(0);
    let (n, unit) = match secs {
        0..60 => (secs, "second"),
        60..3_600 => (secs / 60, "minute"),
        3_600..86_400 => (secs / 3_600, "hour"),
        _ => (secs / 86_400, "day"),
    };
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} {unit}{plural} ago")
}

/// Seconds since the epoch of `YYYY-MM-DDTHH:MM:SS…Z` (H. Hinnant's days-from-civil).
fn unix_seconds(text: &str) -> Option<i64> {
    let field = |range: std::ops::Range<usize>| text.get(range)?.parse::<i64>().ok();
    let (y, m, d) = (field(0..4)?, field(5..7)?, field(8..10)?);
    let (hh, mm, ss) = (field(11..13)?, field(14..16)?, field(17..19)?);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + hh * 3_600 + mm * 60 + ss)
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
            created: "2026-11-21T08:00:00.5Z".into(),
            status: "running".into(),
            ports: "0.0.0.0:8080->80/tcp".into(),
            networks: "bridge".into(),
        }
    }

    fn at(unix: u64) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_secs(unix)
    }

    #[test]
    fn creation_times_read_as_ages() {
        // 2026-11-21T08:00:00Z is 1_795_248_000 seconds after the epoch.
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2000-03-01T00:00:01.5Z"), Some(951_868_801));
        assert_eq!(
            unix_seconds("2026-11-21T08:00:00.123456789Z"),
            Some(1_795_248_000)
        );
        let created = "2026-11-21T08:00:00Z";
        assert_eq!(age(created, at(1_795_248_001)), "1 second ago");
        assert_eq!(age(created, at(1_795_248_000 + 150)), "2 minutes ago");
        assert_eq!(age(created, at(1_795_248_000 + 7_200)), "2 hours ago");
        assert_eq!(age(created, at(1_795_248_000 + 86_400)), "1 day ago");
        assert_eq!(age("yesterday", at(0)), "yesterday");
    }

    #[test]
    fn table_aligns_columns_and_truncates() {
        let id = "0123456789abcdef0123";
        let now = at(1_795_248_005);
        let text = table(&[summary(id, "busybox httpd -f -p 80 -h /www")], false, now);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[1].starts_with("0123456789ab   web "), "{text}");
        assert!(!lines[1].contains(id), "{text}");
        assert!(lines[1].contains("\"busybox httpd -f -p…\""), "{text}");
        assert_eq!(lines[0].find("NAME"), lines[1].find("web"));
        assert!(lines[1].contains("5 seconds ago"), "{text}");
        let full = table(&[summary(id, "x")], true, now);
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
