//! `mapi runs compare A B …`: runs side by side, a row per field (what was
//! asked, each param, each metric the run reported, the outcome and the
//! charge), a column per run; rows whose values differ are marked.

use mapi_api::views::RunView;
use serde::Serialize;

use crate::output::{Cell, Table};

/// One field across the runs compared.
#[derive(Debug, PartialEq, Serialize)]
pub struct Row {
    pub field: String,
    /// One value per run, in the order asked; `None` where a run has no such field.
    pub values: Vec<Option<String>>,
    pub differs: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct Comparison {
    pub runs: Vec<String>,
    pub rows: Vec<Row>,
}

fn row(field: String, values: Vec<Option<String>>) -> Row {
    let differs = values.windows(2).any(|w| w[0] != w[1]);
    Row { field, values, differs }
}

/// A metric as people read it: up to 6 significant decimals, no trailing zeros.
fn metric(v: f64) -> String {
    let s = format!("{v:.6}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if matches!(s, "" | "-" | "-0") { "0".to_owned() } else { s.to_owned() }
}

/// The rows comparing `runs`: the spec, then `params.*`, then `metrics.*`
/// (each the union over the runs, sorted), then the state and the charge.
pub fn compare(runs: &[RunView]) -> Comparison {
    let each = |f: &dyn Fn(&RunView) -> Option<String>| runs.iter().map(f).collect::<Vec<_>>();
    let mut rows = vec![
        row("name".into(), each(&|r| r.labels.name.clone())),
        row("method".into(), each(&|r| Some(r.method.clone()))),
        row("dataset".into(), each(&|r| Some(r.dataset.to_string()))),
        row("class".into(), each(&|r| Some(r.requested_class.to_string()))),
    ];
    // A param or metric people logged stands beside the spec's and the
    // method's; where both name one, the logged value is shown.
    let param =
        |r: &RunView, k: &String| r.logged_params.get(k).or_else(|| r.params.get(k)).map(|v| v.to_string());
    let params: std::collections::BTreeSet<&String> =
        runs.iter().flat_map(|r| r.params.keys().chain(r.logged_params.keys())).collect();
    for k in params {
        rows.push(row(format!("params.{k}"), each(&|r| param(r, k))));
    }
    let reported = |r: &RunView, k: &String| {
        r.logged_metrics
            .get(k)
            .copied()
            .or_else(|| r.progress.as_ref().and_then(|p| p.metrics.get(k).copied()))
    };
    let metrics: std::collections::BTreeSet<&String> = runs
        .iter()
        .flat_map(|r| r.progress.iter().flat_map(|p| p.metrics.keys()).chain(r.logged_metrics.keys()))
        .collect();
    for k in metrics {
        rows.push(row(format!("metrics.{k}"), each(&|r| reported(r, k).map(metric))));
    }
    rows.push(row("state".into(), each(&|r| Some(r.state.to_string()))));
    let charged = |r: &RunView| Some(crate::output::money(r.cost.charged_micros, &r.cost.currency));
    rows.push(row("charged".into(), each(&charged)));
    Comparison { runs: runs.iter().map(|r| r.id.to_string()).collect(), rows }
}

/// The comparison as a table: a column per run, `≠` before a field whose values differ.
pub fn table(c: &Comparison) -> Table {
    let mut headers = vec!["", "field"];
    headers.extend(c.runs.iter().map(String::as_str));
    let mut table = Table::new(&headers).flex(&[1]);
    for r in &c.rows {
        let mut cells: Vec<Cell> = vec![if r.differs { "≠" } else { "" }.into(), r.field.as_str().into()];
        cells.extend(r.values.iter().map(|v| Cell::from(v.as_deref().unwrap_or("—"))));
        table.row(cells);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_read_as_people_write_them() {
        assert_eq!(metric(0.995_479_27), "0.995479");
        assert_eq!(metric(2.0), "2");
        assert_eq!(metric(-0.0000001), "0");
        assert_eq!(metric(-1.5), "-1.5");
    }

    #[test]
    fn a_row_differs_only_when_its_values_do() {
        assert!(!row("a".into(), vec![Some("1".into()), Some("1".into())]).differs);
        assert!(row("a".into(), vec![Some("1".into()), None]).differs);
        assert!(row("a".into(), vec![Some("1".into()), Some("2".into())]).differs);
    }
}
