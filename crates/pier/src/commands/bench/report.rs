//! The report of `pier bench start`: per row the median and min–max, pier's ratio to every other
//! row of the same seccomp mode, the machine it ran on; as a terminal table and as JSON.
//!
//! JSON shape (all times in milliseconds):
//! `{"benchmark":"start","runs","warmup","machine":{"cores","kernel","cpu","cgroups","versions":{..}},
//!   "rows":[{"runtime","seccomp","command","status":"ok"|"failed","reason","samples_ms":[..],
//!            "median_ms","min_ms","max_ms"}],
//!   "ratios":[{"seccomp","peer","pier_over_peer"}], "skipped":[{"runtime","seccomp","reason"}],
//!   "notes":[..]}`
//! A ratio below 1 means pier starts faster than that peer.
//!
//! Pure code apart from reading the machine's facts; unit tests below.
use super::bundle::Seccomp;
use super::rows::{Row, Runtime, Skipped};
use super::stats::{ratio, Summary};
use super::table::{Align, Table};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;

/// The machine the benchmark ran on.
#[derive(Debug, Serialize)]
pub struct Machine {
    pub cores: usize,
    pub kernel: String,
    pub cpu: String,
    pub cgroups: String,
    /// `--version` first line of every measured program, by runtime label.
    pub versions: BTreeMap<String, String>,
}

