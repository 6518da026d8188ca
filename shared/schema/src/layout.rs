//! Where a run's objects live in the data bucket. Every key starts with
//! `t/{tenant}/`, so a tenant's data can be listed, exported or deleted by
//! prefix, and bucket rules can be written per tenant.
//!
//! ```text
//! t/{tenant}/p/{project}/datasets/{dataset}.csv
//! t/{tenant}/p/{project}/runs/{run}/a{attempt}/outputs/{name}
//! t/{tenant}/p/{project}/runs/{run}/a{attempt}/checkpoint.json
//! t/{tenant}/p/{project}/runs/{run}/a{attempt}/tasks/{i}/…   (fan-out tasks)
//! t/{tenant}/p/{project}/runs/{run}/bundle/manifest.json     (the model version)
//! t/{tenant}/p/{project}/runs/{run}/bundle/manifest.sig.json
//! t/{tenant}/p/{project}/runs/{run}/images/{name}             (images logged to the run)
//! t/{tenant}/p/{project}/runs/{run}/aggregate/{name}          (a fan-out parent's own outputs)
//! ```

use mapi_domain::{AttemptNo, DatasetId, ProjectId, RunId, TenantId};

pub fn dataset(tenant: &TenantId, project: &ProjectId, id: &DatasetId) -> String {
    format!("t/{tenant}/p/{project}/datasets/{id}.csv")
}

/// A plugin's package, content-addressed by its SHA-256.
pub fn plugin(tenant: &TenantId, project: &ProjectId, name: &str, sha256: &str) -> String {
    format!("t/{tenant}/p/{project}/plugins/{name}/{sha256}.tar")
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
    let base = attempt_dir(tenant, project, run, attempt);
    if task_count > 1 { format!("{base}/tasks/{task}") } else { base }
}

/// The prefix of every object of a run (its attempts, bundle and images),
/// ending in `/`, so it names no other run's.
pub fn run_dir(tenant: &TenantId, project: &ProjectId, run: &RunId) -> String {
    format!("t/{tenant}/p/{project}/runs/{run}/")
}

/// The prefix of a run's model-version bundle (its manifest and signature;
/// the artifacts stay where the attempt wrote them). Outside every attempt's
/// directory, so no output listing sees it.
pub fn bundle(tenant: &TenantId, project: &ProjectId, run: &RunId) -> String {
    format!("t/{tenant}/p/{project}/runs/{run}/bundle")
}

/// An image logged to a run (outside every attempt's directory, so no
/// output listing sees it).
pub fn image(tenant: &TenantId, project: &ProjectId, run: &RunId, name: &str) -> String {
    format!("t/{tenant}/p/{project}/runs/{run}/images/{name}")
}

/// An output a fan-out parent's run folded from its children (outside every
/// attempt's directory, so no attempt's output listing sees it).
pub fn aggregate(tenant: &TenantId, project: &ProjectId, run: &RunId, name: &str) -> String {
    format!("t/{tenant}/p/{project}/runs/{run}/aggregate/{name}")
}

/// The prefix of every object of an attempt (all its tasks).
pub fn attempt_dir(tenant: &TenantId, project: &ProjectId, run: &RunId, attempt: AttemptNo) -> String {
    format!("t/{tenant}/p/{project}/runs/{run}/a{attempt}")
}

/// The name an output of an attempt is shown by: `{name}` for a single
/// task, `{task}/{name}` for a fan-out (as a run's view lists them);
/// `None` for a key that is not an output of that attempt.
pub fn output_name(attempt_dir: &str, key: &str) -> Option<String> {
    let rest = key.strip_prefix(attempt_dir)?.strip_prefix('/')?;
    if let Some(name) = rest.strip_prefix("outputs/") {
        return Some(name.to_owned());
    }
    let (task, rest) = rest.strip_prefix("tasks/")?.split_once('/')?;
    let name = rest.strip_prefix("outputs/")?;
    task.parse::<u32>().ok().map(|t| format!("{t}/{name}"))
}

pub fn output(dir: &str, name: &str) -> String {
    format!("{dir}/outputs/{name}")
}

pub fn checkpoint(dir: &str) -> String {
    format!("{dir}/checkpoint.json")
}

#[cfg(test)]
mod tests {
    use mapi_domain::Timestamp;

    use super::*;

    #[test]
    fn outputs_are_named_as_the_run_view_names_them() {
        let (t, p) = (TenantId::parse("acme").expect("t"), ProjectId::parse("x").expect("p"));
        let run = RunId::generate(Timestamp::from_secs(9), [1; 10]);
        let a = AttemptNo(2);
        let dir = attempt_dir(&t, &p, &run, a);
        let one = output(&task_dir(&t, &p, &run, a, 0, 1), "model.json");
        assert_eq!(output_name(&dir, &one).as_deref(), Some("model.json"));
        let fan = output(&task_dir(&t, &p, &run, a, 3, 4), "m/coef.json");
        assert_eq!(output_name(&dir, &fan).as_deref(), Some("3/m/coef.json"));
        assert_eq!(output_name(&dir, &checkpoint(&dir)), None);
        let other = output(&task_dir(&t, &p, &run, AttemptNo(1), 0, 1), "model.json");
        assert_eq!(output_name(&dir, &other), None, "another attempt's output");
    }
}
