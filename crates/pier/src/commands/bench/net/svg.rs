//! The two charts of `pier bench net --svg`, in one standalone SVG document: requests/s against
//! concurrency, one line per row; and forwarder CPU µs per request, one group of bars per row
//! (a bar per concurrency). Rows without a figure are left out of a chart, failed rows too.
//!
//! Pure code; unit test below.
use super::report::NetReport;
use std::fmt::Write as _;

const WIDTH: f64 = 760.0;
const CHART: f64 = 300.0;
const LEFT: f64 = 70.0;
const LEGEND: f64 = 230.0;
const COLORS: [&str; 9] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f",
];

pub fn render(report: &NetReport) -> String {
    let height = 2.0 * (CHART + 90.0);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    );
    throughput(report, &mut svg, 30.0);
    cpu_per_request(report, &mut svg, CHART + 120.0);
    svg.push_str("</svg>\n");
    svg
}

/// Plot area: x from LEFT to WIDTH-LEGEND, y from top+CHART (0) to top (max).
fn frame(svg: &mut String, top: f64, title: &str, max: f64, unit: &str) {
    let right = WIDTH - LEGEND;
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"{}\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        top - 10.0,
        escape(title)
    );
    for i in 0..=4 {
        let value = max * i as f64 / 4.0;
        let y = top + CHART - CHART * i as f64 / 4.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{y}\" x2=\"{right}\" y2=\"{y}\" stroke=\"#ddd\"/>"
        );
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LEFT - 6.0,
            y + 4.0,
            short(value)
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"12\" y=\"{}\" transform=\"rotate(-90 12 {})\" text-anchor=\"middle\">{}</text>",
        top + CHART / 2.0,
        top + CHART / 2.0,
        escape(unit)
    );
}

fn legend(svg: &mut String, top: f64, n: usize, label: &str) {
    let x = WIDTH - LEGEND + 16.0;
    let y = top + 14.0 + 18.0 * n as f64;
    let color = COLORS[n % COLORS.len()];
    let _ = writeln!(
        svg,
        "<rect x=\"{x}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{color}\"/>",
        y - 10.0
    );
    let _ = writeln!(
        svg,
        "<text x=\"{}\" y=\"{y}\">{}</text>",
        x + 18.0,
        escape(label)
    );
}

fn throughput(report: &NetReport, svg: &mut String, top: f64) {
    let max = nice_max(
        report
            .rows
            .iter()
            .flat_map(|r| &r.cells)
            .filter_map(|c| c.requests_per_s.map(|s| s.median)),
    );
    frame(
        svg,
        top,
        "requests/s by wrk concurrency (median over rounds)",
        max,
        "requests/s",
    );
    let columns = report.concurrency.len().max(1);
    let step = (WIDTH - LEGEND - LEFT) / columns as f64;
    let x = |i: usize| LEFT + step * (i as f64 + 0.5);
    for (i, c) in report.concurrency.iter().enumerate() {
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">-c{c}</text>",
            x(i),
            top + CHART + 18.0
        );
    }
    let drawn = report.rows.iter().filter(|r| r.status == "ok");
    for (n, row) in drawn.enumerate() {
        let color = COLORS[n % COLORS.len()];
        let points: Vec<String> = row
            .cells
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                c.requests_per_s
                    .map(|s| format!("{:.1},{:.1}", x(i), top + CHART - CHART * s.median / max))
            })
            .collect();
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        for p in &points {
            let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
            let _ = writeln!(
                svg,
                "<circle cx=\"{px}\" cy=\"{py}\" r=\"3\" fill=\"{color}\"/>"
            );
        }
        legend(svg, top, n, row.label);
    }
}

fn cpu_per_request(report: &NetReport, svg: &mut String, top: f64) {
    let rows: Vec<_> = report
        .rows
        .iter()
        .filter(|r| r.status == "ok" && r.cells.iter().any(|c| c.cpu_us_per_request.is_some()))
        .collect();
    let max = nice_max(
        rows.iter()
            .flat_map(|r| &r.cells)
            .filter_map(|c| c.cpu_us_per_request),
    );
    frame(
        svg,
        top,
        "forwarder CPU per request, µs (bars: -c1 … -cN)",
        max,
        "µs CPU / request",
    );
    let group = (WIDTH - LEGEND - LEFT) / rows.len().max(1) as f64;
    let bars = report.concurrency.len().max(1) as f64;
    let bar = group * 0.8 / bars;
    for (n, row) in rows.iter().enumerate() {
        let color = COLORS[n % COLORS.len()];
        for (i, c) in row.cells.iter().enumerate() {
            let value = c.cpu_us_per_request.unwrap_or(0.0);
            let h = CHART * value / max;
            let x = LEFT + group * n as f64 + group * 0.1 + bar * i as f64;
            let opacity = 0.45 + 0.55 * (i as f64 + 1.0) / bars;
            let _ = writeln!(svg, "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{h:.1}\" fill=\"{color}\" fill-opacity=\"{opacity:.2}\"/>", top + CHART - h, bar * 0.9);
        }
        legend(svg, top, n, row.label);
    }
}

/// A round upper bound for an axis (1, 2 or 5 times a power of ten above the largest value).
fn nice_max(values: impl Iterator<Item = f64>) -> f64 {
    let max = values.fold(0.0, f64::max);
    if max <= 0.0 {
        return 1.0;
    }
    let power = 10f64.powf(max.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|&v| v >= max)
        .unwrap_or(10.0 * power)
}

fn short(value: f64) -> String {
    if value >= 1000.0 {
        format!("{:.0}k", value / 1000.0)
    } else if value >= 10.0 || value == 0.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_bounds_are_round() {
        assert_eq!(nice_max([31_000.0, 54_000.0].into_iter()), 100_000.0);
        assert_eq!(nice_max([18.0].into_iter()), 20.0);
        assert_eq!(nice_max(std::iter::empty()), 1.0);
        assert_eq!(short(25_000.0), "25k");
        assert_eq!(escape("a<b&c"), "a&lt;b&amp;c");
    }
}
