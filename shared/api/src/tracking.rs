//! What people log to a run besides what its method reports: metrics as
//! keyed series (a value at a step and a time) and params (name to value),
//! through `POST /v1/runs/{id}/log`, and small images (PNG, JPEG, WebP or
//! GIF, by their bytes) through `PUT /v1/runs/{id}/images/{name}`; and the
//! rule that keeps a run's log bounded. The rule is pure: [`RunLog::apply`] takes the log as stored
//! and what was sent, and either gives the new log or says what to fix.

use std::collections::BTreeMap;

use mapi_domain::Timestamp;
use serde::{Deserialize, Serialize};

/// Metric points one request may carry.
pub const MAX_POINTS_PER_REQUEST: usize = 100;
/// Metric points a run keeps, over all its series.
pub const MAX_POINTS_PER_RUN: usize = 5_000;
/// Distinct metric names a run may have.
pub const MAX_METRICS_PER_RUN: usize = 100;
/// Params a run may have logged.
pub const MAX_PARAMS_PER_RUN: usize = 100;
/// The longest metric or param name.
pub const MAX_NAME: usize = 64;
/// The longest text a param may hold.
pub const MAX_PARAM_TEXT: usize = 256;
/// Images a run may have logged.
pub const MAX_IMAGES_PER_RUN: usize = 50;
/// The largest image, in bytes.
pub const MAX_IMAGE_BYTES: usize = 1_048_576;

/// One value of a metric, as sent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricInput {
    /// 1 to 64 of letters, digits, `_`, `-`, `.` and `/` (e.g. `val/loss`).
    pub name: String,
    /// A finite number.
    pub value: f64,
    /// Its step (an epoch, an iteration); the next after the series' last when absent.
    pub step: Option<u64>,
}

/// What one `POST /v1/runs/{id}/log` adds: metric points, and params (a
/// param logged again takes the new value).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LogInput {
    #[serde(default)]
    pub metrics: Vec<MetricInput>,
    /// Each a string (at most 256 characters), a finite number or a boolean.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, serde_json::Value>,
}

/// One point of a series.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Point {
    pub step: u64,
    pub value: f64,
    pub at: Timestamp,
}

/// An image logged to a run; its bytes are an object beside the run's
/// (a link to them: `POST /v1/runs/{id}/images/{name}/url`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImageRef {
    pub content_type: String,
    pub size: u64,
    /// The step it shows, when one was given.
    pub step: Option<u64>,
    pub at: Timestamp,
}

/// A run's log: its series by name, its params and its images by name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RunLog {
    pub series: BTreeMap<String, Vec<Point>>,
    #[schema(value_type = Object)]
    pub params: BTreeMap<String, serde_json::Value>,
    #[serde(default)]
    pub images: BTreeMap<String, ImageRef>,
}

/// The media type of an image's bytes: PNG, JPEG, WebP or GIF, told by
/// their first bytes (what a browser would make of them), never by what
/// the sender claims.
pub fn image_type(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        Some("image/jpeg")
    } else if bytes.len() >= 12 && bytes.starts_with(b"RIFF") && &bytes[8..12] == b"WEBP" {
        Some("image/webp")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else {
        None
    }
}

impl RunLog {
    /// Every point kept, over all series.
    pub fn points(&self) -> usize {
        self.series.values().map(Vec::len).sum()
    }

    /// Each series' value at its highest step (the latest logged at a tie).
    pub fn latest(&self) -> BTreeMap<String, f64> {
        let last = |points: &Vec<Point>| points.iter().max_by_key(|p| p.step).map(|p| p.value);
        self.series.iter().filter_map(|(name, points)| Some((name.clone(), last(points)?))).collect()
    }

    /// The log with `input` added at `now`, or what to fix. Nothing is
    /// added unless everything is within the bounds.
    pub fn apply(&self, input: &LogInput, now: Timestamp) -> Result<RunLog, String> {
        if input.metrics.is_empty() && input.params.is_empty() {
            return Err(
                "log at least one metric or param: {\"metrics\": [{\"name\": …, \"value\": …}]}".into()
            );
        }
        if input.metrics.len() > MAX_POINTS_PER_REQUEST {
            return Err(format!(
                "{} metric points in one request: send at most {MAX_POINTS_PER_REQUEST} at a time",
                input.metrics.len()
            ));
        }
        let mut next = self.clone();
        for m in &input.metrics {
            check_name("metric", &m.name)?;
            if !m.value.is_finite() {
                return Err(format!("metric {}: the value must be a finite number", m.name));
            }
            let series = next.series.entry(m.name.clone()).or_default();
            let step = m.step.unwrap_or_else(|| series.iter().map(|p| p.step + 1).max().unwrap_or(0));
            series.push(Point { step, value: m.value, at: now });
        }
        for (name, value) in &input.params {
            check_name("param", name)?;
            check_param(name, value)?;
            next.params.insert(name.clone(), value.clone());
        }
        next.within_bounds()?;
        Ok(next)
    }

