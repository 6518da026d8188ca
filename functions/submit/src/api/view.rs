//! Builds a run's API view from its documents. A finished run's view lists
//! its outputs with the platform's route each is downloaded through
//! ([`super::outputs`], [`link`]): a view mints no storage link, so it is neither
//! audited nor counted as egress; each download is.

use mapi_api::views::{AttemptView, CostView, OutputView, RunView};
use mapi_domain::{ModelVersionId, RunState};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_schema::{AttemptDoc, LedgerEntry, ModelVersionDoc, ProgressDoc, layout};

pub async fn build(state: &AppState, run: &RunDoc) -> Result<RunView, ApiError> {
    let attempts: Vec<AttemptDoc> = mapi_schema::of_run(&*state.store, run.id()).await?;
    let ledger: Vec<LedgerEntry> = mapi_schema::of_run(&*state.store, run.id()).await?;
    let progress: Option<ProgressDoc> =
        mapi_schema::get(&*state.store, &AttemptDoc::id_of(run.id(), run.attempt())).await?;
    let summary = progress.as_ref().map(|p| p.progress.summary());

    // Outputs are what the attempt wrote to the object store, not what its
    // events announced: an `output` event delayed past the `complete` that
    // finalized the run is refused, but the object it announced is there.
    let mut outputs = Vec::new();
    if matches!(run.state(), RunState::Succeeded | RunState::Partial) {
        for task in 0..run.task_count() {
            let dir = layout::task_dir(
                run.tenant(),
                run.project(),
                run.id(),
                run.attempt(),
                task,
                run.task_count(),
            );
            let prefix = layout::output(&dir, "");
            // One task's outputs keep their names; a fan-out's are `{task}/{name}`.
            let shown = |name: &str| {
                if run.task_count() == 1 { name.to_owned() } else { format!("{task}/{name}") }
            };
            let mut token: Option<String> = None;
            loop {
                let page = state.objects.list(&prefix, token.as_deref(), 100).await?;
                for meta in page.objects {
                    let name = shown(meta.key.as_str().strip_prefix(&prefix).unwrap_or_default());
                    let url = link(state, run, &name);
                    outputs.push(OutputView { name, size: meta.size, url });
                }
                match page.next_page_token {
                    Some(t) => token = Some(t),
                    None => break,
                }
            }
        }
    }
    // A fan-out parent's own outputs, folded from its children's.
    if let Some(aggregate) = run.aggregate() {
        for name in &aggregate.outputs {
            let key = mapi_objects::ObjectKey::parse(&layout::aggregate(
                run.tenant(),
                run.project(),
                run.id(),
                name,
            ))?;
            let size = state.objects.head(&key).await?.size;
            outputs.push(OutputView { name: name.clone(), size, url: link(state, run, name) });
        }
    }
    // Created in the commit that made the run succeed, for a method that
    // fits a model; a run of any other method has none.
    let model_version = if run.state() == RunState::Succeeded {
        let id = ModelVersionId::of_run(run.id());
        mapi_schema::get::<ModelVersionDoc>(&*state.store, id.as_str()).await?.map(|v| v.id)
    } else {
        None
    };
    let logged = mapi_schema::get::<mapi_schema::RunLogDoc>(&*state.store, run.id().as_str()).await?;
    let stored = stored_results(state, run).await?;
    let progress = progress.as_ref().map(|p| &p.progress);
    let children = super::children::of(run, progress, &stored, &attempts, &ledger, &outputs);
    let mut view = assemble(run, &attempts, &ledger, summary, outputs, model_version);
    view.children = children;
    if let Some(d) = logged {
        view.logged_metrics = d.log.latest();
        view.logged_params = d.log.params;
    }
    Ok(view)
}

/// The children of a fan-out parent's run that ended without succeeding
/// whose result is stored in its current attempt (one listing of the
/// attempt's directory): such an attempt is finalized without waiting for
/// its children's last events. None for any other run: a running one's
/// children report as they go, and a succeeded one's all completed.
async fn stored_results(state: &AppState, run: &RunDoc) -> Result<std::collections::BTreeSet<u32>, ApiError> {
    let mut found = std::collections::BTreeSet::new();
    if !run.state().is_terminal() || run.state() == RunState::Succeeded {
        return Ok(found);
    }
    let Some(fan) = mapi_methods::fan_out(run.method()) else { return Ok(found) };
    let dir = layout::attempt_dir(run.tenant(), run.project(), run.id(), run.attempt());
    let prefix = format!("{dir}/");
    let mut token: Option<String> = None;
    loop {
        let page = state.objects.list(&prefix, token.as_deref(), 1000).await?;
        for meta in page.objects {
            let name = layout::output_name(&dir, meta.key.as_str()).unwrap_or_default();
            let child =
                name.split_once('/').filter(|(_, file)| *file == fan.result).map(|(i, _)| i.parse::<u32>());
            if let Some(Ok(i)) = child {
                found.insert(i);
            }
        }
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return Ok(found),
        }
    }
}

/// The view of a run that was just accepted: nothing has happened to it yet.
pub fn of_new(run: &RunDoc) -> RunView {
    assemble(run, &[], &[], None, Vec::new(), None)
}

fn assemble(
    run: &RunDoc,
    attempts: &[AttemptDoc],
    ledger: &[LedgerEntry],
    summary: Option<mapi_events::progress::Summary>,
    outputs: Vec<OutputView>,
    model_version: Option<ModelVersionId>,
) -> RunView {
    let attempts = attempts
        .iter()
        .map(|a| AttemptView {
            attempt: a.attempt,
            class: a.class,
            execution: a.handle.clone(),
            submitted_at: a.submitted_at,
            started: a.started,
            finished: a.finished,
            status: a.status.clone(),
            gpus: a.gpus(),
            charge: ledger.iter().find(|l| l.attempt == a.attempt).map(|l| l.charge.clone()),
        })
        .collect();
    RunView {
        id: run.id().clone(),
        tenant: run.tenant().clone(),
        project: run.project().clone(),
        method: run.method().to_owned(),
        params: run.params().clone(),
        dataset: run.dataset().clone(),
        class: run.class(),
        requested_class: run.requested_class(),
        timeout_s: run.timeout_s(),
        tasks: run.task_count(),
        state: run.state(),
        attempt: run.attempt(),
        created_at: run.created_at(),
        updated_at: run.updated_at(),
        created_by: run.created_by().clone(),
        labels: run.labels().clone(),
        retry_of: run.retry_of().cloned(),
        plugin: run.plugin().cloned(),
        error: run.error().cloned(),
        warnings: run.warnings().to_vec(),
        stalled: run.stalled(),
        waiting: run
            .waiting()
            .map(|w| mapi_api::views::WaitingView { reason: w.reason.clone(), since: w.since }),
        progress: summary,
        logged_metrics: Default::default(),
        logged_params: Default::default(),
        attempts,
        history: run.history().to_vec(),
        outputs,
        model_version,
        cost: CostView {
            estimate_micros: run.estimate().amount_micros,
            charged_micros: run.charged_micros(),
            currency: run.estimate().currency.clone(),
            price_table: run.estimate().price_table.clone(),
            note: "estimates at list prices".to_owned(),
        },
        children: Vec::new(),
        aggregate: run.aggregate().cloned(),
    }
}

/// Where a run's view says `name` is downloaded from.
pub fn link(state: &AppState, run: &RunDoc, name: &str) -> String {
    format!("{}/v1/runs/{}/outputs/{name}", state.config.public_url.trim_end_matches('/'), run.id())
}
