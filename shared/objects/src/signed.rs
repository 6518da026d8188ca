//! HMAC-signed URLs for the local object store, and the HTTP routes that
//! serve them (the local stand-in for Cloud Storage's XML API).
//!
//! A URL names the method, bucket, key and expiry, and carries an
//! HMAC-SHA256 of the four under the platform's URL-signing key:
//! `{base}/o/{bucket}/{key}?method=GET&expires=1796019340&sig=…`. The
//! server recomputes the MAC, compares in constant time, and refuses
//! expired URLs, so a URL cannot be widened to another object, method or time.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hmac::{Hmac, KeyInit, Mac};
use mapi_api::problem::{Problem, ProblemCode};
use mapi_clock::Clock;
use mapi_domain::Timestamp;
use serde::Deserialize;
use sha2::Sha256;

use crate::{Generation, IfGeneration, ObjectError, ObjectKey, ObjectStore, SignedMethod};

type HmacSha256 = Hmac<Sha256>;

/// Signs and verifies URLs.
#[derive(Clone)]
pub struct UrlSigner {
    key: Arc<Vec<u8>>,
    base_url: String,
}

impl std::fmt::Debug for UrlSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlSigner").field("base_url", &self.base_url).finish_non_exhaustive()
    }
}

/// Why a signed URL is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the signed URL has expired")]
    Expired,
    #[error("the URL signature is invalid")]
    Invalid,
}

impl UrlSigner {
    /// `base_url` is where the routes of [`router`] are served, without a
    /// trailing slash, e.g. `http://127.0.0.1:8080`.
    pub fn new(key: Vec<u8>, base_url: &str) -> UrlSigner {
        UrlSigner { key: Arc::new(key), base_url: base_url.trim_end_matches('/').to_owned() }
    }

    fn mac(&self, method: SignedMethod, bucket: &str, key: &str, expires: i64) -> HmacSha256 {
        let mut mac =
            HmacSha256::new_from_slice(&self.key).unwrap_or_else(|_| unreachable!("HMAC takes any key"));
        mac.update(format!("{}\n{bucket}\n{key}\n{expires}", method.as_str()).as_bytes());
        mac
    }

    pub fn sign(&self, method: SignedMethod, bucket: &str, key: &ObjectKey, expires: Timestamp) -> String {
        let secs = expires.as_secs();
        let sig = hex::encode(self.mac(method, bucket, key.as_str(), secs).finalize().into_bytes());
        format!("{}/o/{bucket}/{key}?method={}&expires={secs}&sig={sig}", self.base_url, method.as_str())
    }

    pub fn verify(
        &self,
        method: SignedMethod,
        bucket: &str,
        key: &str,
        expires: i64,
        sig: &str,
        now: Timestamp,
    ) -> Result<(), SignatureError> {
        let given = hex::decode(sig).map_err(|_| SignatureError::Invalid)?;
        self.mac(method, bucket, key, expires).verify_slice(&given).map_err(|_| SignatureError::Invalid)?;
        if now.as_secs() >= expires {
            return Err(SignatureError::Expired);
        }
        Ok(())
    }
}

/// How a bucket may be reached over HTTP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Only through signed URLs.
    Signed,
    /// Object names are unguessable secrets (the bootstrap bucket, keyed by
    /// nonce): knowing the name allows GET, and DELETE with a generation
    /// precondition. Locally this stands in for the bucket IAM that lets
    /// only the execution's service account read and delete.
    SecretNames,
}

type Buckets = HashMap<String, (Arc<dyn ObjectStore>, Access)>;

/// A refused request: its problem code and what to do about it, answered
/// as `application/problem+json` like every other route (the status is the
/// code's: 404, 403, 400, 412 for a generation that does not match, 503).
type Refusal = (ProblemCode, String);

#[derive(Clone)]
struct Served {
    buckets: Arc<Buckets>,
    signer: UrlSigner,
    clock: Arc<dyn Clock>,
}

#[derive(Deserialize)]
struct SigParams {
    method: Option<String>,
    expires: Option<i64>,
    sig: Option<String>,
}

/// The routes serving `buckets`: `GET|PUT|DELETE /o/{bucket}/{*key}`.
/// `max_upload` bounds a PUT body in bytes.
pub fn router(
    buckets: Vec<(Arc<dyn ObjectStore>, Access)>,
    signer: UrlSigner,
    clock: Arc<dyn Clock>,
    max_upload: usize,
) -> Router {
    let buckets = buckets.into_iter().map(|(s, a)| (s.bucket().to_owned(), (s, a))).collect();
    let state = Served { buckets: Arc::new(buckets), signer, clock };
    Router::new()
        .route(
            "/o/{bucket}/{*key}",
            get(get_object).put(put_object).delete(delete_object).fallback(method_not_allowed),
        )
        .layer(DefaultBodyLimit::max(max_upload))
        .with_state(state)
}

