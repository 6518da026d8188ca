//! Folding a fan-out parent's children into the parent's own outputs.
//!
//! When every child of a run of a fan-out parent ([`crate::registry::FanOut`])
//! has succeeded, the platform reads the result each child wrote and folds
//! them here into the run's own files and metrics: a backtest's accuracy per
//! horizon step, a calibration's rank histograms and uniformity tests. Pure:
//! the caller reads the children's bytes and stores what comes back.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::registry::{FanOut, Fold};

/// One file the fold wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct FoldedFile {
    pub name: &'static str,
    pub media_type: &'static str,
    pub bytes: Vec<u8>,
}

/// What a fold makes of the children: the parent's files and metrics.
#[derive(Debug, Clone, PartialEq)]
pub struct Folded {
    pub files: Vec<FoldedFile>,
    pub metrics: BTreeMap<String, f64>,
}

/// Why the children's results cannot be folded (a child wrote something
/// other than its method's result): the run fails with this sentence.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FoldError(pub String);

/// Folds `results` (child `i`'s result file at index `i`).
///
/// # Errors
///
/// A result that is not the JSON its method writes, or children that
/// disagree (draws, bins, parameters).
pub fn fold(fan: &FanOut, results: &[Vec<u8>]) -> Result<Folded, FoldError> {
    if results.is_empty() {
        return Err(FoldError("the run has no children to fold".to_owned()));
    }
    let docs = results
        .iter()
        .enumerate()
        .map(|(i, bytes)| {
            serde_json::from_slice::<Value>(bytes)
                .map_err(|e| FoldError(format!("child {i}'s {} is not JSON: {e}", fan.result)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let folded = match fan.fold {
        Fold::Backtest => backtest(&docs),
        Fold::Sbc => sbc(&docs),
    }?;
    debug_assert!(folded.files.iter().all(|f| fan.outputs.iter().any(|o| o.name == f.name)));
    Ok(folded)
}

fn num(v: &Value, child: usize, what: &str) -> Result<f64, FoldError> {
    v.as_f64()
        .filter(|x| x.is_finite())
        .ok_or_else(|| FoldError(format!("child {child}: `{what}` is not a number")))
}

/// Accuracy of a set of (actual, error) pairs, as forecasters report it.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Accuracy {
    n: usize,
    mean_error: f64,
    mae: f64,
    rmse: f64,
    /// Mean absolute percentage error (%); `None` when some actual is 0.
    mape: Option<f64>,
}

fn accuracy(pairs: &[(f64, f64)]) -> Accuracy {
    let n = pairs.len();
    let mean = |f: &dyn Fn(&(f64, f64)) -> f64| pairs.iter().map(f).sum::<f64>() / n as f64;
    let mape = pairs.iter().all(|(a, _)| *a != 0.0).then(|| 100.0 * mean(&|(a, e)| (e / a).abs()));
    Accuracy {
        n,
        mean_error: mean(&|(_, e)| *e),
        mae: mean(&|(_, e)| e.abs()),
        rmse: mean(&|(_, e)| e * e).sqrt(),
        mape,
    }
}

impl Accuracy {
    fn json(&self) -> Value {
        json!({"n": self.n, "mean_error": self.mean_error, "mae": self.mae, "rmse": self.rmse, "mape": self.mape})
    }

    fn csv_row(&self, step: &str, out: &mut String) {
        let mape = self.mape.map(|m| m.to_string()).unwrap_or_default();
        let _ = writeln!(out, "{step},{},{},{},{},{mape}", self.n, self.mean_error, self.mae, self.rmse);
    }
}

/// A backtest: each child's errors.json holds its origin and, per step
/// ahead, the actual value and the error (actual − forecast). Accuracy is
/// pooled over the origins per step, and over every step (`overall`).
fn backtest(docs: &[Value]) -> Result<Folded, FoldError> {
    let mut by_step: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut all = Vec::new();
    let mut origins = Vec::new();
    for (i, doc) in docs.iter().enumerate() {
        let steps = doc["steps"].as_array().ok_or_else(|| FoldError(format!("child {i}: no `steps`")))?;
        for s in steps {
            let step =
                s["step"].as_u64().ok_or_else(|| FoldError(format!("child {i}: a step has no number")))?;
            let pair = (num(&s["actual"], i, "actual")?, num(&s["error"], i, "error")?);
            by_step.entry(step).or_default().push(pair);
            all.push(pair);
        }
        origins.push(json!({"child": i, "origin": doc["origin"], "origin_time": doc["origin_time"]}));
    }
    if all.is_empty() {
        return Err(FoldError("the children forecast no steps".to_owned()));
    }
    let per_step: Vec<(u64, Accuracy)> = by_step.iter().map(|(k, p)| (*k, accuracy(p))).collect();
    let overall = accuracy(&all);
    let mut csv = String::from("step,n,mean_error,mae,rmse,mape\n");
    for (k, a) in &per_step {
        a.csv_row(&k.to_string(), &mut csv);
    }
    overall.csv_row("overall", &mut csv);
    let steps: Vec<Value> = per_step
        .iter()
        .map(|(k, a)| {
            let mut v = a.json();
            v["step"] = json!(k);
            v
        })
        .collect();
    let doc = json!({"origins": origins, "per_step": steps, "overall": overall.json()});
    let mut metrics = BTreeMap::from([
        ("rmse".to_owned(), overall.rmse),
        ("mae".to_owned(), overall.mae),
        ("mean_error".to_owned(), overall.mean_error),
    ]);
    if let Some(m) = overall.mape {
        metrics.insert("mape".to_owned(), m);
    }
    Ok(Folded {
        files: vec![
            FoldedFile { name: "backtest.csv", media_type: "text/csv", bytes: csv.into_bytes() },
            FoldedFile { name: "backtest.json", media_type: "application/json", bytes: pretty(&doc) },
        ],
        metrics,
    })
}

fn pretty(v: &Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec_pretty(v).unwrap_or_default();
    bytes.push(b'\n');
    bytes
}

/// One parameter's rank histogram and its chi-square test of uniformity.
#[derive(Debug, Clone, PartialEq)]
struct Histogram {
    counts: Vec<u64>,
    chi2: f64,
    df: u32,
    p_value: f64,
}

fn histogram(ranks: &[u64], draws: u64, bins: u64) -> Histogram {
    let mut counts = vec![0u64; bins as usize];
    for r in ranks {
        counts[(r * bins / (draws + 1)) as usize] += 1;
    }
    let expected = ranks.len() as f64 / bins as f64;
    let chi2 = counts.iter().map(|c| (*c as f64 - expected).powi(2) / expected).sum::<f64>();
    let df = (bins - 1) as u32;
    Histogram { counts, chi2, df, p_value: crate::numerics::chi2_upper(chi2, df) }
}

/// Simulation-based calibration: each child's ranks.json holds the ranks of
/// the true parameter values among its posterior draws (0..=draws). Ranks are
/// binned into `bins` equal cells per parameter and tested for uniformity by
/// Pearson's chi-square (`bins` − 1 degrees of freedom).
fn sbc(docs: &[Value]) -> Result<Folded, FoldError> {
    let first = &docs[0];
    let draws = first["draws"].as_u64().ok_or_else(|| FoldError("child 0: no `draws`".to_owned()))?;
    let bins = first["bins"].as_u64().filter(|b| (2..=1000).contains(b) && (draws + 1) % b == 0);
    let bins = bins.ok_or_else(|| FoldError("child 0: `bins` does not split draws + 1 evenly".to_owned()))?;
    let names: Vec<String> =
        first["ranks"].as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default();
    if names.is_empty() {
        return Err(FoldError("child 0: no `ranks`".to_owned()));
    }
    let mut ranks: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for (i, doc) in docs.iter().enumerate() {
        if doc["draws"].as_u64() != Some(draws) || doc["bins"].as_u64() != Some(bins) {
            return Err(FoldError(format!("child {i}: its draws or bins differ from child 0's")));
        }
        let own = doc["ranks"].as_object().ok_or_else(|| FoldError(format!("child {i}: no `ranks`")))?;
        if own.len() != names.len() {
            return Err(FoldError(format!("child {i}: its parameters differ from child 0's")));
        }
        for name in &names {
            let r = own.get(name).and_then(Value::as_u64).filter(|r| *r <= draws);
            let r = r.ok_or_else(|| FoldError(format!("child {i}: no rank in 0..={draws} for `{name}`")))?;
            ranks.entry(name).or_default().push(r);
        }
    }
    let hists: Vec<(&str, Histogram)> = ranks.iter().map(|(n, r)| (*n, histogram(r, draws, bins))).collect();
    let mut csv = format!("simulation,{}\n", names.join(","));
    let columns: Vec<&Vec<u64>> = names.iter().filter_map(|n| ranks.get(n.as_str())).collect();
    for i in 0..docs.len() {
        let row: Vec<String> = columns.iter().map(|c| c[i].to_string()).collect();
        let _ = writeln!(csv, "{i},{}", row.join(","));
    }
    let parameters: serde_json::Map<String, Value> = hists
        .iter()
        .map(|(n, h)| {
            let v = json!({"counts": h.counts, "chi2": h.chi2, "df": h.df, "p_value": h.p_value});
            ((*n).to_owned(), v)
        })
        .collect();
    let doc = json!({"simulations": docs.len(), "draws": draws, "bins": bins, "parameters": parameters});
    let mut metrics = BTreeMap::new();
    let min_p = hists.iter().map(|(_, h)| h.p_value).fold(1.0, f64::min);
    metrics.insert("min_p_value".to_owned(), min_p);
    for (n, h) in &hists {
        let safe: String = n.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        metrics.insert(format!("p_value_{safe}"), h.p_value);
    }
    let svg = rank_plot(&hists, docs.len() as u64);
    Ok(Folded {
        files: vec![
            FoldedFile { name: "ranks.csv", media_type: "text/csv", bytes: csv.into_bytes() },
            FoldedFile { name: "sbc.json", media_type: "application/json", bytes: pretty(&doc) },
            FoldedFile { name: "ranks.svg", media_type: "image/svg+xml", bytes: svg.into_bytes() },
        ],
        metrics,
    })
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Rank histograms side by side, each with the expected count and the band
/// (normal approximation to the binomial, ±2.576 sd) that 99 % of a uniform
/// histogram's bins fall in.
fn rank_plot(hists: &[(&str, Histogram)], n: u64) -> String {
    const W: f64 = 260.0;
    const H: f64 = 180.0;
    const PAD: f64 = 24.0;
    let width = W * hists.len() as f64;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n",
        H + 2.0 * PAD
    );
    for (j, (name, h)) in hists.iter().enumerate() {
        let bins = h.counts.len() as f64;
        let p = 1.0 / bins;
        let expected = n as f64 * p;
        let sd = (n as f64 * p * (1.0 - p)).sqrt();
        let (lo, hi) = ((expected - 2.576 * sd).max(0.0), expected + 2.576 * sd);
        let top = h.counts.iter().map(|c| *c as f64).fold(hi, f64::max) * 1.1;
        let x0 = j as f64 * W + PAD;
        let (pw, ph) = (W - 2.0 * PAD, H);
        let y = |v: f64| PAD + ph - v / top * ph;
        let _ = writeln!(
            svg,
            "<rect x=\"{x0}\" y=\"{:.1}\" width=\"{pw}\" height=\"{:.1}\" fill=\"#dddddd\"/>",
            y(hi),
            y(lo) - y(hi)
        );
        for (b, c) in h.counts.iter().enumerate() {
            let bx = x0 + b as f64 * pw / bins;
            let _ = writeln!(
                svg,
                "<rect x=\"{bx:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#1f77b4\"/>",
                y(*c as f64),
                pw / bins - 1.0,
                y(0.0) - y(*c as f64)
            );
        }
        let _ = writeln!(
            svg,
            "<line x1=\"{x0}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#333333\" stroke-dasharray=\"4 3\"/>",
            x0 + pw,
            y(expected),
            y(expected)
        );
        let _ = writeln!(
            svg,
            "<text x=\"{x0}\" y=\"{:.1}\">{} (p = {:.3})</text>",
            PAD - 8.0,
            escape(name),
            h.p_value
        );
    }
    svg.push_str("</svg>\n");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, rel: f64) -> bool {
        (a - b).abs() <= rel * b.abs().max(1e-300)
    }

    fn fan(name: &str) -> FanOut {
        crate::find(name).and_then(|m| m.fan_out).expect("a fan-out parent")
    }

    fn child(origin: u64, steps: &[(f64, f64)]) -> Vec<u8> {
        let steps: Vec<Value> = steps
            .iter()
            .enumerate()
            .map(|(k, (a, f))| json!({"step": k + 1, "actual": a, "forecast": f, "error": a - f}))
            .collect();
        serde_json::to_vec(&json!({"origin": origin, "origin_time": null, "steps": steps}))
            .unwrap_or_default()
    }

    #[test]
    fn a_backtest_pools_errors_per_step_and_overall() {
        let results = vec![child(10, &[(10.0, 8.0), (20.0, 25.0)]), child(11, &[(5.0, 6.0), (4.0, 4.0)])];
        let f = fold(&fan("ts.backtest"), &results).expect("folds");
        let doc: Value = serde_json::from_slice(&f.files[1].bytes).unwrap_or_default();
        let step1 = &doc["per_step"][0];
        assert_eq!(step1["n"], 2);
        assert!(close(step1["rmse"].as_f64().unwrap_or(0.0), ((4.0 + 1.0) / 2.0f64).sqrt(), 1e-15));
        assert!(close(step1["mape"].as_f64().unwrap_or(0.0), 100.0 * (0.2 + 0.2) / 2.0, 1e-15));
        assert!(close(step1["mean_error"].as_f64().unwrap_or(0.0), (2.0 - 1.0) / 2.0, 1e-15));
        let overall = &doc["overall"];
        assert_eq!(overall["n"], 4);
        assert!(close(f.metrics["mae"], (2.0 + 5.0 + 1.0 + 0.0) / 4.0, 1e-15));
        let csv = String::from_utf8(f.files[0].bytes.clone()).unwrap_or_default();
        assert_eq!(csv.lines().count(), 4, "{csv}");
        assert!(csv.starts_with("step,n,mean_error,mae,rmse,mape\n1,2,0.5,1.5,"), "{csv}");
        // An actual of 0 leaves MAPE undefined, not infinite.
        let zero = vec![child(3, &[(0.0, 1.0)]), child(4, &[(2.0, 1.0)])];
        let f = fold(&fan("ts.backtest"), &zero).expect("folds");
        assert!(!f.metrics.contains_key("mape"));
        assert!(String::from_utf8_lossy(&f.files[0].bytes).contains("\noverall,2,0,1,1,\n"));
    }

    fn ranks(draws: u64, bins: u64, rs: &[(&str, u64)]) -> Vec<u8> {
        let ranks: serde_json::Map<String, Value> =
            rs.iter().map(|(n, r)| ((*n).to_owned(), json!(r))).collect();
        serde_json::to_vec(&json!({"draws": draws, "bins": bins, "ranks": ranks})).unwrap_or_default()
    }

    #[test]
    fn sbc_bins_ranks_and_tests_them_for_uniformity() {
        // 100 simulations, ranks spread evenly over 0..=99: every bin holds 10.
        let even: Vec<Vec<u8>> = (0..100).map(|i| ranks(99, 10, &[("mu", i), ("sigma", 99 - i)])).collect();
        let f = fold(&fan("sbc"), &even).expect("folds");
        let doc: Value = serde_json::from_slice(&f.files[1].bytes).unwrap_or_default();
        assert_eq!(doc["parameters"]["mu"]["counts"], json!(vec![10; 10]));
        assert_eq!(doc["parameters"]["mu"]["chi2"], 0.0);
        assert_eq!(f.metrics["min_p_value"], 1.0);
        // All ranks at the edges (an over-confident posterior): far from uniform.
        let edges: Vec<Vec<u8>> =
            (0..100).map(|i| ranks(99, 10, &[("mu", if i % 2 == 0 { 0 } else { 99 })])).collect();
        let f = fold(&fan("sbc"), &edges).expect("folds");
        assert!(f.metrics["p_value_mu"] < 1e-30, "{:?}", f.metrics);
        let csv = String::from_utf8(f.files[0].bytes.clone()).unwrap_or_default();
        assert!(csv.starts_with("simulation,mu\n0,0\n1,99\n"), "{csv}");
        let svg = String::from_utf8(f.files[2].bytes.clone()).unwrap_or_default();
        assert!(svg.starts_with("<svg") && svg.contains("mu (p = 0.000)"), "{svg}");
    }

    #[test]
    fn results_that_are_not_the_methods_are_refused_in_words() {
        let bad = fold(&fan("sbc"), &[ranks(99, 10, &[("mu", 3)]), b"nope".to_vec()]);
        assert!(bad.is_err_and(|e| e.0.contains("child 1's ranks.json is not JSON")));
        let differ = fold(&fan("sbc"), &[ranks(99, 10, &[("mu", 3)]), ranks(49, 10, &[("mu", 3)])]);
        assert!(differ.is_err_and(|e| e.0.contains("child 1: its draws or bins differ")));
        let out_of_range = fold(&fan("sbc"), &[ranks(99, 10, &[("mu", 100)])]);
        assert!(out_of_range.is_err_and(|e| e.0.contains("no rank in 0..=99 for `mu`")));
        let no_steps = fold(&fan("ts.backtest"), &[b"{}".to_vec()]);
        assert!(no_steps.is_err_and(|e| e.0.contains("child 0: no `steps`")));
    }
}
