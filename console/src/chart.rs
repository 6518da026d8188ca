//! Charts drawn on the server as SVG: no script, no library, readable by a
//! screen reader (a title, a description, and each bar's own title).

use std::fmt::Write;

/// One bar: its label (a day) and its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bar {
    pub label: String,
    pub value: i64,
    /// What a reader is told of this bar (the value in its unit).
    pub says: String,
}

const WIDTH: i64 = 720;
const HEIGHT: i64 = 220;
const LEFT: i64 = 56;
const BOTTOM: i64 = 28;
const TOP: i64 = 12;

/// A bar chart of `bars` in order, its axis topped at a round number.
pub fn bars(title: &str, description: &str, bars: &[Bar], axis_label: impl Fn(i64) -> String) -> String {
    let max = bars.iter().map(|b| b.value).max().unwrap_or(0).max(1);
    let top = round_up(max);
    let plot_w = WIDTH - LEFT - 8;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let n = i64::try_from(bars.len()).unwrap_or(1).max(1);
    let slot = plot_w / n;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" role="img" aria-labelledby="chart-title chart-desc" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg"><title id="chart-title">{}</title><desc id="chart-desc">{}</desc>"#,
        escape(title),
        escape(description)
    );
    for step in 0..=4 {
        let value = top * step / 4;
        let y = TOP + plot_h - plot_h * step / 4;
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y}" y2="{y}" stroke="#c8c8c8"/><text x="{}" y="{}" text-anchor="end">{}</text>"##,
            WIDTH - 8,
            LEFT - 4,
            y + 4,
            escape(&axis_label(value))
        );
    }
    for (i, bar) in bars.iter().enumerate() {
        let i = i64::try_from(i).unwrap_or(0);
        let h = if bar.value <= 0 { 0 } else { (plot_h * bar.value / top).max(1) };
        let x = LEFT + i * slot + slot / 8;
        let w = (slot * 3 / 4).max(1);
        let _ = write!(
            s,
            r##"<rect x="{x}" y="{}" width="{w}" height="{h}" fill="#1f4e8c"><title>{}: {}</title></rect>"##,
            TOP + plot_h - h,
            escape(&bar.label),
            escape(&bar.says)
        );
        let every = (n / 10).max(1);
        if i % every == 0 {
            let _ = write!(
                s,
                r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
                x + w / 2,
                HEIGHT - 10,
                escape(&bar.label)
            );
        }
    }
    s.push_str("</svg>");
    s
}

/// The least of 1, 2 or 5 times a power of ten at or above `v`.
fn round_up(v: i64) -> i64 {
    let mut p = 1i64;
    loop {
        for m in [1, 2, 5] {
            if m * p >= v {
                return m * p;
            }
        }
        p = p.saturating_mul(10);
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bar(label: &str, value: i64) -> Bar {
        Bar { label: label.into(), value, says: format!("{value} units") }
    }

    #[test]
    fn bars_are_as_tall_as_their_share_of_the_axis() {
        let svg = bars("Spend", "Daily", &[bar("01", 50), bar("02", 100), bar("03", 0)], |v| v.to_string());
        // Axis tops at 100; the plot is 180 high.
        assert!(svg.contains(r#"height="90" fill"#), "{svg}");
        assert!(svg.contains(r#"height="180" fill"#), "{svg}");
        assert!(svg.contains(r#"height="0" fill"#), "{svg}");
        assert!(svg.contains("<title>02: 100 units</title>"));
        assert!(svg.contains(">100</text>") && svg.contains(">50</text>"));
    }

    #[test]
    fn text_is_escaped_and_the_axis_is_round() {
        let svg = bars("<b>", "&", &[bar("<x>", 7)], |v| v.to_string());
        assert!(svg.contains("&lt;b&gt;") && !svg.contains("<b>") && !svg.contains("<x>"));
        assert_eq!((round_up(7), round_up(11), round_up(200), round_up(201)), (10, 20, 200, 500));
    }
}