fn code_of(e: &ObjectError) -> ProblemCode {
    match e {
        ObjectError::NotFound(_) => ProblemCode::NotFound,
        ObjectError::PreconditionFailed(_) => ProblemCode::PreconditionFailed,
        ObjectError::InvalidArgument(_) => ProblemCode::InvalidArgument,
        ObjectError::Unavailable(_) => ProblemCode::Unavailable,
        ObjectError::Internal(_) => ProblemCode::Internal,
    }
}

fn refuse(code: ProblemCode, detail: &str) -> Refusal {
    (code, detail.to_owned())
}

fn respond((code, detail): Refusal) -> Response {
    let body = serde_json::to_vec(&Problem::new(code, detail)).unwrap_or_default();
    (code.status(), [("content-type", "application/problem+json")], body).into_response()
}

async fn method_not_allowed() -> Response {
    respond(refuse(
        ProblemCode::MethodNotAllowed,
        "objects are read with GET, written with PUT and removed with DELETE",
    ))
}

/// The bucket, the key and the signature of a request, or why they cannot
/// be read (in our words, not the extractor's).
fn target(
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<SigParams>, QueryRejection>,
) -> Result<(String, String, SigParams), Refusal> {
    let Path((bucket, key)) = path.map_err(|_| {
        refuse(ProblemCode::InvalidArgument, "the object path must be UTF-8 text: /o/BUCKET/KEY")
    })?;
    let Query(p) = query.map_err(|_| {
        refuse(
            ProblemCode::InvalidArgument,
            "the query must be a signed URL's: method, expires (seconds) and sig",
        )
    })?;
    Ok((bucket, key, p))
}

fn object_error(e: ObjectError) -> Refusal {
    let code = code_of(&e);
    if code.status().is_server_error() {
        tracing::error!(error = %e, "object route failed");
        return refuse(code, "the object store failed; retry later");
    }
    refuse(code, &e.to_string())
}

impl Served {
    /// Finds the bucket and checks the request may do `method` on `key`.
    fn authorize(
        &self,
        bucket: &str,
        key: &str,
        method: SignedMethod,
        p: &SigParams,
        secret_name_ok: bool,
    ) -> Result<(Arc<dyn ObjectStore>, ObjectKey), Refusal> {
        let Some((store, access)) = self.buckets.get(bucket) else {
            return Err(refuse(ProblemCode::NotFound, "no such bucket"));
        };
        let key = ObjectKey::parse(key).map_err(object_error)?;
        match access {
            Access::SecretNames if secret_name_ok => {}
            Access::SecretNames => {
                return Err(refuse(ProblemCode::Forbidden, "method not allowed on this bucket"));
            }
            Access::Signed => {
                let (Some(m), Some(expires), Some(sig)) = (&p.method, p.expires, &p.sig) else {
                    return Err(refuse(ProblemCode::Forbidden, "a signed URL is required"));
                };
                if m != method.as_str() {
                    return Err(refuse(ProblemCode::Forbidden, "the URL is signed for another method"));
                }
                self.signer
                    .verify(method, bucket, key.as_str(), expires, sig, self.clock.now())
                    .map_err(|e| refuse(ProblemCode::Forbidden, &e.to_string()))?;
            }
        }
        Ok((store.clone(), key))
    }
}

async fn get_object(
    State(s): State<Served>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<SigParams>, QueryRejection>,
) -> Response {
    let (bucket, key, p) = match target(path, query) {
        Ok(t) => t,
        Err(r) => return respond(r),
    };
    let (store, key) = match s.authorize(&bucket, &key, SignedMethod::Get, &p, true) {
        Ok(x) => x,
        Err(r) => return respond(r),
    };
    match store.get(&key, None).await {
        Ok((meta, bytes)) => {
            let mut headers = HeaderMap::new();
            if let Ok(v) = HeaderValue::from_str(&meta.content_type) {
                headers.insert("content-type", v);
            }
            headers.insert("x-goog-generation", HeaderValue::from(meta.generation.0));
            (StatusCode::OK, headers, bytes).into_response()
        }
        Err(e) => respond(object_error(e)),
    }
}

