//! Scoring an endpoint: authorized, validated and admitted before anything
//! is sent to the host (so a refused score never wakes a scaled-to-zero
//! server), forwarded to one revision chosen by the split, then metered.
//!
//! Admission is the one admission of runs and jobs (`mapi_admission`): the
//! token's vCPU budget, the tenant's requests per minute and vCPU-seconds per
//! day and month, the platform's spend cap. A score reserves nothing: its
//! compute is known once it is answered, and is then charged in one commit
//! with its revision's statistics, the endpoint's ledger (one document per
//! minute, token and shard) and the usage counters of the tenant, the
//! platform and the token.
//!
//! Prices are `mapi_metering::score_price`'s.

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use mapi_access::Action;
use mapi_api::endpoints::ScoreRequest;
use mapi_domain::endpoint::EndpointStatus;
use mapi_domain::{ProjectId, TenantId};
use mapi_endpoints::EndpointDoc;
use mapi_endpoints::stats::{SHARDS, StatsDoc};
use mapi_hosting::server_env;
use mapi_identity::Caller;
use mapi_metering::Payer;
use mapi_platform::AppState;
use mapi_problem::ApiError;
use mapi_quota::counters::{self, Bumps, field};
use mapi_quota::{Ask, Plan};
use mapi_schema::{SCORE_LEDGER_SHARDS, ScoreLedgerEntry, tx_get, tx_put};
use mapi_store::{StoreError, transact};

use super::endpoint_access::{body_of, hosting_error, load_granted};
use mapi_admission::quota;

/// The most rows one score may send.
pub const MAX_ROWS: usize = 10_000;

/// Scores rows on the endpoint.
pub async fn score(
    state: &AppState,
    caller: &Caller,
    key: (&TenantId, &ProjectId, &str),
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let loaded = load_granted(state, caller, key, Action::Run).await?;
    if loaded.0.runs_container() {
        return Err(ApiError::precondition(format!(
            "endpoint {alias} runs its own container, which speaks its own protocol: call it at \
             …/v2/models/{alias}/infer, …/v1/models/{alias}:predict or …/endpoints/{alias}/invocations",
            alias = loaded.0.alias
        )));
    }
    let req: ScoreRequest = body_of(headers, &body)?;
    score_loaded(state, caller, loaded, req.rows.len(), body).await
}

/// A request for the chosen revision: the platform's own score body for its
/// model server, or a protocol request as the caller sent it for a container.
#[derive(Debug)]
pub struct Outbound {
    pub method: reqwest::Method,
    /// The path on the server (`/predict`, `/v2/models/m/infer`).
    pub path: String,
    pub body: Bytes,
    /// The caller's headers the server needs (its content type, the binary extension's length).
    pub headers: Vec<(header::HeaderName, HeaderValue)>,
}

/// The headers a protocol request and its answer keep when they pass through.
pub const PASSED_HEADERS: [&str; 2] = ["content-type", "inference-header-content-length"];

/// The [`PASSED_HEADERS`] of `headers` (a caller's request's, or a container's answer's).
fn passed_headers(headers: &HeaderMap) -> Vec<(header::HeaderName, HeaderValue)> {
    PASSED_HEADERS
        .iter()
        .filter_map(|n| Some((header::HeaderName::from_static(n), headers.get(*n)?.clone())))
        .collect()
}

impl Outbound {
    /// `request` to `path` of a container, with the caller's headers it needs.
    pub fn passed(method: reqwest::Method, path: String, headers: &HeaderMap, body: Bytes) -> Outbound {
        Outbound { method, path, body, headers: passed_headers(headers) }
    }
}

/// Scores `body` (a valid score request of `rows` rows) on an endpoint
/// already loaded and granted to the caller for `Run`: the one path of every
/// wire format, so each is admitted, metered and counted alike.
pub async fn score_loaded(
    state: &AppState,
    caller: &Caller,
    (doc, tenant): (EndpointDoc, mapi_schema::TenantDoc),
    rows: usize,
    body: Bytes,
) -> Result<Response, ApiError> {
    if rows == 0 || rows > MAX_ROWS {
        return Err(ApiError::invalid(format!("send 1 to {MAX_ROWS} rows, not {rows}")));
    }
    let json = vec![(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))];
    let outbound = Outbound {
        method: reqwest::Method::POST,
        path: server_env::PREDICT_PATH.into(),
        body,
        headers: json,
    };
    send_admitted(state, caller, (doc, tenant), outbound).await
}

