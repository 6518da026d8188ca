//! The runs list filtered on a metric (`?metric=r2>0.9`).
//!
//! A metric is not a field of the run: the method reports it in the
//! attempt's progress and people log it to the run's log, so no index of the
//! runs can answer a comparison on it (Firestore would need a composite
//! index per metric name, and the names are the tenants'). The list instead
//! reads the runs the other filters select, newest first, in chunks, with
//! each chunk's progress and log in one batch read, and keeps the runs whose
//! metric compares. What one page costs is bounded, not what it finds: at
//! most [`EXAMINED_PER_PAGE`] runs are examined, and a page that reached the
//! bound ends there with a token to go on from, so a page may hold fewer
//! runs than asked, even none, with more to come.

use mapi_api::tracking::MetricFilter;
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AttemptDoc, ProgressDoc, RunLogDoc, key};
use mapi_store::{Document, Query};

/// The most runs one page examines.
pub const EXAMINED_PER_PAGE: u32 = 500;
/// Runs read per store query while examining: a small `page_size` still
/// reads in chunks of this many.
const CHUNK: u32 = 100;

/// Up to `size` runs of `query` (ordered) after `token` whose metric
/// compares as `filter` says, and the token of the next page if the runs
/// examined did not reach the end.
pub async fn page(
    state: &AppState,
    query: &Query,
    filter: &MetricFilter,
    size: u32,
    token: Option<&str>,
) -> Result<(Vec<RunDoc>, Option<String>), ApiError> {
    let mut found = Vec::new();
    let mut token = token.map(str::to_owned);
    let mut examined = 0;
    loop {
        let chunk = size.max(CHUNK).min(EXAMINED_PER_PAGE - examined);
        let (docs, next) = query.page(&*state.store, chunk, token.as_deref()).await?;
        examined += u32::try_from(docs.len()).unwrap_or(u32::MAX);
        let runs = docs.iter().map(Document::decode::<RunDoc>).collect::<Result<Vec<_>, _>>()?;
        let values = latest(state, &runs, &filter.name).await?;
        for (i, (run, value)) in runs.into_iter().zip(values).enumerate() {
            if !value.is_some_and(|v| filter.holds(v)) {
                continue;
            }
            found.push(run);
            if found.len() == size as usize {
                let more = i + 1 < docs.len() || next.is_some();
                return Ok((found, more.then(|| query.cursor_after(&docs[i]).to_token())));
            }
        }
        match next {
            Some(next) if examined < EXAMINED_PER_PAGE => token = Some(next),
            next => return Ok((found, next)),
        }
    }
}

/// Each run's values of the `params.{name}` and `metrics.{name}` columns
/// (the others are the summary's own fields): one batch read of the runs'
/// logs and progress, none when no such column is asked for.
pub async fn values(
    state: &AppState,
    runs: &[RunDoc],
    columns: &[String],
) -> Result<Vec<std::collections::BTreeMap<String, serde_json::Value>>, ApiError> {
    let wanted: Vec<(&String, bool, &str)> = columns
        .iter()
        .filter_map(|c| match c.split_once('.') {
            Some(("params", n)) => Some((c, true, n)),
            Some(("metrics", n)) => Some((c, false, n)),
            _ => None,
        })
        .collect();
    if wanted.is_empty() {
        return Ok(vec![Default::default(); runs.len()]);
    }
    let docs = state.store.get(&log_and_progress_keys(runs)?, None).await?;
    let mut all = Vec::with_capacity(runs.len());
    for (run, pair) in runs.iter().zip(docs.chunks(2)) {
        let metrics = metrics(pair[1].as_ref(), pair[0].as_ref())?;
        let logged = match &pair[0] {
            Some(d) => d.decode::<RunLogDoc>()?.log.params,
            None => Default::default(),
        };
        let mut row = std::collections::BTreeMap::new();
        for (column, is_param, name) in &wanted {
            let value = if *is_param {
                logged.get(*name).or_else(|| run.params().get(*name)).cloned()
            } else {
                metrics.get(*name).map(|v| serde_json::json!(v))
            };
            if let Some(v) = value {
                row.insert((*column).clone(), v);
            }
        }
        all.push(row);
    }
    Ok(all)
}

/// Each run's log and current attempt's progress document, in pairs.
fn log_and_progress_keys(runs: &[RunDoc]) -> Result<Vec<mapi_store::DocKey>, ApiError> {
    let mut keys = Vec::with_capacity(runs.len() * 2);
    for run in runs {
        keys.push(key::<RunLogDoc>(run.id().as_str())?);
        keys.push(key::<ProgressDoc>(&AttemptDoc::id_of(run.id(), run.attempt()))?);
    }
    Ok(keys)
}

/// Each run's latest value of the metric `name`: what people logged,
/// else what the method reported in the current attempt (as a run's view
/// and `mapi runs compare` show it). One batch read for all the runs.
async fn latest(state: &AppState, runs: &[RunDoc], name: &str) -> Result<Vec<Option<f64>>, ApiError> {
    let docs = state.store.get(&log_and_progress_keys(runs)?, None).await?;
    let mut values = Vec::with_capacity(runs.len());
    for pair in docs.chunks(2) {
        values.push(metrics(pair[1].as_ref(), pair[0].as_ref())?.get(name).copied());
    }
    Ok(values)
}

/// A run's metrics as its view shows them: what the method reported in an
/// attempt (its `progress`), with what people logged to the run (its `log`)
/// over them.
pub(super) fn metrics(
    progress: Option<&Document>,
    log: Option<&Document>,
) -> Result<std::collections::BTreeMap<String, f64>, ApiError> {
    let mut metrics = match progress {
        Some(d) => d.decode::<ProgressDoc>()?.progress.metrics(),
        None => std::collections::BTreeMap::new(),
    };
    if let Some(d) = log {
        metrics.extend(d.decode::<RunLogDoc>()?.log.latest());
    }
    Ok(metrics)
}