    /// The log with the image `name` added (or replaced), or what to fix.
    pub fn with_image(&self, name: &str, image: ImageRef) -> Result<RunLog, String> {
        check_name("image", name)?;
        let mut next = self.clone();
        next.images.insert(name.to_owned(), image);
        if next.images.len() > MAX_IMAGES_PER_RUN {
            return Err(format!(
                "a run may have at most {MAX_IMAGES_PER_RUN} images: log this one under the name of one it has, to replace it"
            ));
        }
        Ok(next)
    }

    fn within_bounds(&self) -> Result<(), String> {
        if self.series.len() > MAX_METRICS_PER_RUN {
            return Err(format!(
                "a run may have at most {MAX_METRICS_PER_RUN} metrics; this would make {}",
                self.series.len()
            ));
        }
        if self.points() > MAX_POINTS_PER_RUN {
            return Err(format!(
                "a run keeps at most {MAX_POINTS_PER_RUN} metric points; this would make {}: log fewer steps",
                self.points()
            ));
        }
        if self.params.len() > MAX_PARAMS_PER_RUN {
            return Err(format!("a run may have at most {MAX_PARAMS_PER_RUN} params"));
        }
        Ok(())
    }
}

fn check_name(kind: &str, name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-./".contains(&b));
    if ok {
        Ok(())
    } else {
        let shown: String = name.chars().take(MAX_NAME).collect();
        Err(format!(
            "{kind} name `{shown}` is invalid: use 1 to {MAX_NAME} letters, digits, `_`, `-`, `.` or `/`"
        ))
    }
}

fn check_param(name: &str, value: &serde_json::Value) -> Result<(), String> {
    let ok = match value {
        serde_json::Value::String(s) => s.chars().count() <= MAX_PARAM_TEXT,
        serde_json::Value::Number(n) => n.as_f64().is_some_and(f64::is_finite),
        serde_json::Value::Bool(_) => true,
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "param {name}: use a string of at most {MAX_PARAM_TEXT} characters, a number or true/false"
        ))
    }
}

/// How a [`MetricFilter`] compares a run's metric with its number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Comparison {
    Gt,
    Ge,
    Lt,
    Le,
    Eq,
    Ne,
}

impl Comparison {
    /// The operators as written, longest first so `>=` is not read as `>`.
    const WRITTEN: [(&'static str, Comparison); 7] = [
        (">=", Comparison::Ge),
        ("<=", Comparison::Le),
        ("!=", Comparison::Ne),
        ("==", Comparison::Eq),
        (">", Comparison::Gt),
        ("<", Comparison::Lt),
        ("=", Comparison::Eq),
    ];
}

/// A filter of the runs list on a metric's latest value: `NAME OP NUMBER`,
/// e.g. `r2>0.9` or `metrics.aic<=240`. A run without the metric never
/// matches.
#[derive(Clone, Debug, PartialEq)]
pub struct MetricFilter {
    pub name: String,
    pub op: Comparison,
    pub value: f64,
}

impl MetricFilter {
    /// The filter `text` writes, or what to fix.
    pub fn parse(text: &str) -> Result<MetricFilter, String> {
        let shown: String = text.chars().take(MAX_NAME + 32).collect();
        let wrong = || {
            format!(
                "metric filter `{shown}`: write NAME OP NUMBER with OP one of >, >=, <, <=, =, !=, \
                 e.g. metric=r2>0.9"
            )
        };
        let at = text.find(['<', '>', '=', '!']).ok_or_else(wrong)?;
        let (name, rest) = text.split_at(at);
        let name = name.trim();
        let name = name.strip_prefix("metrics.").unwrap_or(name);
        let (op, number) = Comparison::WRITTEN
            .iter()
            .find_map(|(w, op)| rest.strip_prefix(w).map(|n| (*op, n.trim())))
            .ok_or_else(wrong)?;
        check_name("metric", name).map_err(|e| format!("metric filter `{shown}`: {e}"))?;
        let value = number.parse::<f64>().ok().filter(|v| v.is_finite()).ok_or_else(wrong)?;
        Ok(MetricFilter { name: name.to_owned(), op, value })
    }

