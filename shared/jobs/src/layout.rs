//! Where a job's objects live in the data bucket:
//!
//! ```text
//! t/{tenant}/p/{project}/jobs/{job}/manifest.json         method, params, item count
//! t/{tenant}/p/{project}/jobs/{job}/items/{chunk}.json    the items, CHUNK_ITEMS to an object
//! t/{tenant}/p/{project}/jobs/{job}/ends/{idx}.json       a large end (ItemEnd)
//! t/{tenant}/p/{project}/jobs/{job}/logs/{idx}.jsonl      lines of attempts the end does not hold
//! ```
//!
//! An item's end (its result or error, its usage and the log line of the
//! delivery that wrote it) lives in the item's marker document, written in
//! the commit that counts the item, when its JSON is at most
//! [`INLINE_END_MAX`] bytes: an item that succeeds at its first attempt
//! then costs no object and no file, only the marker. A larger end is an
//! object. The log object exists only for attempts that retried,
//! deliveries whose end another delivery's end superseded, and earlier
//! rounds' ends retry-failed reopened; an item's log is that object's
//! lines, then its end's.

use mapi_domain::{JobId, ProjectId, TenantId};

/// The largest end kept in the item's marker, in bytes of JSON. A page of
/// 200 items then reads at most about 3 MiB, and a marker stays far below a
/// Firestore document's 1 MiB.
pub const INLINE_END_MAX: usize = 16 * 1024;

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

pub fn end(base: &str, idx: u64) -> String {
    format!("{base}ends/{idx}.json")
}

pub fn log(base: &str, idx: u64) -> String {
    format!("{base}logs/{idx}.jsonl")
}
