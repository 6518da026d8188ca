//! `Idempotency-Key` on the submits of runs and item jobs.
//!
//! A client that lost the answer to a submit retries it with the same key
//! and must get back what the first request made, whatever the quotas, the
//! rate limit or the kill switches say by then: a refusal would tell it the
//! work was not made, and a resubmit under a new key would do it twice. So
//! a key seen before is looked up and answered (200, `Idempotency-Replayed:
//! true`) before anything else is decided, and the commit looks again for
//! two first requests that race. A key reused with another request is a
//! 409: the client has a bug, not a lost answer.

use axum::http::{HeaderMap, HeaderValue};
use mapi_domain::{ProjectId, TenantId, Timestamp};
use mapi_platform::AppState;
use mapi_problem::{ApiError, ProblemCode};
use mapi_schema::IdempotencyDoc;
use sha2::{Digest, Sha256};

const HEADER: &str = "idempotency-key";

/// Which submit a key belongs to: a key names one request of one route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    Runs,
    Jobs,
}

/// A request's key, where it is stored, and the hash of what it asked.
#[derive(Clone, Debug)]
pub struct Key {
    /// The stored document's id.
    pub id: String,
    /// Hex SHA-256 of the request, to refuse a key reused with another one.
    pub request_hash: String,
}

impl Key {
    /// The key of a request, if it sent one: 1 to 255 printable ASCII
    /// characters.
    pub fn of(
        headers: &HeaderMap,
        route: Route,
        tenant: &TenantId,
        project: &ProjectId,
        request: &[u8],
    ) -> Result<Option<Key>, ApiError> {
        let Some(v) = headers.get(HEADER) else { return Ok(None) };
        let v = v
            .to_str()
            .ok()
            .filter(|v| v.bytes().all(|b| b.is_ascii_graphic() || b == b' '))
            .ok_or_else(|| ApiError::invalid("Idempotency-Key must be printable ASCII"))?;
        if v.is_empty() || v.len() > 255 {
            return Err(ApiError::invalid("Idempotency-Key must be 1 to 255 characters"));
        }
        let scope = match route {
            Route::Runs => format!("{tenant}:{project}:{v}"),
            Route::Jobs => format!("{tenant}:{project}:jobs:{v}"),
        };
        Ok(Some(Key { id: sha256_hex(scope.as_bytes()), request_hash: sha256_hex(request) }))
    }

    /// The key's earlier use, while it has not expired.
    pub async fn seen(&self, state: &AppState, now: Timestamp) -> Result<Option<IdempotencyDoc>, ApiError> {
        let doc = mapi_schema::get::<IdempotencyDoc>(&*state.store, &self.id).await?;
        Ok(doc.filter(|d| d.expires_at > now))
    }

    /// The document recording this key's first use.
    pub fn record(
        &self,
        state: &AppState,
        tenant: &TenantId,
        project: &ProjectId,
        now: Timestamp,
    ) -> IdempotencyDoc {
        IdempotencyDoc {
            id: self.id.clone(),
            tenant: tenant.clone(),
            project: project.clone(),
            run: None,
            job: None,
            request_hash: self.request_hash.clone(),
            created_at: now,
            expires_at: now + state.config.idempotency_ttl,
        }
    }
}

/// The earlier use of a key, if it was the same request; a key reused with
/// another request is refused.
pub fn same_request(seen: IdempotencyDoc, request_hash: &str) -> Result<IdempotencyDoc, ApiError> {
    if seen.request_hash != request_hash {
        return Err(ApiError::new(
            ProblemCode::FailedPrecondition,
            "this Idempotency-Key was used with a different request: use a new key",
        ));
    }
    Ok(seen)
}

/// The headers marking a replayed answer: `Idempotency-Replayed: true`, and
/// `Idempotent-Replayed`, its earlier name.
pub fn replayed_headers() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("idempotency-replayed", HeaderValue::from_static("true"));
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    headers
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}