async fn put_object(
    State(s): State<Served>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<SigParams>, QueryRejection>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let (bucket, key, p) = match target(path, query) {
        Ok(t) => t,
        Err(r) => return respond(r),
    };
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return respond(refuse(
                ProblemCode::PayloadTooLarge,
                "the object is larger than this bucket accepts",
            ));
        }
        Err(_) => {
            return respond(refuse(ProblemCode::InvalidArgument, "the body could not be read to its end"));
        }
    };
    let method = if p.method.as_deref() == Some(SignedMethod::Put.as_str()) {
        SignedMethod::Put
    } else {
        SignedMethod::PutCreateOnly
    };
    let (store, key) = match s.authorize(&bucket, &key, method, &p, false) {
        Ok(x) => x,
        Err(r) => return respond(r),
    };
    let precondition = if method == SignedMethod::Put { IfGeneration::Any } else { IfGeneration::ABSENT };
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    match store.put(&key, body, &content_type, precondition).await {
        Ok(meta) => (StatusCode::OK, [("x-goog-generation", meta.generation.0.to_string())]).into_response(),
        Err(e) => respond(object_error(e)),
    }
}

async fn delete_object(
    State(s): State<Served>,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<SigParams>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let (bucket, key, p) = match target(path, query) {
        Ok(t) => t,
        Err(r) => return respond(r),
    };
    let (store, key) = match s.authorize(&bucket, &key, SignedMethod::Get, &p, true) {
        Ok(x) => x,
        Err(r) => return respond(r),
    };
    if !matches!(s.buckets.get(&bucket), Some((_, Access::SecretNames))) {
        return respond(refuse(ProblemCode::Forbidden, "objects of this bucket cannot be deleted over HTTP"));
    }
    let generation =
        headers.get("x-goog-if-generation-match").and_then(|v| v.to_str().ok()?.parse::<i64>().ok());
    let Some(generation) = generation else {
        return respond(refuse(
            ProblemCode::InvalidArgument,
            "DELETE needs an x-goog-if-generation-match header",
        ));
    };
    match store.delete(&key, IfGeneration::Match(Generation(generation))).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => respond(object_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mapi_clock::VirtualClock;

    use super::*;
    use crate::fs::FsObjectStore;

    struct Env {
        _dir: tempfile::TempDir,
        clock: Arc<VirtualClock>,
        data: Arc<dyn ObjectStore>,
        boot: Arc<dyn ObjectStore>,
        base: String,
    }

    async fn serve() -> Env {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        let clock = Arc::new(VirtualClock::new(Timestamp::from_secs(1_800_000_000)));
        let signer = UrlSigner::new(b"k".to_vec(), &base);
        let data: Arc<dyn ObjectStore> =
            Arc::new(FsObjectStore::open(dir.path(), "data", signer.clone(), clock.clone()).expect("data"));
        let boot: Arc<dyn ObjectStore> = Arc::new(
            FsObjectStore::open(dir.path(), "bootstrap", signer.clone(), clock.clone()).expect("boot"),
        );
        let app = router(
            vec![(data.clone(), Access::Signed), (boot.clone(), Access::SecretNames)],
            signer,
            clock.clone(),
            1024,
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        Env { _dir: dir, clock, data, boot, base }
    }

    fn key(s: &str) -> ObjectKey {
        ObjectKey::parse(s).expect("key")
    }

    /// Every refusal of the object routes is a problem, with the status the
    /// object protocol expects: 403, 404, 412, 413, 405, 400.
    #[tokio::test]
    async fn refusals_are_problems() {
        let env = serve().await;
        let http = reqwest::Client::new();
        let put = env
            .data
            .signed_url(SignedMethod::PutCreateOnly, &key("t/a/p.json"), Duration::from_secs(60))
            .await
            .expect("sign");
        assert_eq!(http.put(&put).body("{}").send().await.expect("put").status(), 200);
        let unsigned = format!("{}/o/data/t/a/p.json", env.base);
        let cases = [
            (http.get(&unsigned), 403, "FORBIDDEN"),
            (http.get(format!("{}/o/nope/k", env.base)), 404, "NOT_FOUND"),
            (http.put(&put).body("{}"), 412, "PRECONDITION_FAILED"),
            (http.put(&put).body(vec![b'x'; 2048]), 413, "PAYLOAD_TOO_LARGE"),
            (http.post(&unsigned), 405, "METHOD_NOT_ALLOWED"),
            (http.get(format!("{unsigned}?method=GET&expires=soon&sig=x")), 400, "INVALID_ARGUMENT"),
            (http.get(format!("{}/o/data/%FF", env.base)), 400, "INVALID_ARGUMENT"),
        ];
        for (request, status, code) in cases {
            let r = request.send().await.expect("send");
            assert_eq!(r.status().as_u16(), status, "{code}");
            let ct = r.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            assert_eq!(ct, "application/problem+json", "{code}");
            let problem: Problem =
                serde_json::from_slice(&r.bytes().await.expect("body")).expect("a problem");
            assert_eq!((problem.code.as_str(), problem.status), (code, status), "{}", problem.detail);
            assert!(!problem.detail.is_empty());
        }
    }

    #[tokio::test]
    async fn signed_get_put_and_refusals() {
        let env = serve().await;
        let http = reqwest::Client::new();
        env.data
            .put(&key("t/a/in.csv"), Bytes::from_static(b"x,y\n1,2\n"), "text/csv", IfGeneration::ABSENT)
            .await
            .expect("put");
        let url = env
            .data
            .signed_url(SignedMethod::Get, &key("t/a/in.csv"), Duration::from_secs(60))
            .await
            .expect("sign");
        let r = http.get(&url).send().await.expect("get");
        assert_eq!(r.status(), 200);
        assert!(r.headers().contains_key("x-goog-generation"));
        assert_eq!(r.text().await.expect("body"), "x,y\n1,2\n");

        // Another object with the same signature, a changed expiry, another method.
        let other = url.replace("in.csv", "out.csv");
        assert_eq!(http.get(&other).send().await.expect("get").status(), 403);
        let later = url.replace("expires=", "expires=9");
        assert_eq!(http.get(&later).send().await.expect("get").status(), 403);
        assert_eq!(http.put(&url).body("x").send().await.expect("put").status(), 403);
        assert_eq!(
            http.get(format!("{}/o/data/t/a/in.csv", env.base)).send().await.expect("get").status(),
            403
        );

        // Expiry, in virtual time.
        env.clock.advance(Duration::from_secs(61));
        assert_eq!(http.get(&url).send().await.expect("get").status(), 403);

        let put = env
            .data
            .signed_url(SignedMethod::PutCreateOnly, &key("t/a/out.json"), Duration::from_secs(60))
            .await
            .expect("sign");
        let first =
            http.put(&put).header("content-type", "application/json").body("{}").send().await.expect("put");
        assert_eq!(first.status(), 200);
        let second = http.put(&put).body("{\"overwrite\":1}").send().await.expect("put");
        assert_eq!(second.status(), 412, "a signed upload cannot overwrite");
        let (meta, bytes) = env.data.get(&key("t/a/out.json"), None).await.expect("stored");
        assert_eq!((&bytes[..], meta.content_type.as_str()), (&b"{}"[..], "application/json"));
        let ckpt = env
            .data
            .signed_url(SignedMethod::Put, &key("t/a/ckpt.json"), Duration::from_secs(60))
            .await
            .expect("sign");
        for body in ["{\"n\":1}", "{\"n\":2}"] {
            assert_eq!(
                http.put(&ckpt).body(body).send().await.expect("put").status(),
                200,
                "PUT may overwrite"
            );
        }
        let widened = put.replace("method=PUT-CREATE", "method=PUT");
        assert_eq!(
            http.put(&widened).body("x").send().await.expect("put").status(),
            403,
            "create-only cannot be widened"
        );
        let moved = http.put(put.replace("out.json", "moved")).body("{}").send().await.expect("put");
        assert_eq!(moved.status(), 403, "the signature covers the key");
        let big = env
            .data
            .signed_url(SignedMethod::PutCreateOnly, &key("t/a/big"), Duration::from_secs(60))
            .await
            .expect("sign");
        let r = http.put(&big).body(vec![0u8; 4096]).send().await.expect("put");
        assert_eq!(r.status(), 413, "uploads are bounded");
    }

    #[tokio::test]
    async fn bootstrap_objects_are_read_then_deleted_once() {
        let env = serve().await;
        let http = reqwest::Client::new();
        let g = env
            .boot
            .put(&key("0123abcd"), Bytes::from_static(b"spec"), "application/json", IfGeneration::ABSENT)
            .await
            .expect("put")
            .generation;
        let url = format!("{}/o/bootstrap/0123abcd", env.base);
        let r = http.get(&url).send().await.expect("get");
        assert_eq!(r.headers()["x-goog-generation"], g.0.to_string().as_str());
        assert_eq!(http.delete(&url).send().await.expect("delete").status(), 400, "generation is required");
        let del = || http.delete(&url).header("x-goog-if-generation-match", g.0.to_string()).send();
        assert_eq!(del().await.expect("delete").status(), 204);
        assert_eq!(del().await.expect("delete").status(), 404);
        assert_eq!(http.get(&url).send().await.expect("get").status(), 404);
        assert_eq!(http.put(&url).body("x").send().await.expect("put").status(), 403);
    }
}