/// Admits a request on an endpoint already loaded and granted for `Run`,
/// sends it to a revision chosen by the split, meters it and answers what
/// the server answered.
pub async fn send_admitted(
    state: &AppState,
    caller: &Caller,
    (doc, tenant): (EndpointDoc, mapi_schema::TenantDoc),
    outbound: Outbound,
) -> Result<Response, ApiError> {
    if doc.status != EndpointStatus::Ready {
        return Err(ApiError::precondition(format!(
            "endpoint {} is {}: it scores once it is ready",
            doc.alias, doc.status
        )));
    }
    let [draw, shard, seed @ ..] = mapi_entropy::bytes::<10>(&*state.entropy)?;
    let seed: String = seed.iter().map(|b| format!("{b:02x}")).collect();
    // The revision is chosen first: a plugin's model or a container runs tenant code, which the
    // kill switch stops.
    let tag = doc.choose(u32::from(draw) * 100 / 256).to_owned();
    let plugin = doc.revision(&tag).is_some_and(mapi_endpoints::Revision::runs_tenant_code);
    let request = quota::Request {
        caller,
        tenant: &doc.tenant,
        tier: tenant.tier,
        ask: Ask::Score { plugin },
        seed: &seed,
        what: format!("projects/{}/{}/endpoints/{}:score", doc.tenant, doc.project, doc.alias),
    };
    let plan = quota::admission(state, &request).await?;
    let answer = forward(state, &doc, &tag, outbound).await?;
    let scored = Scored {
        sent: answer.bytes.as_ref().map_or(0, |b| b.len() as u64),
        doc: &doc,
        tag: &tag,
        token: caller.token().map(|t| t.public_id()),
        error: answer.status >= 500 || answer.bytes.is_none(),
        elapsed: answer.elapsed,
        shard: u32::from(shard),
        seed: &seed,
    };
    meter(state, &scored, plan).await;
    respond(&doc, &tag, answer)
}

/// What the model server answered, and how long it took.
struct Answer {
    status: u16,
    /// `None` when no answer came.
    bytes: Option<Bytes>,
    /// Its headers the caller gets ([`PASSED_HEADERS`]).
    headers: Vec<(header::HeaderName, HeaderValue)>,
    elapsed: Duration,
}

/// Sends `outbound` to revision `tag` (with its ID token when it is private).
async fn forward(
    state: &AppState,
    doc: &EndpointDoc,
    tag: &str,
    outbound: Outbound,
) -> Result<Answer, ApiError> {
    let route = state.hosting.route(&doc.service, Some(tag)).await.map_err(hosting_error)?;
    // The score's time is read on the platform's clock, as every charged time is.
    let started = state.clock.now();
    let url = format!("{}{}", route.url, outbound.path);
    let mut request = state.http.request(outbound.method, url).body(outbound.body);
    for (name, value) in outbound.headers {
        request = request.header(name, value);
    }
    if let Some(a) = &route.authorization {
        request = request.header(header::AUTHORIZATION, a);
    }
    let (status, bytes, headers) = match request.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            let headers = passed_headers(r.headers());
            (status, r.bytes().await.ok(), headers)
        }
        Err(_) => (503, None, Vec::new()),
    };
    Ok(Answer { status, bytes, headers, elapsed: state.clock.now().since(started) })
}