#[derive(Debug, Serialize)]
pub struct RowReport {
    pub runtime: Runtime,
    pub seccomp: Seccomp,
    pub command: String,
    pub status: &'static str,
    pub reason: Option<String>,
    pub samples_ms: Vec<f64>,
    pub median_ms: Option<f64>,
    pub min_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Ratio {
    pub seccomp: Seccomp,
    pub peer: Runtime,
    pub pier_over_peer: f64,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub benchmark: &'static str,
    pub runs: usize,
    pub warmup: usize,
    pub machine: Machine,
    pub rows: Vec<RowReport>,
    pub ratios: Vec<Ratio>,
    pub skipped: Vec<Skipped>,
    pub notes: Vec<String>,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl RowReport {
    pub fn of(row: &Row) -> RowReport {
        let summary = if row.failure.is_none() {
            Summary::of(&row.samples)
        } else {
            None
        };
        RowReport {
            runtime: row.runtime,
            seccomp: row.seccomp,
            command: row.invocation(0).display(),
            status: if row.failure.is_some() {
                "failed"
            } else {
                "ok"
            },
            reason: row.failure.clone(),
            samples_ms: row.samples.iter().copied().map(ms).collect(),
            median_ms: summary.map(|s| ms(s.median)),
            min_ms: summary.map(|s| ms(s.min)),
            max_ms: summary.map(|s| ms(s.max)),
        }
    }
}

/// Each successful row's baseline median (pier's; the same network's `pier run` row for docker and
/// podman) over the row's median, mode by mode.
pub fn ratios(rows: &[Row]) -> Vec<Ratio> {
    let median = |row: &Row| {
        if row.failure.is_none() {
            Summary::of(&row.samples).map(|s| s.median)
        } else {
            None
        }
    };
    let mut out = Vec::new();
    for peer in rows.iter().filter(|r| r.runtime != Runtime::Pier) {
        let baseline = rows
            .iter()
            .find(|r| r.runtime == peer.runtime.baseline() && r.seccomp == peer.seccomp);
        let Some(base_median) = baseline.and_then(median) else {
            continue;
        };
        if let Some(value) = median(peer).and_then(|m| ratio(base_median, m)) {
            out.push(Ratio {
                seccomp: peer.seccomp,
                peer: peer.runtime,
                pier_over_peer: value,
            });
        }
    }
    out
}

/// The terminal table: one line per row, grouped by seccomp mode, then skipped rows and notes.
pub fn render(report: &Report) -> String {
    let m = &report.machine;
    let mut out = format!(
        "pier bench start: busybox /bin/true, {} runs per row (+{} warm-up), rows interleaved\n\
         machine: {} cores, {}, Linux {}, {} cgroups\n\n",
        report.runs, report.warmup, m.cores, m.cpu, m.kernel, m.cgroups
    );
    let mut table = Table::new(&[
        ("seccomp", Align::Left),
        ("runtime", Align::Left),
        ("median", Align::Right),
        ("min – max", Align::Right),
        ("pier ÷ row", Align::Right),
        ("", Align::Left),
    ]);
    let mut previous = None;
    for row in &report.rows {
        if previous.is_some_and(|p| p != row.seccomp) {
            table.gap();
        }
        previous = Some(row.seccomp);
        table.row(table_row(report, row));
    }
    out.push_str(&table.render());
    out.push_str(
        "\npier ÷ row: pier's median over the row's (below 1: pier is faster); for docker and \
         podman rows the median of the `pier run` row of the same network\n",
    );
    for (label, version) in &m.versions {
        out.push_str(&format!("{label}: {version}\n"));
    }
    for skipped in &report.skipped {
        out.push_str(&format!(
            "skipped {}: {}\n",
            skipped.runtime.label(),
            skipped.reason
        ));
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

fn table_row(report: &Report, row: &RowReport) -> Vec<String> {
    let figure = |v: Option<f64>| v.map(|v| format!("{v:.2} ms")).unwrap_or_default();
    let range = match (row.min_ms, row.max_ms) {
        (Some(min), Some(max)) => format!("{min:.2} – {max:.2} ms"),
        _ => String::new(),
    };
    let versus = if row.runtime == Runtime::Pier {
        if row.median_ms.is_some() {
            "1.00".to_string()
        } else {
            String::new()
        }
    } else {
        let found = report
            .ratios
            .iter()
            .find(|r| r.seccomp == row.seccomp && r.peer == row.runtime);
        found
            .map(|r| format!("{:.2}", r.pier_over_peer))
            .unwrap_or_default()
    };
    let status = row
        .reason
        .as_ref()
        .map(|r| format!("FAILED: {r}"))
        .unwrap_or_default();
    let name = match row.runtime {
        Runtime::Floor => "floor (unshare -nmiup -f true)".to_string(),
        other => other.label().to_string(),
    };
    vec![
        row.seccomp.label().to_string(),
        name,
        figure(row.median_ms),
        range,
        versus,
        status,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(runtime: Runtime, seccomp: Seccomp, samples_ms: &[u64], failure: Option<&str>) -> Row {
        Row::for_test(
            runtime,
            seccomp,
            samples_ms
                .iter()
                .map(|&v| Duration::from_millis(v))
                .collect(),
            failure,
        )
    }

    fn machine() -> Machine {
        Machine {
            cores: 2,
            kernel: "6.18".into(),
            cpu: "cpu".into(),
            cgroups: "hybrid".into(),
            versions: BTreeMap::new(),
        }
    }

    #[test]
    fn ratios_compare_pier_with_peers_of_the_same_mode_only() {
        let rows = vec![
            row(Runtime::Pier, Seccomp::None, &[2, 2, 2], None),
            row(Runtime::Crun, Seccomp::None, &[8, 8, 8], None),
            row(Runtime::Pier, Seccomp::Docker, &[3], None),
            row(Runtime::Runc, Seccomp::Docker, &[30], None),
            row(Runtime::Runc, Seccomp::None, &[20], Some("exit status: 1")),
        ];
        let found: Vec<(Seccomp, Runtime, String)> = ratios(&rows)
            .iter()
            .map(|r| (r.seccomp, r.peer, format!("{:.2}", r.pier_over_peer)))
            .collect();
        assert_eq!(
            found,
            vec![
                (Seccomp::None, Runtime::Crun, "0.25".to_string()),
                (Seccomp::Docker, Runtime::Runc, "0.10".to_string())
            ]
        );
    }

    #[test]
    fn table_shows_figures_ratios_and_failures() {
        let rows = vec![
            row(Runtime::Pier, Seccomp::None, &[2], None),
            row(Runtime::Crun, Seccomp::None, &[8], None),
            row(
                Runtime::Runc,
                Seccomp::Docker,
                &[],
                Some("exit status: 1: boom"),
            ),
        ];
        let report = Report {
            benchmark: "start",
            runs: 1,
            warmup: 0,
            machine: machine(),
            rows: rows.iter().map(RowReport::of).collect(),
            ratios: ratios(&rows),
            skipped: vec![],
            notes: vec![],
        };
        let text = render(&report);
        assert!(
            text.contains("none     pier     2.00 ms  2.00 – 2.00 ms        1.00"),
            "{text}"
        );
        assert!(
            text.contains("none     crun     8.00 ms  8.00 – 8.00 ms        0.25"),
            "{text}"
        );
        assert!(text.contains("\n\ndocker   runc"), "{text}");
        assert!(text.contains("FAILED: exit status: 1: boom"), "{text}");
    }

    #[test]
    fn json_has_the_documented_fields() {
        let rows = [row(Runtime::Pier, Seccomp::None, &[1, 3], None)];
        let report = Report {
            benchmark: "start",
            runs: 2,
            warmup: 0,
            machine: machine(),
            rows: rows.iter().map(RowReport::of).collect(),
            ratios: vec![],
            skipped: vec![],
            notes: vec![],
        };
        let value = serde_json::to_value(&report).expect("json");
        assert_eq!(value["rows"][0]["runtime"], "pier");
        assert_eq!(value["rows"][0]["seccomp"], "none");
        assert_eq!(value["rows"][0]["status"], "ok");
        assert_eq!(value["rows"][0]["median_ms"], 2.0);
        assert_eq!(
            value["rows"][0]["samples_ms"],
            serde_json::json!([1.0, 3.0])
        );
        assert_eq!(value["machine"]["cores"], 2);
    }
}
