//! Where a run's objects live in the data bucket. Every key starts with
//! `t/{tenant}/`, so a tenant's data can be listed, exported or deleted by
//! prefix, and bucket rules can be written per tenant.
//!
//! ```text
//! t/{tenant}/p/{project}/datasets/{dataset}.csv
//! t/{tenant}/p/{project}/runs/{run}/a{attempt}/outputs/{name}
//! t/{tenant}/p/{project}/runs/{run}/a{attempt}/checkpoint.json
//! t/{tenant}/p/{project}/runs/{run}/a{attempt}/tasks/{i}/…   (fan-out tasks)
//! ```

use mapi_domain::{AttemptNo, DatasetId, ProjectId, RunId, TenantId};

pub fn dataset(tenant: &TenantId, project: &ProjectId, id: &DatasetId) -> String {
    format!("t/{tenant}/p/{project}/datasets/{id}.csv")
}

/// The directory of one task of an attempt (`tasks/{i}/` only when there are several).
pub fn task_dir(
    tenant: &TenantId,
    project: &ProjectId,
    run: &RunId,
    attempt: AttemptNo,
    task: u32,
    task_count: u32,
) -> String {
    let base = format!("t/{tenant}/p/{project}/runs/{run}/a{attempt}");
    if task_count > 1 { format!("{base}/tasks/{task}") } else { base }
}

pub fn output(dir: &str, name: &str) -> String {
    format!("{dir}/outputs/{name}")
}

pub fn checkpoint(dir: &str) -> String {
    format!("{dir}/checkpoint.json")
}