/// The model server's answer, as the caller gets it: its status, body and
/// type, and which revision and version answered; a server that did not
/// answer is a 503 to retry, and so is the platform's model server's 5xx (a
/// container's own 5xx is its answer, in its protocol, and passes).
fn respond(doc: &EndpointDoc, tag: &str, answer: Answer) -> Result<Response, ApiError> {
    let passes = doc.runs_container() || answer.status < 500;
    let Some(bytes) = answer.bytes.filter(|_| passes) else {
        return Err(ApiError::unavailable(
            format!("the model server of {} did not answer: retry", doc.alias),
            1,
        ));
    };
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut resp = (status, bytes).into_response();
    let h = resp.headers_mut();
    for (name, value) in answer.headers {
        h.insert(name, value);
    }
    let version = doc.revision(tag).and_then(|r| r.model_version()).map(ToString::to_string);
    for (name, value) in [("x-mapi-revision", Some(tag)), ("x-mapi-model-version", version.as_deref())] {
        if let Some(Ok(v)) = value.map(HeaderValue::from_str) {
            h.insert(name, v);
        }
    }
    Ok(resp)
}

/// One answered (or failed) score, to be metered.
struct Scored<'a> {
    doc: &'a EndpointDoc,
    tag: &'a str,
    token: Option<&'a str>,
    error: bool,
    elapsed: Duration,
    /// Picks the statistics' and the ledger's shard.
    shard: u32,
    /// Picks the usage counters' shards.
    seed: &'a str,
    /// The answer's bytes, which leave the platform (egress).
    sent: u64,
}

/// Counts a score in one commit: its revision's statistics, its charge
/// (`mapi_metering::score`: the endpoint's ledger of the minute, token and
/// shard, the rollups and the usage counters), the request admission took
/// and the answer's bytes (the tenant's egress of the month). The score was answered, so its request is counted even past a
/// limit another request reached first (the guarded take fails, and the
/// commit is made again unguarded).
async fn meter(state: &AppState, s: &Scored<'_>, plan: Plan) {
    let doc = s.doc;
    let ms = u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX).max(1);
    let us = u64::try_from(s.elapsed.as_micros()).unwrap_or(u64::MAX);
    // Before the time the ledger entry is dated by: its rollup counts it.
    if let Err(e) = state.rollups_started().await {
        tracing::error!(endpoint = %doc.id, error = %e, "a score was not metered");
        return;
    }
    let now = state.clock.now();
    let stats_id = StatsDoc::id_of(&doc.id, s.tag, s.shard % SHARDS);
    let ledger_shard = s.shard % SCORE_LEDGER_SHARDS;
    let ledger_id = ScoreLedgerEntry::id_of(&doc.id, ScoreLedgerEntry::minute_of(now), s.token, ledger_shard);
    let payer = Payer { tenant: &doc.tenant, project: &doc.project, token: s.token };
    let mut admitted = Some(plan.bumps);
    loop {
        let mut requests = admitted.clone().unwrap_or_else(|| {
            let mut b = Bumps::default();
            b.add_to(&counters::tenant_minute(&doc.tenant, now), s.seed, field::REQUESTS, 1);
            b
        });
        requests.extend(mapi_metering::egress(&doc.tenant, s.sent, s.seed, now));
        let (stats_id, ledger_id, requests, payer) = (&stats_id, &ledger_id, &requests, &payer);
        let result = transact::<_, StoreError, _, _>(&*state.store, |mut tx| async move {
            let stats = tx_get::<StatsDoc>(&mut tx, stats_id).await?;
            let minute = tx_get::<ScoreLedgerEntry>(&mut tx, ledger_id).await?.unwrap_or_else(|| {
                let key = (&doc.tenant, &doc.project, doc.alias.as_str());
                ScoreLedgerEntry::empty(key, doc.accelerator.as_str(), s.token, now, ledger_shard)
            });
            let charge =
                mapi_metering::score(payer, minute, (doc.accelerator, s.elapsed, s.error), s.seed, now);
            let mut stats = stats.unwrap_or_else(|| {
                StatsDoc::empty(&doc.tenant, &doc.project, &doc.id, s.tag, s.shard % SHARDS)
            });
            stats.add(s.error, us, ms, charge.score_nanos().unwrap_or(0));
            tx_put(&mut tx, &stats)?;
            charge.write(&mut tx)?;
            requests.apply(&mut tx)?;
            Ok(tx.finish(()))
        })
        .await;
        match result {
            Err(StoreError::LimitReached { .. }) if admitted.is_some() => admitted = None,
            Err(e) => {
                tracing::error!(endpoint = %doc.id, error = %e, "a score was not metered");
                return;
            }
            Ok(()) => return,
        }
    }
}