    /// Whether a run whose metric is `v` matches.
    pub fn holds(&self, v: f64) -> bool {
        match self.op {
            Comparison::Gt => v > self.value,
            Comparison::Ge => v >= self.value,
            Comparison::Lt => v < self.value,
            Comparison::Le => v <= self.value,
            Comparison::Eq => v == self.value,
            Comparison::Ne => v != self.value,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(name: &str, value: f64, step: Option<u64>) -> MetricInput {
        MetricInput { name: name.into(), value, step }
    }

    #[test]
    fn points_without_a_step_follow_the_last_and_the_latest_is_the_highest_step() {
        let now = Timestamp::from_secs(1_800_000_000);
        let input = LogInput {
            metrics: vec![point("loss", 0.9, None), point("loss", 0.5, None)],
            ..Default::default()
        };
        let log = RunLog::default().apply(&input, now).expect("logged");
        let steps: Vec<u64> = log.series["loss"].iter().map(|p| p.step).collect();
        assert_eq!(steps, [0, 1]);
        let later = LogInput { metrics: vec![point("loss", 0.7, Some(0))], ..Default::default() };
        let log = log.apply(&later, now).expect("logged");
        assert_eq!(log.latest()["loss"], 0.5, "step 1 is still the highest");
        assert_eq!(log.points(), 3);
    }

    #[test]
    fn images_are_told_by_their_bytes_and_bounded_per_run() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\n...."), Some("image/png"));
        assert_eq!(image_type(&[0xff, 0xd8, 0xff, 0xe0]), Some("image/jpeg"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"<svg onload=alert(1)>"), None, "no SVG: it may carry script");
        let image = |n: u64| ImageRef {
            content_type: "image/png".into(),
            size: n,
            step: None,
            at: Timestamp::from_secs(1),
        };
        let mut log = RunLog::default();
        for i in 0..MAX_IMAGES_PER_RUN {
            log = log.with_image(&format!("plot-{i}.png"), image(1)).expect("within the bound");
        }
        let e = log.with_image("one-more.png", image(1)).expect_err("over the bound");
        assert!(e.contains("at most 50 images"), "{e}");
        let replaced = log.with_image("plot-0.png", image(7)).expect("a name it has is replaced");
        assert_eq!((replaced.images.len(), replaced.images["plot-0.png"].size), (MAX_IMAGES_PER_RUN, 7));
        assert!(log.with_image("a b.png", image(1)).expect_err("bad name").contains("letters, digits"));
    }

    #[test]
    fn what_breaks_a_bound_is_refused_whole_in_words() {
        let now = Timestamp::from_secs(1);
        let refuse = |input: LogInput, words: &str| {
            let e = RunLog::default().apply(&input, now).expect_err("refused");
            assert!(e.contains(words), "{words:?} in {e}");
        };
        refuse(LogInput::default(), "at least one");
        refuse(LogInput { metrics: vec![point("a b", 1.0, None)], ..Default::default() }, "letters, digits");
        refuse(LogInput { metrics: vec![point("x", f64::NAN, None)], ..Default::default() }, "finite");
        let many = (0..=MAX_POINTS_PER_REQUEST).map(|i| point("x", i as f64, None)).collect();
        refuse(LogInput { metrics: many, ..Default::default() }, "at most 100 at a time");
        let params = BTreeMap::from([("p".to_owned(), serde_json::json!({"nested": 1}))]);
        refuse(LogInput { params, ..Default::default() }, "a number or true/false");
        let names = (0..=MAX_METRICS_PER_RUN).map(|i| point(&format!("m{i}"), 1.0, None)).collect::<Vec<_>>();
        let mut log = RunLog::default();
        for chunk in names.chunks(MAX_POINTS_PER_REQUEST) {
            match log.apply(&LogInput { metrics: chunk.to_vec(), ..Default::default() }, now) {
                Ok(next) => log = next,
                Err(e) => {
                    assert!(e.contains("at most 100 metrics"), "{e}");
                    assert_eq!(log.series.len(), MAX_POINTS_PER_REQUEST, "the refused request added nothing");
                    return;
                }
            }
        }
        panic!("the 101st metric was accepted");
    }

    #[test]
    fn a_metric_filter_reads_name_operator_and_number() {
        let f = |t: &str| MetricFilter::parse(t).map(|m| (m.name, m.op, m.value));
        assert_eq!(f("r2>0.9"), Ok(("r2".into(), Comparison::Gt, 0.9)));
        assert_eq!(f("metrics.aic <= 240"), Ok(("aic".into(), Comparison::Le, 240.0)));
        assert_eq!(f("loss/val>=-1e-3"), Ok(("loss/val".into(), Comparison::Ge, -0.001)));
        assert_eq!(f("n==3"), Ok(("n".into(), Comparison::Eq, 3.0)));
        assert_eq!(f("n!=3").map(|m| m.1), Ok(Comparison::Ne));
        for bad in ["r2", "r2>", ">0.9", "r2>high", "r2>NaN", "r2>inf", "r 2>1", "r2=>1"] {
            let e = MetricFilter::parse(bad).expect_err(bad);
            assert!(e.starts_with("metric filter `"), "{bad}: {e}");
        }
    }

    #[test]
    fn each_comparison_holds_as_written() {
        let holds = |t: &str, v: f64| MetricFilter::parse(t).map(|f| f.holds(v));
        assert_eq!(holds("r2>0.9", 0.95), Ok(true));
        assert_eq!(holds("r2>0.9", 0.9), Ok(false));
        assert_eq!(holds("r2>=0.9", 0.9), Ok(true));
        assert_eq!(holds("r2<0.5", 0.4), Ok(true));
        assert_eq!(holds("r2<=0.5", 0.6), Ok(false));
        assert_eq!(holds("n=2", 2.0), Ok(true));
        assert_eq!(holds("n!=2", 2.0), Ok(false));
    }
}
