//! A chaos proxy for queue deliveries: an HTTP server on 127.0.0.1 that
//! forwards each delivery to the platform and, seeded per task name,
//! delivers some of them twice: one after the other (a duplicate, as Cloud
//! Tasks may after a lost acknowledgement) or both at once (overlapping
//! deliveries of one task). It answers with the first forward's status.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

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
    target: String,
    faults: Faults,
    http: reqwest::Client,
    tally: Arc<Tally>,
}

/// A running proxy. Stops when dropped.
#[derive(Debug)]
pub struct ChaosProxy {
    pub url: String,
    pub tally: Arc<Tally>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for ChaosProxy {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn forward(s: &ProxyState, uri: &Uri, headers: &HeaderMap, body: Bytes) -> StatusCode {
    s.tally.forwarded.fetch_add(1, Ordering::Relaxed);
    let mut req = s.http.post(format!("{}{}", s.target, uri.path())).body(body);
    for (k, v) in headers {
        if k.as_str().starts_with("x-cloudtasks-") || k == "authorization" || k == "content-type" {
            req = req.header(k, v);
        }
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
            target: target.trim_end_matches('/').to_owned(),
            faults,
            http: reqwest::Client::new(),
            tally: tally.clone(),
        });
        let app = axum::Router::new().fallback(handle).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("proxy address"));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        ChaosProxy { url, tally, server }
    }
}
