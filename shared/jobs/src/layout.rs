//! Where a job's objects live in the data bucket:
//!
//! ```text
//! t/{tenant}/p/{project}/jobs/{job}/manifest.json         method, params, item count
//! t/{tenant}/p/{project}/jobs/{job}/items/{chunk}.json    the items, CHUNK_ITEMS to an object
//! t/{tenant}/p/{project}/jobs/{job}/results/{idx}.json    on success
//! t/{tenant}/p/{project}/jobs/{job}/errors/{idx}.json     on terminal failure
//! t/{tenant}/p/{project}/jobs/{job}/usage/{idx}.json      always (duration, attempts)
//! t/{tenant}/p/{project}/jobs/{job}/logs/{idx}.jsonl      one line per attempt
//! ```

use mapi_domain::{JobId, ProjectId, TenantId};

/// Items per manifest chunk: a fan-out batch reads one or two chunks.
pub const CHUNK_ITEMS: u32 = 1000;

/// Every object of the job starts with this.
pub fn prefix(tenant: &TenantId, project: &ProjectId, job: &JobId) -> String {
    format!("t/{tenant}/p/{project}/jobs/{job}/")
}

pub fn manifest(base: &str) -> String {
    format!("{base}manifest.json")
}

pub fn chunk(base: &str, chunk: u64) -> String {
    format!("{base}items/{chunk:06}.json")
}

pub fn result(base: &str, idx: u64) -> String {
    format!("{base}results/{idx}.json")
}

pub fn error(base: &str, idx: u64) -> String {
    format!("{base}errors/{idx}.json")
}

pub fn usage(base: &str, idx: u64) -> String {
    format!("{base}usage/{idx}.json")
}

pub fn log(base: &str, idx: u64) -> String {
    format!("{base}logs/{idx}.jsonl")
}
