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

/// One line of a line chart: what it is (a run, a series) and its points
/// (step, value), in any order.
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// Colours and dash patterns of the lines, in turn: the pattern and the
/// legend's name tell lines apart where colour cannot.
const STROKES: [(&str, &str); 6] = [
    ("#1f4e8c", ""),
    ("#b3261e", "6 3"),
    ("#1d6b3a", "2 3"),
    ("#7a4b00", "8 3 2 3"),
    ("#5b2a86", "1 2"),
    ("#00636b", "10 4"),
];

/// A line chart of `lines` over steps, one value axis, a legend naming
/// each line. `id` makes the chart's title and description unique on a
/// page that draws several.
pub fn lines(id: &str, title: &str, description: &str, lines: &[Line]) -> String {
    let all = || lines.iter().flat_map(|l| l.points.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let (x0, x1) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (x, _)| (a.min(*x), b.max(*x)));
    let (y0, y1) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), (_, y)| (a.min(*y), b.max(*y)));
    let (x0, x1) = if x0.is_finite() { (x0, if x1 > x0 { x1 } else { x0 + 1.0 }) } else { (0.0, 1.0) };
    let (y0, y1) = if y0.is_finite() { (y0, if y1 > y0 { y1 } else { y0 + 1.0 }) } else { (0.0, 1.0) };
    // The value axis spans whole steps of a round size (1, 2 or 5 times a power of ten).
    let step = nice_step((y1 - y0) / 4.0);
    let (y0, y1) = ((y0 / step).floor() * step, (y1 / step).ceil() * step);
    let ticks = ((y1 - y0) / step).round() as i32;
    let legend_h = 18 * i64::try_from(lines.len()).unwrap_or(0);
    let height = HEIGHT + legend_h;
    let plot_w = (WIDTH - LEFT - 16) as f64;
    let plot_h = (HEIGHT - TOP - BOTTOM) as f64;
    let px = |x: f64| LEFT as f64 + (x - x0) / (x1 - x0) * plot_w;
    let py = |y: f64| TOP as f64 + plot_h - (y - y0) / (y1 - y0) * plot_h;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg class="chart" role="img" aria-labelledby="{id}-title {id}-desc" viewBox="0 0 {WIDTH} {height}" width="100%" preserveAspectRatio="xMinYMin meet" xmlns="http://www.w3.org/2000/svg"><title id="{id}-title">{}</title><desc id="{id}-desc">{}</desc>"#,
        escape(title),
        escape(description)
    );
    for tick in 0..=ticks {
        let value = y0 + step * f64::from(tick);
        let y = py(value);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#c8c8c8"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - 16,
            LEFT - 4,
            y + 4.0,
            escape(&mapi_api::words::number(value))
        );
    }
    for x in [x0, x1] {
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">step {}</text>"#,
            px(x),
            HEIGHT - 10,
            escape(&mapi_api::words::number(x))
        );
    }
    for (i, line) in lines.iter().enumerate() {
        let (colour, dash) = STROKES[i % STROKES.len()];
        let mut points: Vec<(f64, f64)> =
            line.points.iter().copied().filter(|(x, y)| x.is_finite() && y.is_finite()).collect();
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points.iter().map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y))).collect();
        let last = points.last().map_or(String::new(), |(x, y)| {
            format!("last at step {}: {}", mapi_api::words::number(*x), mapi_api::words::number(*y))
        });
        let _ = write!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"><title>{}: {} points, {}</title></polyline>"#,
            path.join(" "),
            escape(&line.label),
            points.len(),
            escape(&last)
        );
        if let [(x, y)] = points.as_slice() {
            let _ = write!(s, r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="{colour}"/>"#, px(*x), py(*y));
        }
        let ly = HEIGHT + 18 * i64::try_from(i).unwrap_or(0) + 4;
        let _ = write!(
            s,
            r#"<line x1="{LEFT}" x2="{}" y1="{ly}" y2="{ly}" stroke="{colour}" stroke-width="2" stroke-dasharray="{dash}"/><text x="{}" y="{}">{}</text>"#,
            LEFT + 28,
            LEFT + 34,
            ly + 4,
            escape(&line.label)
        );
    }
    s.push_str("</svg>");
    s
}

/// The least of 1, 2 or 5 times a power of ten at or above `raw` (> 0).
fn nice_step(raw: f64) -> f64 {
    let power = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * power)
        .find(|s| *s >= raw * (1.0 - 1e-9))
        .unwrap_or(power * 10.0)
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
    fn lines_span_the_plot_and_each_has_a_legend_entry() {
        let a = Line { label: "run_a".into(), points: vec![(2.0, 0.5), (0.0, 1.0), (1.0, f64::NAN)] };
        let b = Line { label: "<b>".into(), points: vec![(1.0, 0.75)] };
        let svg = lines("loss", "loss", "over steps", &[a, b]);
        // Steps 0..2 span x 56..704; the axis runs 0.4..1 in steps of 0.2
        // (y 192..12), so 1 is at 12 and 0.5 at 162; points sorted by step.
        assert!(svg.contains(r#"points="56.0,12.0 704.0,162.0""#), "{svg}");
        assert!(svg.contains("<title>run_a: 2 points, last at step 2: 0.5</title>"), "{svg}");
        assert!(svg.contains("<circle cx=\"380.0\" cy=\"87.0\""), "{svg}");
        assert!(svg.contains(">&lt;b&gt;</text>") && !svg.contains("<b>"));
        assert!(svg.contains(r#"id="loss-title""#) && svg.contains(">step 0<") && svg.contains(">step 2<"));
        assert!(
            svg.contains(">0.4</text>") && svg.contains(">0.6</text>") && svg.contains(">1</text>"),
            "{svg}"
        );
        assert!(!svg.contains(">0.5</text>"));
        assert_eq!((nice_step(0.125), nice_step(0.3), nice_step(7.0), nice_step(0.2)), (0.2, 0.5, 10.0, 0.2));
    }

    #[test]
    fn text_is_escaped_and_the_axis_is_round() {
        let svg = bars("<b>", "&", &[bar("<x>", 7)], |v| v.to_string());
        assert!(svg.contains("&lt;b&gt;") && !svg.contains("<b>") && !svg.contains("<x>"));
        assert_eq!((round_up(7), round_up(11), round_up(200), round_up(201)), (10, 20, 200, 500));
    }
}
