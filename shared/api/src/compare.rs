//! Runs side by side: a row per field (what was asked, each param, each
//! metric the run reported or people logged, the outcome and the charge),
//! a value per run; rows whose values differ are marked. `mapi runs
//! compare` prints it as a table, the console's compare page as HTML.

use serde::Serialize;

use crate::views::RunView;

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

pub fn row(field: String, values: Vec<Option<String>>) -> Row {
    let differs = values.windows(2).any(|w| w[0] != w[1]);
    Row { field, values, differs }
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
        rows.push(row(format!("metrics.{k}"), each(&|r| reported(r, k).map(crate::words::number))));
    }
    rows.push(row("state".into(), each(&|r| Some(r.state.to_string()))));
    let charged = |r: &RunView| Some(mapi_cost::format_micros(r.cost.charged_micros, &r.cost.currency));
    rows.push(row("charged".into(), each(&charged)));
    Comparison { runs: runs.iter().map(|r| r.id.to_string()).collect(), rows }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_differs_only_when_its_values_do() {
        assert!(!row("a".into(), vec![Some("1".into()), Some("1".into())]).differs);
        assert!(row("a".into(), vec![Some("1".into()), None]).differs);
        assert!(row("a".into(), vec![Some("1".into()), Some("2".into())]).differs);
    }
}
