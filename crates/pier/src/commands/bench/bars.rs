//! `--svg` for `bench start` and `bench scale`: one horizontal bar chart per benchmark, a bar
//! per row at its median with a whisker from min to max (`bench net` has its own two line charts
//! in net/svg.rs, against concurrency).
//!
//! Theory of operation: plain SVG text, no dependency; the scale is linear from zero to the
//! largest max, so bars of the same chart compare directly; a row without a figure (failed,
//! skipped) is drawn as its label and the word given instead of a bar.
use std::fmt::Write;

/// One bar: label, and (median, min, max) or the reason there is none.
#[derive(Debug)]
pub struct Bar {
    pub label: String,
    pub value: Result<(f64, f64, f64), String>,
}

const ROW_H: f64 = 22.0;
const LABEL_W: f64 = 330.0;
const PLOT_W: f64 = 420.0;

/// The chart as an SVG document.
pub fn render(title: &str, unit: &str, bars: &[Bar]) -> String {
    let max = bars
        .iter()
        .filter_map(|b| b.value.as_ref().ok().map(|v| v.2))
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let height = 50.0 + ROW_H * bars.len() as f64;
    let width = LABEL_W + PLOT_W + 90.0;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"10\" y=\"20\" font-size=\"14\">{}</text>\n",
        escape(title)
    );
    let x = |v: f64| LABEL_W + PLOT_W * v / max;
    for (i, bar) in bars.iter().enumerate() {
        let y = 36.0 + ROW_H * i as f64;
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            LABEL_W - 8.0,
            y + 14.0,
            escape(&bar.label)
        );
        match &bar.value {
            Ok((median, min, max_v)) => {
                let _ = writeln!(
                    svg,
                    "<rect x=\"{LABEL_W}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"#4a7ebb\"/>\n\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{}\" y2=\"{}\" stroke=\"#222\"/>\n\
                     <text x=\"{:.1}\" y=\"{}\">{median:.2} {unit}</text>",
                    y + 3.0,
                    x(*median) - LABEL_W,
                    ROW_H - 6.0,
                    x(*min),
                    x(*max_v),
                    y + ROW_H / 2.0,
                    y + ROW_H / 2.0,
                    x(*max_v) + 6.0,
                    y + 14.0,
                );
            }
            Err(why) => {
                let _ = writeln!(
                    svg,
                    "<text x=\"{LABEL_W}\" y=\"{}\" fill=\"#a33\">{}</text>",
                    y + 14.0,
                    escape(why)
                );
            }
        }
    }
    svg.push_str("</svg>\n");
    svg
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
    fn bars_scale_to_the_largest_max_and_failures_show_their_reason() {
        let svg = render(
            "t <1>",
            "ms",
            &[
                Bar {
                    label: "a".into(),
                    value: Ok((5.0, 4.0, 10.0)),
                },
                Bar {
                    label: "b".into(),
                    value: Err("skipped: no docker".into()),
                },
            ],
        );
        assert!(
            svg.starts_with("<svg") && svg.ends_with("</svg>\n"),
            "{svg}"
        );
        assert!(svg.contains("t &lt;1&gt;"), "{svg}");
        // The median bar is half the plot (5 of 10), the whisker ends at the plot's end.
        assert!(
            svg.contains(&format!("width=\"{:.1}\"", PLOT_W / 2.0)),
            "{svg}"
        );
        assert!(
            svg.contains(&format!("x2=\"{:.1}\"", LABEL_W + PLOT_W)),
            "{svg}"
        );
        assert!(svg.contains("skipped: no docker"), "{svg}");
        assert!(svg.contains("5.00 ms"), "{svg}");
    }
}
