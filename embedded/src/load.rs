//! Load for benchmarks and suites: many active runs made in a few commits,
//! as copies of one run the API admitted and dispatched, instead of
//! thousands of submits.

use std::collections::BTreeMap;

use mapi_domain::{AttemptNo, RunId};
use mapi_entropy::Entropy;
use mapi_executor::{AttemptSubmit, Executor};
use mapi_lifecycle::RunDoc;
use mapi_platform::AppState;
use mapi_schema::{AttemptDoc, tx_put};
use mapi_store::{StoreError, transact};

/// Why copies could not be made.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("run {0} or its first attempt is not in the store")]
    Missing(RunId),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the executor refused a copy's execution: {0}")]
    Executor(String),
    #[error("a copy could not be made: {0}")]
    Copy(String),
}

/// Writes `n - 1` copies of run `id` (dispatched: its first attempt has an
/// execution) and of its first attempt under new ids drawn from `entropy`,
/// each updated a microsecond after the one before and created a
/// millisecond before it,
/// each copy's execution submitted to `executor`, so the store holds `n`
/// runs like it. Written 500 runs per commit.
pub async fn copy_dispatched_run(
    state: &AppState,
    executor: &dyn Executor,
    id: &RunId,
    n: usize,
    entropy: &dyn Entropy,
) -> Result<(), LoadError> {
    let store = &*state.store;
    let missing = || LoadError::Missing(id.clone());
    let template: RunDoc = mapi_schema::get(store, id.as_str()).await?.ok_or_else(missing)?;
    let attempt: AttemptDoc =
        mapi_schema::get(store, &AttemptDoc::id_of(id, AttemptNo::FIRST)).await?.ok_or_else(missing)?;
    // The run's fields are the lifecycle's, so a copy is made from its
    // stored form under another id.
    let stored = serde_json::to_value(&template).map_err(|e| LoadError::Copy(e.to_string()))?;
    let mut copies = Vec::with_capacity(n);
    for i in 1..n {
        let bytes = mapi_entropy::bytes(entropy).map_err(|e| LoadError::Copy(e.to_string()))?;
        let run_id = RunId::generate(template.created_at(), bytes);
        let mut copy = stored.clone();
        copy["id"] = serde_json::json!(run_id.as_str());
        // Each copy changed a microsecond after the one before, as runs
        // changed by separate commits are.
        let updated = template.updated_at() + std::time::Duration::from_micros(i as u64);
        copy["updated_at"] = serde_json::to_value(updated).map_err(|e| LoadError::Copy(e.to_string()))?;
        // And created a millisecond before it, so listings page through
        // distinct instants as they would over a real history.
        let created = template.created_at() - std::time::Duration::from_millis(i as u64);
        copy["created_at"] = serde_json::to_value(created).map_err(|e| LoadError::Copy(e.to_string()))?;
        let run: RunDoc = serde_json::from_value(copy).map_err(|e| LoadError::Copy(e.to_string()))?;
        let mut a = attempt.clone();
        a.run = run_id.clone();
        let submit = AttemptSubmit {
            run: run_id,
            attempt: AttemptNo::FIRST,
            nonce: a.nonce.clone(),
            class: a.class,
            method: template.method().to_owned(),
            base: template.plugin().map(|p| p.base.clone()),
            timeout: std::time::Duration::from_secs(u64::from(template.timeout_s())),
            task_count: template.task_count(),
            env: BTreeMap::new(),
        };
        a.handle = Some(executor.submit(&submit).await.map_err(|e| LoadError::Executor(e.to_string()))?);
        copies.push((run, a));
    }
    for chunk in copies.chunks(500) {
        transact::<_, StoreError, _, _>(store, |mut tx| async move {
            for (run, a) in chunk {
                tx_put(&mut tx, run)?;
                tx_put(&mut tx, a)?;
            }
            Ok(tx.finish(()))
        })
        .await?;
    }
    Ok(())
}
