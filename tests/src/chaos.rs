//! A chaos proxy for queue deliveries: an HTTP server on 127.0.0.1 that
//! forwards each delivery to the platform and, seeded per task name,
//! delivers some of them twice: one after the other (a duplicate, as Cloud
//! Tasks may after a lost acknowledgement) or both at once (overlapping
//! deliveries of one task). It answers with the first forward's status.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use bytes::Bytes;

use crate::scripted::Rng;

/// How often deliveries are doubled, in per cent.
#[derive(Clone, Copy, Debug)]
pub struct Faults {
    pub seed: u64,
    pub duplicate_percent: u64,
    pub overlap_percent: u64,
}

impl Faults {
    /// What to do with the `n`-th delivery of task `name`: the same answer
    /// every run for the same seed.
    pub fn plan(&self, name: &str, n: u32) -> Plan {
        let mut h = DefaultHasher::new();
        (name, n).hash(&mut h);
        let mut rng = Rng::new(self.seed ^ h.finish());
        let roll = rng.below(100);
        if roll < self.overlap_percent {
            Plan::Overlap
        } else if roll < self.overlap_percent + self.duplicate_percent {
            Plan::Duplicate
        } else {
            Plan::Once
        }
    }
}

/// One delivery's fate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    Once,
    /// Delivered, then delivered again.
    Duplicate,
    /// Delivered twice at the same time.
    Overlap,
}

#[derive(Debug, Default)]
pub struct Tally {
    pub forwarded: AtomicUsize,
    pub duplicated: AtomicUsize,
    pub overlapped: AtomicUsize,
}

struct ProxyState {
    target: Mutex<String>,
    /// Replaces the delivery's `Authorization` when set.
    auth: Mutex<Option<String>>,
    faults: Faults,
    http: reqwest::Client,
    tally: Arc<Tally>,
}

/// A running proxy. Stops when dropped.
pub struct ChaosProxy {
    pub url: String,
    pub tally: Arc<Tally>,
    state: Arc<ProxyState>,
    server: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ChaosProxy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChaosProxy").field("url", &self.url).finish_non_exhaustive()
    }
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(s: &ProxyState, uri: &Uri, headers: &HeaderMap, body: Bytes) -> StatusCode {
    s.tally.forwarded.fetch_add(1, Ordering::Relaxed);
    let target = s.target.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let auth = s.auth.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut req = s.http.post(format!("{target}{}", uri.path())).body(body);
    for (k, v) in headers {
        let keep = k.as_str().starts_with("x-cloudtasks-")
            || k == "content-type"
            || (k == "authorization" && auth.is_none());
        if keep {
            req = req.header(k, v);
        }
    }
    if let Some(token) = auth {
        req = req.bearer_auth(token);
    }
    match req.send().await {
        Ok(r) => StatusCode::from_u16(r.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY),
        Err(_) => StatusCode::BAD_GATEWAY,
    }
}

async fn handle(State(s): State<Arc<ProxyState>>, uri: Uri, headers: HeaderMap, body: Bytes) -> StatusCode {
    let name = headers.get("x-cloudtasks-taskname").and_then(|v| v.to_str().ok()).unwrap_or_default();
    let n = headers
        .get("x-cloudtasks-taskretrycount")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    match s.faults.plan(name, n) {
        Plan::Once => forward(&s, &uri, &headers, body).await,
        Plan::Duplicate => {
            s.tally.duplicated.fetch_add(1, Ordering::Relaxed);
            let first = forward(&s, &uri, &headers, body.clone()).await;
            forward(&s, &uri, &headers, body).await;
            first
        }
        Plan::Overlap => {
            s.tally.overlapped.fetch_add(1, Ordering::Relaxed);
            let (a, _) =
                tokio::join!(forward(&s, &uri, &headers, body.clone()), forward(&s, &uri, &headers, body));
            a
        }
    }
}

impl ChaosProxy {
    /// Starts a proxy forwarding to `target` (a base URL).
    pub async fn start(target: &str, faults: Faults) -> ChaosProxy {
        let tally = Arc::new(Tally::default());
        let state = Arc::new(ProxyState {
            target: Mutex::new(target.trim_end_matches('/').to_owned()),
            auth: Mutex::new(None),
            faults,
            http: reqwest::Client::new(),
            tally: tally.clone(),
        });
        let app = axum::Router::new().fallback(handle).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ChaosProxy { url, tally, state, server }
    }

    /// Forwards to `target` from now on.
    pub fn set_target(&self, target: &str) {
        *self.state.target.lock().unwrap_or_else(|e| e.into_inner()) =
            target.trim_end_matches('/').to_owned();
    }

    /// Presents `token` to the target instead of the delivery's own
    /// credential: what Cloud Run's IAM check in front of a service does
    /// with Cloud Tasks' OIDC token, turned into the platform's internal caller.
    pub fn set_auth(&self, token: &str) {
        *self.state.auth.lock().unwrap_or_else(|e| e.into_inner()) = Some(token.to_owned());
    }
}
